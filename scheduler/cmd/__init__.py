"""Console entry points (see setup.cfg)."""
