"""Shipped run configurations (YAML); packaged as ert.configs so a bare ert-run finds default.yaml."""
