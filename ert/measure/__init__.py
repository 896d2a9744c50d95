"""Measuring: from a run config to raw.jsonl (the plan, the driver's loop, run modes, ranks and placement)."""
