"""`ert profile`: application kernels (hand-written YAML/JSON or Nsight Compute CSV through ert.interop) placed on the hierarchical roofline."""
