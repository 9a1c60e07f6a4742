"""Erasing a person's data while history stays verifiable, on memory, SQLite and PostgreSQL.

After `erase_user`: verify passes, every figure and the state digest are as before, an
anchor taken before still holds, the person's plaintext is gone from storage, the erasure
is an event naming events (never the person), and erasing again changes nothing. A journal
written before personal fields were kept apart upgrades with its chain unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from typer.testing import CliRunner, Result

from eventstore import Journal, JournalLike, MemoryJournal, NewEvent
from eventstore.testing import open_journal, write_at_revision
from projections import GPUCreditTracker, Scheduler, personal, queries
from projections.anchors import check_anchor
from projections.importing import (
    ImportRejected,
    export_records,
    import_file,
    write_csv,
    write_jsonl,
)
from projections.personal import erase_user, events_of_user
from projections.replay import replay, verify
from tools.cli import app

ALICE = "alice.quintessa@example.org"
BOB = "bob"
LINES = [
    {"type": "account", "account": "lab"},
    {"type": "grant", "account": "lab", "amount": 1000, "time": 0, "expiry": 500,
     "memo": "PO 4411"},
    {"type": "consume", "account": "lab", "amount": 30, "time": 5, "user": ALICE,
     "memo": f"run for {ALICE}"},
    {"type": "consume", "account": "lab", "amount": 20, "time": 6, "user": BOB},
    {"type": "submit", "account": "lab", "job": "j1", "cost": 40, "priority": 1, "time": 7,
     "user": ALICE},
    {"type": "start", "job": "j1", "time": 8},
    {"type": "complete", "job": "j1", "success": True, "time": 9},
    {"type": "consume", "account": "lab", "amount": 15, "time": 10, "memo": "no user here"},
]


def _data(lines: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


@pytest.fixture
def journal(journal_url: str) -> Iterator[JournalLike]:
    j = open_journal(journal_url)
    try:
        import_file(j, _data(LINES), "lines.jsonl")
        tracker = GPUCreditTracker(j, account="lab")
        tracker.consume(5, 11, user=ALICE, memo="from the tracker")
        scheduler = Scheduler(j, clock=lambda: 12)
        scheduler.submit("j2", "lab", 10, 1, user=ALICE)
        scheduler.submit("j3", "lab", 10, 1, user=BOB)
        yield j
    finally:
        j.close()


def _figures(journal: JournalLike) -> dict[str, Any]:
    st = queries.statement(journal, "lab")
    return {
        "digest": replay(journal).digest,
        # Everything but `as_known_at`, the position answered from (the erasure is one more).
        "balance": {k: v for k, v in queries.to_dict(queries.balance(journal, "lab")).items()
                    if k != "as_known_at"},
        "lines": [(line.time, line.type, line.change, line.balance, line.reserved)
                  for line in st.lines],
    }


def _stored_text(journal: JournalLike, tmp_path: Path) -> bytes:
    """Everything the journal stores, as bytes: the files, the rows, or the memory."""
    if isinstance(journal, MemoryJournal):
        return repr((journal._stored, journal._private)).encode()
    assert isinstance(journal, Journal) and journal.url is not None
    if journal.url.startswith("sqlite"):
        return b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    with journal._engine.begin() as conn:
        rows = conn.execute(text("SELECT payload FROM events")).scalars().all()
        parts = conn.execute(text("SELECT data FROM private_parts")).scalars().all()
    return "".join([*rows, *parts]).encode()


def test_erasure_keeps_every_figure_and_the_chain(journal: JournalLike,
                                                 tmp_path: Path) -> None:
    before = _figures(journal)
    anchor = journal.head_anchor()
    head = journal.head()
    assert ALICE.encode() in _stored_text(journal, tmp_path)
    named = events_of_user(journal, ALICE)
    assert len(named) == 4

    done = erase_user(journal, ALICE, reason="request 2026-117")
    assert sorted(done.erased) == sorted(named) and done.record is not None
    assert done.record.position == head + 1 and done.record.type == "erase"
    assert ALICE not in json.dumps(done.record.payload)
    assert done.record.time == max(r.time for r in journal.read(to_position=head))

    assert _figures(journal) == before
    report = verify(journal)
    assert report.ok, report.problem
    assert check_anchor(journal, anchor).ok
    assert journal.verify_chain(anchor=journal.head_anchor()).ok
    assert ALICE.encode() not in _stored_text(journal, tmp_path)
    assert events_of_user(journal, ALICE) == []
    assert len(events_of_user(journal, BOB)) == 2  # only alice's


def test_erasing_again_or_an_unknown_user_changes_nothing(journal: JournalLike) -> None:
    erase_user(journal, ALICE)
    head = journal.head()
    again = erase_user(journal, ALICE)
    assert again.record is None and again.erased == ()
    assert erase_user(journal, "nobody-at-all").record is None
    assert journal.head() == head and verify(journal).ok
    with pytest.raises(ValueError, match="user"):
        erase_user(journal, "")


def test_exports_show_personal_fields_until_erased(journal: JournalLike) -> None:
    def exported() -> list[dict[str, Any]]:
        return [line for _, line in export_records(journal)]

    lines = exported()
    assert sum(1 for line in lines if line.get("user") == ALICE) == 4
    assert {"memo": "PO 4411"}.items() <= next(
        line for line in lines if line["type"] == "grant").items()
    assert not any(k.startswith("$") for line in lines for k in line)
    erase_user(journal, ALICE)
    lines = exported()
    assert not any(ALICE in json.dumps(line) for line in lines)
    assert sum(1 for line in lines if line.get("user") == BOB) == 2
    erasure = lines[-1]
    assert erasure["type"] == "erase" and len(erasure["events"]) == 4
    # The export imports into an empty journal to the same state, erasure included.
    import io

    out = io.StringIO()
    write_jsonl(export_records(journal), out)
    copy = MemoryJournal()
    result = import_file(copy, out.getvalue().encode(), "export.jsonl")
    assert result.appended == journal.head()
    assert replay(copy).digest == replay(journal).digest and verify(copy).ok
    again = import_file(journal, out.getvalue().encode(), "export.jsonl")
    assert again.appended == 0  # the same events: nothing new, erased parts included
    # The same through CSV: the erased ids travel as a JSON array in the `events` column.
    out = io.StringIO()
    write_csv(export_records(journal), out)
    copy = MemoryJournal()
    assert import_file(copy, out.getvalue().encode(), "export.csv", fmt="csv").appended == (
        journal.head())
    assert replay(copy).digest == replay(journal).digest
    assert [line for _, line in export_records(copy)] == exported()


def test_a_statement_shows_memos_until_erased(journal: JournalLike) -> None:
    def memos() -> list[str | None]:
        return [line.memo for line in queries.statement(journal, "lab").lines if line.memo]

    assert memos() == ["PO 4411", f"run for {ALICE}", "no user here", "from the tracker"]
    erase_user(journal, ALICE)
    assert memos() == ["PO 4411", "no user here"]


def test_re_importing_the_original_file_after_erasure_appends_nothing(
        journal: JournalLike) -> None:
    erase_user(journal, ALICE)
    head = journal.head()
    result = import_file(journal, _data(LINES), "lines.jsonl")
    assert result.appended == 0 and journal.head() == head
    assert events_of_user(journal, ALICE) == []  # nothing came back


def test_an_import_derived_id_does_not_commit_to_the_user() -> None:
    """Two lines differing only in their user get the ids of the occurrences of one line."""
    one, two = MemoryJournal(), MemoryJournal()
    line = {"type": "consume", "account": "lab", "amount": 1, "time": 1}
    import_file(one, _data([{"type": "account", "account": "lab"}, {**line, "user": ALICE}]),
                "a")
    import_file(two, _data([{"type": "account", "account": "lab"}, {**line, "user": BOB}]),
                "b")
    assert [r.id for r in one.read(order="position")] == [
        r.id for r in two.read(order="position")]


def test_another_users_same_usage_without_an_id_is_refused_with_the_way_out() -> None:
    journal = MemoryJournal()
    line = {"type": "consume", "account": "lab", "amount": 1, "time": 1}
    import_file(journal, _data([{"type": "account", "account": "lab"}, {**line, "user": ALICE}]),
                "day1")
    with pytest.raises(ImportRejected) as refused:
        import_file(journal, _data([{**line, "user": BOB}]), "day2")
    assert "the same event for another user" in str(refused.value.problems[0].message)
    assert "give such lines an id" in refused.value.problems[0].message
    result = import_file(journal, _data([{**line, "user": BOB, "id": "bob-1"}]), "day2")
    assert result.appended == 1


def test_a_line_taken_for_an_erased_event_is_warned_about() -> None:
    """After an erasure nothing tells a re-delivery from another user's same report: the
    line counts as present, and the import says so instead of staying silent."""
    journal = MemoryJournal()
    line = {"type": "consume", "account": "lab", "amount": 1, "time": 1}
    import_file(journal, _data([{"type": "account", "account": "lab"}, {**line, "user": ALICE},
                                {**line, "amount": 2}]), "day1")
    quiet = import_file(journal, _data([{**line, "user": ALICE}, {**line, "amount": 2}]), "again")
    assert (quiet.appended, quiet.already_present, quiet.warnings) == (0, 2, ())
    erase_user(journal, ALICE)
    result = import_file(journal, _data([{**line, "user": BOB}, {**line, "amount": 2}]), "day2")
    assert (result.appended, result.already_present) == (0, 2)
    (warning,) = result.warnings
    assert "1 line(s) with a user or memo (first: line 1)" in warning
    assert "whose personal fields were erased" in warning and "an id of its own" in warning



def test_a_copy_of_an_erased_journal_takes_a_re_delivery_as_the_journal_does() -> None:
    """An export of a journal with erasures imports into a copy whose records carry no
    trace of the erased fields (nor their seal), only the `erase` event naming them. The
    file first delivered, sent to the copy again, counts as present, as it does (with
    the same warning) in the journal it was exported from."""
    first = [{"type": "account", "account": "lab"},
             {"type": "consume", "account": "lab", "amount": 1, "time": 1, "user": ALICE},
             {"type": "consume", "account": "lab", "amount": 2, "time": 2, "user": ALICE,
              "id": "c2"}]
    journal = MemoryJournal()
    import_file(journal, _data(first), "day1")
    erase_user(journal, ALICE)
    copy = MemoryJournal()
    import_file(copy, _data([line for _, line in export_records(journal)]), "export")
    answers = [import_file(j, _data(first), "again") for j in (journal, copy)]
    assert [(a.appended, a.already_present) for a in answers] == [(0, 3), (0, 3)]
    assert answers[0].warnings == answers[1].warnings != ()
    assert copy.head() == journal.head()

def test_a_copy_made_before_an_erasure_is_told_to_erase_before_catching_up() -> None:
    """A copy (export, then import) made before the erasure still holds the fields. A
    later export, which holds the event without them and the `erase` event, is refused
    there naming the event and the way out: erase it in the copy too, then import."""
    journal = MemoryJournal()
    import_file(journal, _data(LINES), "day1")
    copy = MemoryJournal()
    import_file(copy, _data([line for _, line in export_records(journal)]), "before")
    erase_user(journal, ALICE)
    later = _data([line for _, line in export_records(journal)])
    with pytest.raises(ImportRejected) as refused:
        import_file(copy, later, "after")
    said = str(refused.value)
    assert "erased where the file came from" in said
    assert "gpu-credits erase --event" in said
    assert copy.head() == journal.head() - 1  # nothing appended
    erase_user(copy, ALICE)
    done = import_file(copy, later, "after")
    assert done.appended == 1  # the file's record of its erasure, beside the copy's own
    assert personal.events_of_user(copy, ALICE) == []
    assert verify(copy).ok


# -- a journal written before personal fields were kept apart ----------------------------


OLD_EVENTS = [
    NewEvent("g1", "lab", "grant", 0, {"account": "lab", "amount": 100, "memo": "PO 1"}),
    NewEvent("c1", "lab", "consume", 3, {"account": "lab", "amount": 30, "memo": "old"}),
]


@pytest.fixture
def old_url(database_url: str) -> str:
    """A database at schema revision 0002 holding OLD_EVENTS as that code wrote them."""
    write_at_revision(database_url, "0002", OLD_EVENTS)
    return database_url


def test_an_old_journal_upgrades_with_its_chain_unchanged(old_url: str) -> None:
    with Journal(old_url) as journal:
        old = list(journal.read(order="position"))
        anchor = journal.head_anchor()
        assert journal.verify_chain(anchor=anchor).ok
        assert [r.payload.get("memo") for r in old] == ["PO 1", "old"]
        tracker = GPUCreditTracker(journal, account="lab")
        tracker.consume(5, 4, user=ALICE, memo="new")
        done = erase_user(journal, ALICE)
        assert len(done.erased) == 1
        assert list(journal.read(order="position", to_position=2)) == old
        assert journal.verify_chain(anchor=anchor).ok and verify(journal).ok
        # The old memos are in the chained payload: shown, never deleted.
        assert [line.memo for line in queries.statement(journal, "lab").lines
                if line.memo] == ["PO 1", "old"]


def test_erasing_an_old_record_s_inline_memo_says_it_stays(old_url: str) -> None:
    # An operator answering an erasure request for event c1 was told "no personal data
    # of the given event(s) is held (never recorded, or already erased)" while its memo,
    # inline in the chained record, is still shown: the request was filed as done.
    result = CliRunner().invoke(app, ["erase", "--event", "c1", "--event", "g1", "--json",
                                      "--db", old_url])
    assert result.exit_code == 0, result.stderr
    assert "no personal data" not in result.stderr
    assert "'c1', 'g1'" in result.stderr and "cannot be erased" in result.stderr
    answer = json.loads(result.stdout)
    assert answer["erased"] == 0 and answer["not_erasable"] == ["c1", "g1"]
    with Journal(old_url) as journal:
        assert journal.head() == 2  # no erase event appended


# -- the command line ---------------------------------------------------------------------


def _cli(*args: str) -> Result:
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def test_erase_command(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'l.db'}"
    data = tmp_path / "lines.jsonl"
    data.write_bytes(_data(LINES))
    assert _cli("import", str(data), "--db", db).exit_code == 0
    consume = _cli("consume", "lab", "3", "--at", "20", "--user", ALICE, "--json", "--db", db)
    assert consume.exit_code == 0, consume.stderr
    assert json.loads(consume.stdout)["user"] == ALICE
    anchor = _cli("head", "--db", db).stdout.strip()
    digest = json.loads(_cli("replay", "--json", "--db", db).stdout)["digest"]

    assert _cli("erase", "--db", db).exit_code == 2  # neither --user nor --event
    result = _cli("erase", "--user", ALICE, "--reason", "request 7", "--json", "--db", db)
    assert result.exit_code == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["erased"] == 3 and answer["erasure"] and answer["position"] == 10
    assert _cli("verify", "--anchor", anchor, "--db", db).exit_code == 0
    assert json.loads(_cli("replay", "--json", "--db", db).stdout)["digest"] == digest
    assert ALICE not in _cli("export", "--db", db).stdout
    files = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("l.db"))
    assert ALICE.encode() not in files

    again = _cli("erase", "--user", ALICE, "--db", db)
    assert again.exit_code == 0 and "nothing to erase" in again.stderr
    bob = next(json.loads(line)["id"] for line in _cli("export", "--db", db).stdout.splitlines()
               if json.loads(line).get("user") == BOB)
    one = _cli("erase", "--event", bob, "--json", "--db", db)
    assert json.loads(one.stdout)["events"] == [bob]
    missing = _cli("erase", "--user", ALICE, "--db", f"sqlite:///{tmp_path / 'none.db'}")
    assert missing.exit_code == 2 and not (tmp_path / "none.db").exists()


def test_erase_refuses_an_event_id_the_journal_does_not_hold(tmp_path: Path) -> None:
    """A mistyped --event ID is bad input (exit 2, naming it, nothing erased or
    appended), not "nothing held": event ids are in the chain, so saying which one is
    unknown tells nothing about a person, and a request answered with exit 0 would be
    filed as done while the fields it meant stay."""
    db = f"sqlite:///{tmp_path / 'l.db'}"
    used = _cli("consume", "lab", "3", "--at", "20", "--user", ALICE, "--id", "u-1",
                "--db", db)
    assert used.exit_code == 0, used.stderr
    head = _cli("head", "--db", db).stdout
    for args in (["--event", "u-l"], ["--event", "u-1", "--event", "u-l"],
                 ["--user", ALICE, "--event", "u-l"]):
        refused = _cli("erase", *args, "--db", db)
        assert refused.exit_code == 2, (args, refused.stdout, refused.stderr)
        assert "'u-l'" in refused.stderr and "u-1" not in refused.stderr.replace("'u-l'", "")
        assert _cli("head", "--db", db).stdout == head
    assert ALICE in _cli("export", "--db", db).stdout
    assert _cli("erase", "--event", "u-1", "--db", db).exit_code == 0
    assert ALICE not in _cli("export", "--db", db).stdout


def test_erase_says_what_it_erased_and_answers_json_when_nothing_is_held(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sentence names the user as given (a bracket in a name is text, not console
    markup), the count and the erasure; erasing again answers JSON with no erasure."""
    db = f"sqlite:///{tmp_path / 'l.db'}"
    user = "ann[b]x"
    assert _cli("consume", "lab", "3", "--at", "20", "--user", user, "--db", db).exit_code == 0
    # What the database could not do at once (its notes) is said as warnings.
    erase_events = personal.erase_events
    monkeypatch.setattr(personal, "erase_events", lambda *a, **k: replace(
        erase_events(*a, **k), notes=("the freed pages are overwritten at the next VACUUM",)))
    result = _cli("erase", "--user", user, "--db", db)
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ("gpu-credits: warning: the freed pages are overwritten at the "
                             "next VACUUM\n")
    said = " ".join(result.stdout.split())
    assert said.startswith(f"erased the personal fields of 1 event(s) of user {user!r}: "
                           "erasure "), said
    assert said.endswith("at position 2; every figure, the hash chain and every anchor "
                         "are unchanged"), said
    again = _cli("erase", "--user", user, "--json", "--db", db)
    assert again.exit_code == 0, again.stderr
    assert json.loads(again.stdout) == {"erased": 0, "events": [], "erasure": None,
                                        "position": None, "not_erasable": []}
    assert "nothing to erase" in again.stderr


