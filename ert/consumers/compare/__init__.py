"""`ert compare` and acceptance: several machines' (or hosts') ceilings side by side, each ceiling's stable name and value, ReFrame's references."""
