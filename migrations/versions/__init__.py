"""Migration scripts, one revision each, applied in order."""
