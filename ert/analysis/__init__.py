"""Analysis: plateaus, level names and ceilings, derived from raw samples only."""
