"""Bulk work (a replay, a re-projection, a restore) without the cyclic collector.

A fold of a large journal keeps hundreds of thousands of objects alive, and the
collector's full passes walk all of them again and again: a quarter of a replay's time.
The fold makes no reference cycles worth collecting, so the collector is paused while
it runs and resumed (if it was running) afterwards.

What the block built is still "young" when it ends, and the collector's next young pass
would walk all of it at some unrelated later moment (the first decision after a facade
opened a big journal paid half a second for it). So a block that leaves many young objects
behind promotes them at once, inside the bulk work that made them.
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
            if gc.get_count()[0] > PROMOTE_AFTER:
                gc.collect(1)


PROMOTE_AFTER = 50_000
"""Young objects left by a paused block above which they are collected (and promoted)."""
