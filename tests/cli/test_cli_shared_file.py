"""Several processes on one SQLite file: what one of them reads or writes while another
command changes the file under it."""

from __future__ import annotations

from pathlib import Path

from cli_helpers import SMALL, cli

from eventstore import Journal
from projections.checkpoint import CHECKPOINT
from projections.replay import verify


class _ReplayedMeanwhile(Journal):
    """A journal whose first checkpoint load lets another process run `gpu-credits
    replay` first: that replay saves fresh checkpoints and drops the ones it replaces,
    the ones this process listed a moment before."""

    def __init__(self, url: str, folder: Path) -> None:
        super().__init__(url, read_only=True)
        self._folder = folder
        self.replays = 0

    def load_snapshot(self, snapshot_id: int) -> bytes:
        if not self.replays:
            self.replays += 1
            done = cli("replay", "--db", self.url or "", cwd=self._folder)
            assert done.returncode == 0, done.stderr
        return super().load_snapshot(snapshot_id)


def test_verify_passes_while_a_replay_replaces_the_checkpoints(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'p.db'}"
    (tmp_path / "small.jsonl").write_text(SMALL)
    assert cli("import", "small.jsonl", "--db", url, cwd=tmp_path).returncode == 0
    assert cli("replay", "--db", url, cwd=tmp_path).returncode == 0
    with Journal(url, read_only=True) as journal:
        before = {info.id for info in journal.snapshots(CHECKPOINT)}
    with _ReplayedMeanwhile(url, tmp_path) as journal:
        report = verify(journal)
        after = {info.id for info in journal.snapshots(CHECKPOINT)}
    assert journal.replays == 1 and before and not before & after  # all replaced
    # A checkpoint dropped by another process is a cache gone, not an altered journal.
    assert report.ok, report.problem
    assert report.first_bad_position is None
