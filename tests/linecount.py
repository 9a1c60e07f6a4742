"""Counting the lines Python runs in chosen source files: a deterministic measure of work,
for tests that a path grows linearly (wall-clock bounds would fail on a busy machine)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from types import FrameType, ModuleType
from typing import Any, TypeVar

T = TypeVar("T")


def lines_run(modules: Iterable[ModuleType], call: Callable[[], T]) -> tuple[T, int]:
    """`call()`'s answer, and how many lines of the modules' source files it ran
    (compiled code runs no traced lines: name modules that are plain Python)."""
    files = {m.__file__ for m in modules}
    count = 0

    def line(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
        return line

    def call_event(frame: FrameType, event: str, arg: Any) -> Any:
        # Trace lines only in frames of the chosen files: the rest runs untraced.
        return line if frame.f_code.co_filename in files else None

    previous = sys.gettrace()
    sys.settrace(call_event)
    try:
        answer = call()
    finally:
        sys.settrace(previous)
    return answer, count
