"""JSON Schemas of the files ert writes, and their history."""
