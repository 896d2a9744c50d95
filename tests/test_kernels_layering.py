"""The layering import-linter cannot see: ert.kernels (kernels/ at the repository root, shipped as ert.kernels).

`lint-imports` walks the ert/ folder, and kernels/ is outside it (it stays at the top of the repository, where
users look for the kernel sources), so these two checks stand in for a contract over it: the kernels import no
part of ert (a kernel is a leaf: its FLOPs and bytes per element are stated in its comments and mirrored by
ert.spec, never imported), and only the backends load them.
"""

from __future__ import annotations

import ast
from importlib import resources
from pathlib import Path

import ert

ERT = Path(ert.__file__).resolve().parent


def _imports(tree: ast.AST) -> set[str]:
    """Every module an ``import`` or ``from ... import`` names, and every package ``resources.files`` opens."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "files"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            out.add(node.args[0].value)
    return out


def test_the_installed_kernels_import_no_part_of_ert():
    sources = [p for p in resources.files("ert.kernels").iterdir() if p.name.endswith(".py")]
    assert {p.name for p in sources} >= {"__init__.py", "numba_cpu.py"}
    for path in sources:
        names = _imports(ast.parse(path.read_text()))
        assert not [n for n in names if n == "ert" or n.startswith("ert.")], (path.name, sorted(names))


def test_only_the_backends_load_the_kernels():
    loaders = set()
    for path in ERT.rglob("*.py"):
        if any(n == "ert.kernels" or n.startswith("ert.kernels.") for n in _imports(ast.parse(path.read_text()))):
            loaders.add(".".join(path.relative_to(ERT.parent).with_suffix("").parts))
    assert loaders, "no module loads ert.kernels: the check has gone blind"
    assert all(m.startswith("ert.backends.") for m in loaders), sorted(loaders)
