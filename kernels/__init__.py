"""Kernel sources: Numba kernels as Python, OpenCL/CUDA kernels as files; shipped in the wheel as ert.kernels."""
