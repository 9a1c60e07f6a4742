"""`gpu-credits` commands: trust. Registered on `tools.cli.app` when imported."""
