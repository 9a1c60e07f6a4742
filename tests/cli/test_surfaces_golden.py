"""Every output people and scripts read stays as it was: the command line's tables,
`--json` and CSV, the service's bodies and the web pages, over the demo month and over
seeded histories with adjustments, voids, reversals, debt, partial refunds, late events
and anomalies (`surfaces.py`), compared with digests of the outputs taken before the
answers' sentences moved from `projections.queries` to `tools.wording`.

A deliberate change of an output regenerates the golden file:
`.venv/bin/python tests/cli/test_surfaces_golden.py` (and says why in the commit).
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
import surfaces

GOLDEN = Path(__file__).with_name("surfaces_golden.json")
RICH = [f"rich-{seed}" for seed in range(1, 7)]


def _digests(name: str, work: Path) -> dict[str, str]:
    url = f"sqlite:///{work}/journal.db"
    surfaces.write_journal(url, name)
    return surfaces.digests(url, work)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], list[tuple[str, str]]]:
    """rendered(name): every output of the journal `name`, written and rendered once per
    module: the golden comparison and the sentence check read the same outputs."""
    done: dict[str, list[tuple[str, str]]] = {}

    def render(name: str) -> list[tuple[str, str]]:
        if name not in done:
            work = tmp_path_factory.mktemp(name)
            url = f"sqlite:///{work}/journal.db"
            surfaces.write_journal(url, name)
            done[name] = list(surfaces.render_all(url, work))
        return done[name]

    return render


def _check(name: str, outputs: list[tuple[str, str]]) -> None:
    expected = json.loads(GOLDEN.read_text())[name]
    got = surfaces.digests_of(outputs)
    assert got.keys() == expected.keys()
    changed = sorted(k for k in expected if got[k] != expected[k])
    assert not changed, f"{len(changed)} output(s) of {name} changed: {changed[:20]}"


@pytest.mark.parametrize("name", RICH)
def test_every_output_of_a_rich_history_is_unchanged(
        name: str, rendered: Callable[[str], list[tuple[str, str]]]) -> None:
    _check(name, rendered(name))


@pytest.mark.slow
def test_every_output_of_the_demo_month_is_unchanged(
        rendered: Callable[[str], list[tuple[str, str]]]) -> None:
    _check("demo", rendered("demo"))


def test_the_rich_histories_reach_every_kind_of_sentence(
        rendered: Callable[[str], list[tuple[str, str]]]) -> None:
    """The golden comparison is only as good as what the histories exercise."""
    text = "\n".join(t for seed in RICH[:3] for _, t in rendered(seed))
    for phrase in ("paid debt first", "became debt", "released by job", "rejected:",
                   "anomaly, no effect", "reversed, no effect", "reversal of event",
                   "adjustment of -", "adjustment of +", "account opened (at most",
                   "failed: charged", "succeeded: charged", "cancelled: released",
                   "voided,", "expired unused", "pending job(s) ahead", "already runs",
                   "running;", "appears earlier in the file", "was reversed: not a charge",
                   "is rejected: not charged", "no usage report or adjustment",
                   "amount_differs", "missing_from_file", "paid by"):
        assert phrase in text, phrase


if __name__ == "__main__":  # regenerate the golden file from the code as it is
    found = {}
    for journal_name in ["demo", *RICH]:
        with tempfile.TemporaryDirectory() as folder:
            found[journal_name] = _digests(journal_name, Path(folder))
        print(journal_name, len(found[journal_name]), file=sys.stderr)
    GOLDEN.write_text(json.dumps(found, indent=0, sort_keys=True) + "\n")
