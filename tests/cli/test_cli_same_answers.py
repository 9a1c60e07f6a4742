"""One journal, one answer: what the command line prints for a journal depends on the
journal alone, not on the width of the terminal it is read on.

Tables and sentences for people wrap to the terminal's width (`$COLUMNS`); a value
people copy or compare (a state digest, a command to run) is printed on one line
whatever the width, so the terminal may show it over several rows but never splits it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import SMALL, Run, imported

# A phone, a split pane, and the widths at which `digest <64 hex digits>` (71 characters)
# no longer fits but the digest alone would.
WIDTHS = ["20", "50", "66", "70"]


@pytest.mark.parametrize("columns", WIDTHS)
def test_replay_prints_its_digest_on_one_line_at_any_width(
        columns: str, run: Run, tmp_path: Path) -> None:
    imported(run, tmp_path / "small.jsonl", SMALL)
    digest = json.loads(run("replay", "--json").stdout)["digest"]
    done = run("replay", env={"COLUMNS": columns})
    assert done.exit_code == 0, done.stderr
    assert f"digest {digest}" in done.stdout.splitlines(), done.stdout


def test_the_demo_prints_its_digest_and_the_commands_to_try_on_one_line_each(
        run: Run) -> None:
    done = run("demo", env={"COLUMNS": "50"})
    assert done.exit_code == 0, done.stderr
    lines = done.stdout.splitlines()
    digest = json.loads(run("replay", "--json").stdout)["digest"]
    assert f"State digest: {digest}" in lines
    tried = lines[lines.index(next(line for line in lines if line.endswith("Try:"))) + 1:]
    assert [line.split()[-1] for line in tried] == [
        "accounts", tried[1].split()[-1], tried[2].split()[-1], tried[3].split()[-1],
        "7d", "revisions", "verify"]
    # Each is a whole command: the program, --db and its URL, the command and its words.
    assert all(len(line.split()) >= 4 and "--db" in line for line in tried), tried