def test_an_erasure_cannot_be_reversed_live_and_a_file_s_reversal_of_one_still_imports(
        tmp_path: Path) -> None:
    """A reversal would say the erasure no longer counts while the fields stay deleted:
    the command refuses it, appending nothing. An exported journal that holds one (from
    before this refusal) still imports."""
    db = f"sqlite:///{tmp_path / 'l.db'}"
    data = tmp_path / "lines.jsonl"
    data.write_bytes(_data(LINES))
    assert _cli("import", str(data), "--db", db).exit_code == 0
    erased = json.loads(_cli("erase", "--user", ALICE, "--json", "--db", db).stdout)
    head = _cli("head", "--db", db).stdout
    refused = _cli("reverse", erased["erasure"], "--reason", "undo", "--db", db)
    assert refused.exit_code == 2
    assert "is an erasure, which cannot be reversed" in refused.stderr
    assert _cli("head", "--db", db).stdout == head
    lines = _cli("export", "--db", db).stdout
    reversal = {"type": "reverse", "event": erased["erasure"], "time": 0, "reason": "old",
                "id": "r-old"}
    exported = tmp_path / "with-reversal.jsonl"
    exported.write_text(lines + json.dumps(reversal) + "\n")
    copy = f"sqlite:///{tmp_path / 'copy.db'}"
    assert _cli("import", str(exported), "--db", copy).exit_code == 0, "file refused"


