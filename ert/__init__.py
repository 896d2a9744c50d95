"""ert: measure the memory and compute ceilings of a machine (a Python Empirical Roofline Toolkit)."""

__version__ = "0.1.0"
