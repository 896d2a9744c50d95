"""The run config: its schema and loading (schema.py), its errors told in one line (errors.py) and the bounded YAML loader (yamlsafe.py); imports only ert.errors, and every stage may import it."""
