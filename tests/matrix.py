"""Which combinations of parameters a test run takes: the default run leaves out those
another combination already covers; GPU_CREDITS_FULL_MATRIX=1 takes them all."""

from __future__ import annotations

import os

FULL_MATRIX_ENV = "GPU_CREDITS_FULL_MATRIX"


def full_matrix() -> bool:
    """Whether to run every combination of parameters, also those the default run leaves
    out (any value but empty or 0 turns it on)."""
    return os.environ.get(FULL_MATRIX_ENV, "").strip() not in ("", "0")
