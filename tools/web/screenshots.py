"""`python -m tools.web.screenshots [FOLDER]`: screenshots of every page at 1280 and 390 px.

Writes the demo month into a temporary database, serves the web view over it, and saves
`<page>-<width>.png` into FOLDER (default `docs/screenshots`). `make screenshots` runs it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from tools.web.browsing import app_for, launch, open_settled, serving

WIDTHS = (1280, 390)

PAGES = (
    ("summary", "/"),
    ("summary-expiring", "/#expiring"),
    ("account", "/accounts/lumen-health"),
    ("account-grants", "/accounts/lumen-health#grants"),
    ("account-ledger", "/accounts/lumen-health?kind=complete#ledger"),
    ("account-as-known", "/accounts/lumen-health?as_known_at=979"),
    ("account-revisions", "/accounts/lumen-health?as_known_at=979#revisions"),
    ("job", "/jobs/lumen-0191"),
    ("job-rejected", "/jobs/cobalt-0074"),
    ("journal", "/journal"),
    ("journal-events", "/journal#events"),
    ("journal-revisions", "/journal#revisions"),
    ("event", "/events/980"),
    ("event-changed", "/events/980#fields"),
)
"""(name, path) of each page shot, on the demo month of seed 42: an account before and
after the late grant at position 980 that revised what paid its jobs. A path with a
#section is shot scrolled to that section: each table is seen at both widths."""


def demo_url(folder: Path) -> str:
    """A SQLite database in `folder` holding the demo month (seed 42)."""
    from eventstore import Journal
    from projections.demo import write_demo

    url = f"sqlite:///{folder / 'demo.db'}"
    journal = Journal(url)
    try:
        write_demo(journal, 42)
    finally:
        journal.close()
    return url


def verified(url: str) -> None:
    """Verify the journal at `url` as `gpu-credits verify` does, recording the verdict
    (the summary then shows a last verification, as it would in use)."""
    import time

    from eventstore import Journal
    from projections.replay import verify
    from projections.verifications import Verification, record_verification

    journal = Journal(url)
    try:
        head = journal.head()
        report = verify(journal)
        record_verification(journal, Verification(
            report.ok, head, report.checked_events, report.checked_checkpoints,
            report.first_bad_position, report.problem, time.time(), "cli"))
    finally:
        journal.close()


def shoot(base: str, out: Path) -> list[Path]:
    """Screenshots of `PAGES` at `WIDTHS` from the server at `base`; the files written."""
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    written = []
    with sync_playwright() as pw:
        browser = launch(pw)
        try:
            for width in WIDTHS:
                page = browser.new_page(viewport={"width": width, "height": 900})
                for name, path in PAGES:
                    open_settled(page, base + path, timeout_ms=15_000)
                    target = out / f"{name}-{width}.png"
                    page.screenshot(path=str(target), full_page=False)
                    written.append(target)
                page.close()
        finally:
            browser.close()
    return written


def main(argv: list[str] | None = None) -> int:
    """Write the screenshots; print each file."""
    parser = argparse.ArgumentParser(
        prog="python -m tools.web.screenshots",
        description="Screenshots of every page of the web view at 1280 and 390 px, of "
                    "the demo month.")
    parser.add_argument("folder", nargs="?", default="docs/screenshots", type=Path,
                        help="where the PNG files go (default: docs/screenshots)")
    # Parsed, not taken as it comes: `--help` was a folder, and got 28 screenshots.
    out: Path = parser.parse_args(sys.argv[1:] if argv is None else argv).folder
    with tempfile.TemporaryDirectory() as tmp:
        url = demo_url(Path(tmp))
        verified(url)
        with serving(app_for(url)) as base:
            for path in shoot(base, out):
                print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
