"""An event edited in place, its stored hash left as it was, is refused wherever it
stands: before the journal's verified mark or its checkpoint as well as after.

Every read a command, a facade or the HTTP service folds or shows checks each event's
stored hash against its content and its predecessor's stored hash. So a command that
reads the edited event refuses naming its position (one line, exit 1; 503 with a
problem over HTTP) instead of answering from it; one that does not read it (a balance
from a checkpoint saved before the edit) answers exactly what the untouched journal
answers. A row re-hashed with the edit breaks its successor's link instead.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from cli.cli_helpers import SMALL
from contract.kit import cli_runner
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from eventstore import ChainBroken, Journal, JournalLike, MemoryJournal
from eventstore.hashing import GENESIS_HASH, pinned, record_hash_text
from eventstore.reading import ReadQuery
from eventstore.testing import open_journal
from projections import GPUCreditTracker, Scheduler
from projections.anchors import VERIFIED, advance_verified, verified_checkpoint
from projections.checkpoint import CHECKPOINT
from projections.importing import import_file
from projections.replay import replay, verify
from tools.service import create_app

pytestmark = pytest.mark.usefixtures("chain_check")

JOURNAL = SMALL  # 12 events: two accounts, expiring pools, jobs, debt
EVENTS = 12
NOW = 20
# The positions whose payload holds a number to edit, and the account each belongs to.
EDITABLE = {1: "a", 3: "a", 4: "a", 5: "a", 6: "b", 7: "a", 8: "a", 9: "b", 11: "a",
            12: "b"}
_NUMBER = re.compile(r'(?<=":)(\d+(?:\.\d+)?)(?=[,}])')


@pytest.fixture
def journal(journal_url: str) -> Iterator[JournalLike]:
    """JOURNAL on each backend, verified up to its head (a mark, no checkpoint)."""
    with open_journal(journal_url) as j:
        import_file(j, JOURNAL.encode(), "journal.jsonl")
        j.drop_snapshots(CHECKPOINT)
        assert advance_verified(j).position == EVENTS
        yield j


def _stored(journal: JournalLike, position: int, column: str) -> str:
    """A stored column of one record (payload, event_id), read behind the journal's back."""
    if isinstance(journal, MemoryJournal):
        return journal._stored[position - 1][{"event_id": 1, "payload": 7}[column]]
    assert isinstance(journal, Journal)
    with journal._engine.begin() as conn:
        found: str = conn.execute(text(f"SELECT {column} FROM events WHERE position = :p"),
                                  {"p": position}).scalar_one()
    return found


def _payload(journal: JournalLike, position: int) -> str:
    return _stored(journal, position, "payload")


def _store(journal: JournalLike, position: int, payload: str, digest: str | None = None) -> None:
    """Write a payload (and, if given, a hash) at `position` behind the journal's back."""
    if isinstance(journal, MemoryJournal):
        row = journal._stored[position - 1]
        journal._stored[position - 1] = (*row[:7], payload, digest or row[8])
        return
    assert isinstance(journal, Journal)
    with journal._engine.begin() as conn:
        conn.execute(text("UPDATE events SET payload = :v WHERE position = :p"),
                     {"v": payload, "p": position})
        if digest is not None:
            conn.execute(text("UPDATE events SET hash = :h WHERE position = :p"),
                         {"h": digest, "p": position})


def _edit(journal: JournalLike, position: int) -> str:
    """Change the first number of the payload at `position` in place (no re-hash);
    returns the original text."""
    old = _payload(journal, position)
    new = _NUMBER.sub(lambda m: _other(m.group(1)), old, count=1)
    assert new != old
    _store(journal, position, new)
    return old


def _other(number: str) -> str:
    """Another value of the same kind: an integer plus one, a fraction halved."""
    return str(float(number) / 2) if "." in number else str(int(number) + 1)


def _refused_at(position: int, call: Callable[[], Any]) -> None:
    with pytest.raises(ChainBroken) as info:
        call()
    assert info.value.position == position


def _facades_refuse(journal: JournalLike, position: int, account: str) -> None:
    # A stored journal is opened afresh by URL, as another process would.
    target: Any = journal if journal.url is None else journal.url
    _refused_at(position, lambda: GPUCreditTracker(target, account=account).get_balance(NOW))
    _refused_at(position,
                lambda: Scheduler(target, clock=lambda: NOW).accounts[account].balance)


