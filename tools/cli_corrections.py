"""`gpu-credits` commands: corrections. Registered on `tools.cli.app` when imported."""
