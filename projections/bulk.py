"""Bulk work (a replay, a re-projection, a restore) without the cyclic collector.

A fold of a large journal keeps hundreds of thousands of objects alive, and the
collector's full passes walk all of them again and again: a quarter of a replay's time.
The fold makes no reference cycles worth collecting, so the collector is paused while
it runs and resumed (if it was running) afterwards.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector for the block; nested uses are fine."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