def _cli_refuses(url: str, position: int, *args: str) -> None:
    result = cli_runner(url)(*args)
    assert result.exit_code == 1, (args, result.stdout)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and f"chain broken at position {position}:" in lines[0], lines


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(position=st.sampled_from(sorted(EDITABLE)))
def test_an_edit_before_the_verified_mark_is_refused_by_every_reader(
        journal: JournalLike, position: int) -> None:
    account = EDITABLE[position]
    target: Any = journal if journal.url is None else journal.url
    true_balance = GPUCreditTracker(target, account=account).get_balance(NOW)
    old = _edit(journal, position)
    try:
        # The mark still stands (its own row is whole unless it is the one edited)...
        if position != EVENTS:
            assert verified_checkpoint(journal) is not None
        # ...yet every reader of the edited event refuses, naming it.
        _refused_at(position, lambda: list(journal.read(order="canonical")))
        _refused_at(position, lambda: list(journal.read_lean(order="position")))
        _refused_at(position, lambda: list(journal.read(stream=account)))
        _refused_at(position, lambda: list(journal.read_lean(stream=account)))
        _refused_at(position, lambda: journal.get(_stored(journal, position, "event_id")))
        _facades_refuse(journal, position, account)
        if journal.url is not None:
            for args in (["balance", account], ["statement", account],
                         ["explain", account]):
                _cli_refuses(journal.url, position, *args)
            if position in (7, 11):
                _cli_refuses(journal.url, position, "explain", "--job", "j1")
    finally:
        _store(journal, position, old)
    # Put back, the journal answers again, as before.
    assert GPUCreditTracker(target, account=account).get_balance(NOW) == true_balance


_UNTOUCHED: dict[str, list[Any]] = {}
"""Each database's answers to the queries below before any edit."""


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(position=st.sampled_from(sorted(EDITABLE)))
def test_behind_a_checkpoint_an_answer_is_refused_or_the_untouched_one(
        database_url: str, position: int) -> None:
    """A checkpoint saved before the edit: what is folded from it alone is still the
    true answer; whatever reads the edited event refuses naming it. Never another
    answer."""
    with Journal(database_url) as journal:
        if journal.head() == 0:
            import_file(journal, JOURNAL.encode(), "journal.jsonl")
            replay(journal, checkpoint=True)
            assert journal.snapshots(CHECKPOINT)
        run = cli_runner(database_url)
        queries = [["balance", "a"], ["balance", "b"], ["statement", "a"],
                   ["statement", "b"], ["explain", "a"], ["explain", "--job", "j1"]]
        # The untouched answers, asked once: every example puts the edited payload back,
        # so each is held to the journal's first answers, not to ones asked after it.
        if database_url not in _UNTOUCHED:
            _UNTOUCHED[database_url] = [run(*q) for q in queries]
        before = _UNTOUCHED[database_url]
        assert all(r.exit_code == 0 for r in before)
        old = _edit(journal, position)
        try:
            for query, untouched in zip(queries, before, strict=True):
                result = run(*query)
                if result.exit_code == 0:
                    assert result.stdout == untouched.stdout, query
                else:
                    assert result.exit_code == 1
                    assert f"chain broken at position {position}:" in result.stderr, query
            # The statement of the edited event's account shows it: always refused.
            _cli_refuses(database_url, position, "statement", EDITABLE[position])
        finally:
            _store(journal, position, old)


@pytest.mark.parametrize("position", [1, 5, 9])
def test_the_service_refuses_with_the_position(database_url: str, position: int) -> None:
    with Journal(database_url) as journal:
        import_file(journal, JOURNAL.encode(), "journal.jsonl")
        journal.drop_snapshots(CHECKPOINT)
        advance_verified(journal)
        account = EDITABLE[position]
        # A service running since before the edit answers its balance from what it
        # folded then (the true one); what reads the journal again refuses.
        with TestClient(create_app(database_url, clock=lambda: NOW, mount_web=False)) as c:
            live = c.get(f"/v1/accounts/{account}/balance")
            assert live.status_code == 200
            _edit(journal, position)
            assert c.get(f"/v1/accounts/{account}/balance").json() == live.json()
            for path in (f"/v1/accounts/{account}/statement",
                         f"/v1/accounts/{account}/balance?at=4"):
                _problem_names(c.get(path), position)
        # A service started on the edited journal, with no checkpoint to start from (the
        # one the first left at shutdown holds what it folded before the edit), serves
        # nothing, and says why.
        journal.drop_snapshots(CHECKPOINT)
        app = create_app(database_url, clock=lambda: NOW, mount_web=False,
                         load_in_background=True)
        with TestClient(app) as c:
            deadline = time.monotonic() + 30
            while app.state.ledger.load_error is None and time.monotonic() < deadline:
                time.sleep(0.05)
            for path in (f"/v1/accounts/{account}/balance",
                         f"/v1/accounts/{account}/statement"):
                _problem_names(c.get(path), position)
            app.state.ledger.stopping = True


def _problem_names(response: Any, position: int) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert f"chain broken at position {position}:" in response.json()["detail"]


