"""`ert export`: the ceilings in other roofline tools' formats (ERT, NERSC, CSV, Nsight Compute sections, rocprof-compute, kerncraft, CARM)."""
