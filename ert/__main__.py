"""`python -m ert` is the `ert` command."""

import sys

from ert.cli import main

sys.exit(main())
