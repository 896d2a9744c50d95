"""`ert report`: one self-contained HTML page (inline SVG charts, hover text, its script and stylesheet); imports the shared consumers modules and the terminal report's cells."""
