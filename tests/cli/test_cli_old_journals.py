"""Journals written by earlier releases: upgraded, verified, and answering as they did.

Each fixture in old_journals/ is a dump of a small journal that an earlier release wrote
(README.md there says which commit and commands), with the answers that release gave for
it: this code must upgrade it, verify it and give the same digest, balances, export and
revisions, and the ids and idempotency keys recorded then must still dedupe.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from cli_helpers import as_json
from contract.kit import cli_runner
from sqlalchemy import create_engine

from eventstore import Journal
from eventstore.migrate import code_head
from eventstore.schema import metadata

OLD = Path(__file__).parent / "old_journals"

#: fixture -> the revision its release stood at.
RELEASES = {"rev0001": "0001", "rev0004": "0004", "rev0005-unspanned": "0005"}


def _backend(url: str) -> str:
    return "sqlite" if url.startswith("sqlite") else "postgresql"


def _load(url: str, name: str) -> dict[str, Any]:
    """Fill the empty database at `url` from the fixture's dump; the old release's
    answers for it."""
    backend = _backend(url)
    script = (OLD / f"{name}.{backend}.sql").read_text()
    if backend == "sqlite":
        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        try:
            conn.executescript(script)
        finally:
            conn.close()
    else:
        engine = create_engine(url)
        try:
            with engine.begin() as c:
                c.exec_driver_sql(script)
        finally:
            engine.dispose()
    answers: dict[str, Any] = json.loads((OLD / f"{name}.{backend}.json").read_text())
    return answers


def ok_json(result: Any) -> Any:
    """The JSON a --json command printed (it succeeded)."""
    return as_json(result)


def _holds(new: Any, old: Any) -> bool:
    """Whether `new` says everything `old` said (fields added since are not compared)."""
    if isinstance(old, dict):
        return isinstance(new, dict) and all(
            k in new and _holds(new[k], v) for k, v in old.items())
    if isinstance(old, list):
        return isinstance(new, list) and len(new) == len(old) and all(
            _holds(n, o) for n, o in zip(new, old, strict=True))
    return bool(new == old)


@pytest.mark.parametrize("name", sorted(RELEASES))
def test_an_old_journal_upgrades_verifies_and_answers_as_before(
        database_url: str, name: str) -> None:
    old = _load(database_url, name)
    run = cli_runner(database_url)
    # Read-only commands never upgrade: they name the command that does.
    refused = run("balance", "acme")
    assert refused.exit_code == 2 and "run `gpu-credits db upgrade`" in refused.stderr
    first = run("db", "upgrade")
    assert first.exit_code == 0, first.stderr
    assert f"upgraded from {RELEASES[name]} to {code_head()}" in first.stdout
    again = run("db", "upgrade")
    assert again.exit_code == 0 and f"already at revision {code_head()}" in again.stdout

    verified = ok_json(run("verify", "--json"))
    assert verified["ok"] and verified["events"] == old["replay"]["events"]
    replayed = ok_json(run("replay", "--json"))
    assert replayed["digest"] == old["replay"]["digest"]
    for account, answer in old["balances"].items():
        assert _holds(ok_json(run("balance", account, "--json")), answer)
    exported = run("export")
    assert [json.loads(line) for line in exported.stdout.splitlines()] == old["export"]
    assert _holds(ok_json(run("revisions", "--json")), old["revisions"])


@pytest.mark.parametrize("name", ["rev0004", "rev0005-unspanned"])
def test_an_old_journal_s_ids_still_dedupe(database_url: str, name: str) -> None:
    old = _load(database_url, name)
    run = cli_runner(database_url)
    for source in ("small.jsonl", "small2.jsonl"):
        result = run("import", str(OLD / source))
        assert result.exit_code == 0, result.stderr
        assert "appended 0 events" in result.stdout
    again = run("grant", "acme", "25", "--at", "1793650000", "--id", "g-cli", "--memo", "PO 9")
    assert again.exit_code == 0, again.stderr
    assert ok_json(run("head", "--json"))["position"] == len(old["export"])


def test_a_command_that_upgrades_an_old_journal_on_the_way_says_so(
        database_url: str) -> None:
    # An earlier release refuses a journal upgraded by this one (docs/operations.md,
    # "Never downgrade"): a grant that crossed that line without a word left its operator
    # believing the old release could still open it.
    _load(database_url, "rev0004")
    run = cli_runner(database_url)
    granted = run("grant", "acme", "5", "--at", "1793650300")
    assert granted.exit_code == 0, granted.stderr
    said = [line for line in granted.stderr.splitlines() if "upgraded" in line]
    assert len(said) == 1 and f"from 0004 to {code_head()}" in said[0], granted.stderr
    assert "earlier release" in said[0]
    again = run("grant", "acme", "5", "--at", "1793650400")
    assert again.exit_code == 0 and "upgraded" not in again.stderr


def test_files_imported_by_the_first_release_without_ids_are_new_to_this_one(
        database_url: str) -> None:
    # Release 0001 gave a line without an id one from the file's hash and the line's
    # number; ids now come from the line's content (docs/operations.md, upgrading): its
    # lines without ids are appended again, with the re-delivery warning.
    old = _load(database_url, "rev0001")
    run = cli_runner(database_url)
    result = run("import", str(OLD / "small.jsonl"))
    assert result.exit_code == 0, result.stderr
    assert "appended 3 events, 9 already present" in result.stdout
    assert "is this file a re-delivery?" in result.stderr
    assert ok_json(run("head", "--json"))["position"] == len(old["export"]) + 3


def test_request_keys_bound_before_their_span_was_kept_answer_and_are_erased(
        database_url: str) -> None:
    # The release at revision 0005 that first bound keys kept no span of positions: after
    # the upgrade its bindings answer as they did, new ones can be bound, and erasing a
    # record one of them named drops it (its fingerprint was made from that record).
    _load(database_url, "rev0005-unspanned")
    with Journal(database_url) as journal:
        with_ids = journal.request("key-with-ids")
        assert with_ids is not None
        assert json.loads(with_ids.answer) == {
            "already_present": 0, "appended": 2, "positions": [19, 20]}
        assert journal.request("key-without-ids") is not None
        bound = journal.bind_request("key-new", "f" * 64, "{}", [21])
        assert (bound.first_position, bound.last_position) == (21, 21)
    run = cli_runner(database_url)
    erased = run("erase", "--user", "erin", "--reason", "req-2")
    assert erased.exit_code == 0, erased.stderr
    with Journal(database_url) as journal:
        assert journal.request("key-with-ids") is None
        assert journal.request("key-new") is not None  # its span holds no erased record
    assert ok_json(run("verify", "--json"))["ok"]


@pytest.mark.parametrize("name", sorted(RELEASES))
def test_an_upgraded_old_journal_has_exactly_today_s_schema(database_url: str,
                                                            name: str) -> None:
    _load(database_url, name)
    with Journal(database_url) as journal, journal._engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        assert compare_metadata(ctx, metadata) == []


def test_an_old_journal_on_a_read_only_medium_says_to_upgrade_a_copy(
        tmp_path: Path, read_only_mount: Any) -> None:
    # An auditor handed an old journal on a read-only medium was sent in a circle: the
    # reads said "run `gpu-credits db upgrade`", which said nothing can be written there
    # and "commands that only read still answer". Each now says to upgrade a copy.
    folder = tmp_path / "medium"
    folder.mkdir()
    url = f"sqlite:///{folder / 'ledger.db'}"
    _load(url, "rev0004")
    read_only_mount(folder)
    run = cli_runner(url)
    for args in (("balance", "acme"), ("verify",), ("db", "upgrade"), ("grant", "acme", "5")):
        result = run(*args)
        assert result.exit_code == 2, args
        assert "is at revision '0004'" in result.stderr, args
        assert "read-only file system" in result.stderr, args
        assert "copy ledger.db" in result.stderr, args
        assert "gpu-credits db upgrade --db sqlite:///COPY" in result.stderr, args
        assert "still answer" not in result.stderr, args
    assert sorted(p.name for p in folder.iterdir()) == ["ledger.db"]
