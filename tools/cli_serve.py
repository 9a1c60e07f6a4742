"""`gpu-credits` commands: serve. Registered on `tools.cli.app` when imported."""
