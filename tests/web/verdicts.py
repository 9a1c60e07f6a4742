"""Waiting in a browser for the verdict of a verification started on the page."""

from __future__ import annotations

from typing import Any


def start_and_wait_for_verdict(tab: Any, start: Any) -> None:
    """Run `start()` (a click, a key press) and wait for the verdict of the verification it
    started: a status swapped in since, not the one shown before (the tests share a
    journal, and an earlier test's verdict is already on the page), with no progress bar,
    and settled (htmx gives a swapped element its old attributes for a moment)."""
    tab.evaluate("() => { window.statusBefore = document.getElementById('verify-status'); }")
    start()
    tab.wait_for_function(
        """() => { const s = document.getElementById('verify-status');
                   return s !== window.statusBefore && s.querySelector('progress') === null
                          && document.querySelector('.htmx-added, .htmx-settling') === null; }""",
        timeout=60_000)