# -- the HTTP service ---------------------------------------------------------------------


def test_the_service_records_users_apart_and_shows_them_until_erased(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from tools.service import create_app

    url = f"sqlite:///{tmp_path / 'service.db'}"
    with TestClient(create_app(url, clock=lambda: 100, mount_web=False)) as client:
        assert client.post("/v1/accounts", json={"account": "lab"}).status_code == 201
        assert client.post("/v1/accounts/lab/grants", json={"amount": 100}).status_code == 201
        usage = client.post("/v1/accounts/lab/usage", headers={"Idempotency-Key": "u1"},
                            json={"amount": 5, "user": ALICE, "memo": "notebook"})
        assert usage.status_code == 201, usage.text
        job = client.post("/v1/jobs", json={"job": "j1", "account": "lab", "cost": 3,
                                             "priority": 1, "user": ALICE})
        assert job.status_code == 201, job.text
        events = client.post("/v1/events", json={"events": [
            {"type": "consume", "account": "lab", "amount": 1, "time": 100, "user": BOB}]})
        assert events.status_code == 200, events.text
        assert client.post("/v1/accounts/lab/usage", json={"amount": 1, "user": ""}
                           ).status_code == 422
        lines = client.get("/v1/journal").json()["events"]
        assert [e.get("user") for e in lines if e["type"] in ("consume", "submit")] == [
            ALICE, ALICE, BOB]
        assert not any(k.startswith("$") for e in lines for k in e)
        def figures() -> dict[str, Any]:
            answer = client.get("/v1/accounts/lab/balance").json()
            return {k: v for k, v in answer.items() if k != "as_known_at"}

        balance = figures()
        # A retry after the erasure answers as the first time and appends nothing.
        with Journal(url) as journal:
            assert len(erase_user(journal, ALICE).erased) == 2
        again = client.post("/v1/accounts/lab/usage", headers={"Idempotency-Key": "u1"},
                            json={"amount": 5, "user": ALICE, "memo": "notebook"})
        assert again.status_code == 201 and again.json()["id"] == usage.json()["id"]
        lines = client.get("/v1/journal").json()["events"]
        assert ALICE not in json.dumps(lines) and "notebook" not in json.dumps(lines)
        assert lines[-1]["type"] == "erase"
        assert figures() == balance
        assert client.post("/v1/journal/verify", json={}).json()["ok"] is True


def test_erasing_a_user_spelled_otherwise_names_the_users_held(tmp_path: Path) -> None:
    # An erasure request rarely spells the name as the usage reports did: a miss only by
    # letter case, spaces or Unicode form must not read as "nothing held" and stop there.
    db = f"sqlite:///{tmp_path / 'l.db'}"
    assert _cli("grant", "lab", "100", "--at", "1", "--db", db).exit_code == 0
    for at, user in ((2, "Alice Smith"), (3, "Zo\u00eb"), (4, "Bob")):
        used = _cli("consume", "lab", "1", "--at", str(at), "--user", user, "--db", db)
        assert used.exit_code == 0, used.stderr
    for asked, held in (("alice  smith", "Alice Smith"), ("ZOE\u0308", "Zo\u00eb")):
        missed = _cli("erase", "--user", asked, "--db", db)
        assert missed.exit_code == 0 and "nothing to erase" in missed.stderr
        assert f"holds user {held!r}, spelled otherwise only" in missed.stderr, missed.stderr
        assert "Bob" not in missed.stderr
    unknown = _cli("erase", "--user", "Carol", "--db", db)
    assert "nothing to erase" in unknown.stderr and "holds user" not in unknown.stderr
