"""`ert plot`: the roofline chart and the sweep chart with matplotlib; imports the shared consumers modules and application profiles."""
