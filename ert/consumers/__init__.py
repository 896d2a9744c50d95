"""Consumers: what reads ceilings.json (reports, rooflines, profiles, comparisons, exports); they never measure."""
