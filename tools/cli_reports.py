"""`gpu-credits` commands: reports. Registered on `tools.cli.app` when imported."""