def test_a_rehashed_edit_breaks_its_successors_link(journal: JournalLike) -> None:
    """The forger who re-hashes the edited row moves the break to the next row: found
    by whatever reads that one, by `verify`, and by the mark's own link."""
    position = 4
    new = _NUMBER.sub("51", _payload(journal, 4), count=1)
    rows = {r.position: r for r in journal.read(order="position")}
    prev = rows[position - 1].hash
    r = rows[position]
    _store(journal, position, new, record_hash_text(
        prev, r.position, r.id, r.stream, r.version, r.type, r.time, r.recorded_at, new))
    assert [e.position for e in journal.read(to_position=position, order="position")] == [
        1, 2, 3, 4]  # the row alone checks out
    _refused_at(position + 1, lambda: list(journal.read(order="position")))
    assert verify(journal).first_bad_position == position + 1


def test_a_missing_predecessor_is_named(journal: JournalLike) -> None:
    if isinstance(journal, MemoryJournal):
        pytest.skip("the memory journal's rows cannot go missing")
    assert isinstance(journal, Journal)
    with journal._engine.begin() as conn:
        conn.execute(text("DELETE FROM events WHERE position = 6"))
    _refused_at(6, lambda: list(journal.read(after_position=6, to_position=7)))


def test_the_first_event_links_to_the_genesis_hash(journal: JournalLike) -> None:
    (first,) = journal.read(to_position=1)
    assert first.hash == record_hash_text(GENESIS_HASH, 1, first.id, first.stream,
                                          first.version, first.type, first.time,
                                          first.recorded_at, _payload(journal, 1))
    assert journal.snapshots(VERIFIED)


def _outcome(read: Callable[[], Iterator[Any]]) -> tuple[list[int], tuple[int, str] | None]:
    """The positions a read yields, then how it ended: None, or the refusal's position and
    message."""
    seen: list[int] = []
    try:
        for row in read():
            seen.append(row[0])
    except ChainBroken as exc:
        return seen, (exc.position, str(exc))
    return seen, None


def _every_way(journal: JournalLike, start: int) -> dict[str, Callable[[], Iterator[Any]]]:
    """The reads that take each row's predecessor from the rows they fetched (a whole
    window in position order, the timeline of every stream), each in small batches too,
    beside the reference: each row read with its predecessor's stored hash beside it."""
    assert isinstance(journal, Journal | MemoryJournal)
    lean: Any = journal.read_lean
    reference = ReadQuery.make(journal.head(), after_position=start, order="position")
    return {
        "reference": lambda: pinned(journal._pinned_rows(reference, None)),
        "window": lambda: journal.read(order="position", after_position=start),
        "window in twos": lambda: lean(order="position", after_position=start, batch_size=2),
        "timeline": lambda: journal.read(after_position=start),
        "timeline in threes": lambda: lean(after_position=start, batch_size=3),
        "timeline to a time": lambda: journal.read(after_position=start, to_time=10**6),
    }


def _sorted_by_position(outcome: tuple[list[int], Any]) -> tuple[list[int], Any]:
    return sorted(outcome[0]), outcome[1]


def _all_refuse_alike(journal: JournalLike, start: int) -> None:
    ways = _every_way(journal, start)
    expected = _outcome(ways.pop("reference"))
    for name, read in ways.items():
        got = _outcome(read)
        if expected[1] is None:  # whole: the same events, each in the read's own order
            assert _sorted_by_position(got) == expected, name
        else:
            assert got[1] == expected[1], name


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(position=st.sampled_from(sorted(EDITABLE)), start=st.integers(0, EVENTS),
       rehash=st.booleans())
def test_reads_that_find_predecessors_among_their_rows_refuse_as_each_row_alone(
        journal: JournalLike, position: int, start: int, rehash: bool) -> None:
    """An edit in place (or re-hashed with its row) is refused by every way of reading at
    the position the row-by-row check names, whatever window the read starts at."""
    _all_refuse_alike(journal, start)
    rows = {r.position: r for r in journal.read(order="position")}
    old = _edit(journal, position)
    if rehash:
        new, r = _payload(journal, position), rows[position]
        prev = rows[position - 1].hash if position > 1 else GENESIS_HASH
        _store(journal, position, new, record_hash_text(
            prev, r.position, r.id, r.stream, r.version, r.type, r.time, r.recorded_at, new))
    try:
        _all_refuse_alike(journal, start)
    finally:
        _store(journal, position, old, rows[position].hash)
    _all_refuse_alike(journal, start)


@pytest.mark.parametrize("gone", [(1,), (6,), (6, 7), (EVENTS,)])
def test_reads_that_find_predecessors_among_their_rows_name_a_missing_one_alike(
        journal: JournalLike, gone: tuple[int, ...]) -> None:
    if isinstance(journal, MemoryJournal):
        pytest.skip("the memory journal's rows cannot go missing")
    assert isinstance(journal, Journal)
    with journal._engine.begin() as conn:
        for position in gone:
            conn.execute(text("DELETE FROM events WHERE position = :p"), {"p": position})
    for start in (0, gone[0] - 1, gone[-1], gone[-1] + 1):
        if start < EVENTS:
            _all_refuse_alike(journal, start)
