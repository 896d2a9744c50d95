"""The terminal report (`ert show`, the end of a run): tables, footnotes, warnings and hosts; imports the shared consumers modules, never another product's folder except compare's ceiling names."""
