"""The charges `reconcile` compares a file with: taken from the live projection (the
newest valid checkpoint and the events after it) plus one read of the journal, they are
exactly those a straight fold of the journal reports, event by event."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore import MemoryJournal, NewEvent
from projections.ledger import Ledger
from projections.projector import apply_recorded
from projections.queries.reconcile import (
    FileCharge,
    ReconcileFileError,
    ledger_charges,
    parse_charges,
    reconcile,
)
from projections.replay import replay
from projections.reversals import reversed_ids
from tests.projections.draws import job_event

Raw = tuple[str, str, str, int, dict[str, Any]]  # (id, stream, type, time, payload)
ACCOUNTS = ("a", "b")


@st.composite
def journals(draw: st.DrawFn) -> list[Raw]:
    """Grants, usage, adjustments and jobs of two accounts, out of time order; some job
    ids submitted by both accounts, jobs completed twice, events reversed."""
    # A first grant no reversal names: a checkpoint of nothing but reversed events is not
    # what this is about.
    first: Raw = ("g", "a", "grant", 0, {"account": "a", "amount": 50})
    events: list[Raw] = []
    jobs: list[tuple[str, str]] = []
    for n in range(draw(st.integers(1, 18))):
        kind = draw(st.sampled_from(["grant", "grant", "consume", "adjust", "submit", "submit",
                                     "start", "complete", "complete", "reverse"]))
        time = draw(st.integers(0, 20))
        account = draw(st.sampled_from(ACCOUNTS))
        stream = account
        payload: dict[str, Any]
        if kind in ("grant", "consume"):
            payload = {"account": account, "amount": draw(st.integers(1, 40))}
        elif kind == "adjust":
            payload = {"account": account, "amount": draw(st.integers(-30, 30).filter(bool)),
                       "reason": "correction"}
        elif kind == "submit":
            reuse = bool(jobs) and draw(st.booleans())
            job = draw(st.sampled_from(jobs))[0] if reuse else f"j{n}"
            payload = {"account": account, "job": job, "cost": draw(st.integers(0, 30)),
                       "priority": 1}
            jobs.append((job, account))
        elif kind == "reverse":
            if not events:
                continue
            target = draw(st.sampled_from(events))
            stream = target[1]
            payload = {"event": target[0], "reason": "wrong"}
        else:
            drawn = job_event(draw, kind, jobs)
            if drawn is None:
                continue
            payload, stream = drawn
        events.append((f"e{n}", stream, kind, time, payload))
    return [first, *events]


def folded_charges(journal: MemoryJournal, position: int) -> tuple[dict[str, Any],
                                                                  dict[str, Any]]:
    """The reference: a straight fold in canonical order, reading each event's outcome
    (folded again without the reversed events when there are any)."""
    probe = Ledger()
    for rec in journal.read(to_position=position):
        apply_recorded(probe, rec)
    ledger = Ledger(excluded=reversed_ids(probe.reversals))
    jobs: dict[str, Any] = {}
    events: dict[str, Any] = {}
    for rec in journal.read(to_position=position):
        outcome = apply_recorded(ledger, rec)
        if outcome.anomaly or outcome.account is None:
            continue
        if rec.type == "complete" and outcome.charge is not None:
            jobs[rec.payload["job"]] = (outcome.account, outcome.charge, rec.time,
                                        rec.position)
        elif rec.type in ("consume", "adjust"):
            amount = int(rec.payload["amount"])
            events[rec.id] = (outcome.account, amount if rec.type == "consume" else -amount,
                              rec.time, rec.position)
    return jobs, events


def charges(journal: MemoryJournal, position: int) -> tuple[dict[str, Any], dict[str, Any]]:
    jobs, events, _ = ledger_charges(journal, position)
    return ({k: (c.account, c.amount, c.time, c.position) for k, c in jobs.items()},
            {k: (c.account, c.amount, c.time, c.position) for k, c in events.items()})


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=journals(), cut=st.integers(0, 19), known=st.integers(0, 19))
def test_charges_from_the_projection_are_those_of_a_straight_fold(
        events: list[Raw], cut: int, known: int) -> None:
    journal = MemoryJournal()
    cut = min(cut, len(events))
    if cut:
        journal.append([NewEvent(*raw) for raw in events[:cut]])
        replay(journal, checkpoint=True, checkpoint_every=max(1, cut // 2))
    for raw in events[cut:]:  # one at a time: later ones land before the checkpoints
        journal.append([NewEvent(*raw)])
    head = journal.head()
    for position in sorted({head, min(known, head)}):
        assert charges(journal, position) == folded_charges(journal, position), position


@st.composite
def files(draw: st.DrawFn, jobs: dict[str, Any], events: dict[str, Any]) -> list[FileCharge]:
    """Rows naming the ledger's charges (some with another amount or account), jobs and
    ids it does not charge, duplicates; with or without times."""
    known = [("job", k, v) for k, v in jobs.items()] + [("id", k, v) for k, v in
                                                       events.items()]
    rows: list[FileCharge] = []
    timed = draw(st.booleans())
    for line in range(2, 2 + draw(st.integers(0, 8))):
        if known and draw(st.integers(0, 3)) != 0:
            kind, ref, (account, amount, time, _) = draw(st.sampled_from(known))
            amount += draw(st.sampled_from([0, 0, 1]))
            account = draw(st.sampled_from([account, account, "b" if account == "a" else "a"]))
        else:
            kind = draw(st.sampled_from(["job", "id"]))
            ref = draw(st.sampled_from(["j1", "j2", "e3", "e5", "nope"]))
            account, amount, time = "a", draw(st.integers(0, 30)), draw(st.integers(0, 20))
        rows.append(FileCharge(line, account, amount, ref if kind == "job" else None,
                               ref if kind == "id" else None,
                               time + draw(st.integers(-2, 2)) if timed else None))
    return rows


def reconciled(jobs: dict[str, Any], events: dict[str, Any],
               rows: list[FileCharge]) -> list[tuple[Any, ...]]:
    """The reference verdicts: every row against every charge, then the charges of the
    file's accounts and time range that it lacks."""
    out: list[tuple[Any, ...]] = []
    seen: set[tuple[str, str]] = set()  # what the rows name, under any account
    rows_seen: set[tuple[str, str, str]] = set()  # a duplicate: the same account too
    for row in rows:
        charge = jobs.get(row.job) if row.job is not None else events.get(row.event_id or "")
        if (row.account, *row.key) in rows_seen:
            status, ledger = "duplicate", None
        elif charge is None or charge[0] != row.account:
            status, ledger = "missing_from_ledger", None
        else:
            status = "matched" if charge[1] == row.amount else "amount_differs"
            ledger = charge[1]
        seen.add(row.key)
        rows_seen.add((row.account, *row.key))
        out.append((status, row.line, row.account, row.job, row.event_id, row.amount, ledger,
                    row.time))
    times = [r.time for r in rows if r.time is not None]
    accounts = {r.account for r in rows}
    extras: list[tuple[Any, ...]] = [(c[2], c[3], k, None, c) for k, c in jobs.items()
                                     if ("job", k) not in seen]
    extras += [(c[2], c[3], None, k, c) for k, c in events.items() if ("id", k) not in seen]
    for _, _, job, event_id, c in sorted(extras, key=lambda e: (e[0], e[1])):
        if c[0] in accounts and c[1] and (not times or min(times) <= c[2] <= max(times)):
            out.append(("missing_from_file", None, c[0], job, event_id, None, c[1], c[2]))
    return out


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=journals(), cut=st.integers(0, 19), data=st.data())
def test_reconcile_gives_the_verdicts_of_every_row_against_every_charge(
        events: list[Raw], cut: int, data: st.DataObject) -> None:
    journal = MemoryJournal()
    cut = min(cut, len(events))
    if cut:
        journal.append([NewEvent(*raw) for raw in events[:cut]])
        replay(journal, checkpoint=True)
    for raw in events[cut:]:
        journal.append([NewEvent(*raw)])
    jobs, charged = folded_charges(journal, journal.head())
    rows = data.draw(files(jobs, charged))
    found = [(f.status, f.line, f.account, f.job, f.event_id, f.file_amount,
              f.ledger_amount, f.time) for f in reconcile(journal, rows).findings]
    assert found == reconciled(jobs, charged, rows)


def test_a_job_submitted_by_two_accounts_is_charged_to_the_first() -> None:
    journal = MemoryJournal()
    journal.append([
        NewEvent("g1", "a", "grant", 1, {"account": "a", "amount": 100}),
        NewEvent("g2", "b", "grant", 1, {"account": "b", "amount": 100}),
        NewEvent("s1", "a", "submit", 2, {"account": "a", "job": "j", "cost": 30,
                                          "priority": 1}),
        NewEvent("s2", "b", "submit", 3, {"account": "b", "job": "j", "cost": 50,
                                          "priority": 1}),
        NewEvent("st", "b", "start", 4, {"job": "j"}),
        NewEvent("c1", "b", "complete", 5, {"job": "j", "success": True}),
    ])
    replay(journal, checkpoint=True)
    jobs, _ = charges(journal, journal.head())
    assert jobs == {"j": ("a", 30, 5, 6)}


def test_a_file_amount_is_read_as_import_reads_a_csv_integer() -> None:
    """Trimmed, then ASCII digits with an optional leading -: what `int()` would also
    take (1_000, +5, other scripts' digits) is named as a bad line."""
    import pytest

    from projections.queries.reconcile import ReconcileFileError, parse_charges

    good = parse_charges("account,amount,id\na, 10 ,c1\nb,-5,c2\n", "f.csv")
    assert [(row.account, row.amount) for row in good] == [("a", 10), ("b", -5)]
    for bad in ("1_000", "+5", "\u0661\u0660", "5.0", "1e3"):
        with pytest.raises(ReconcileFileError) as caught:
            parse_charges(f"account,amount,id\na,{bad},c1\n", "f.csv")
        assert "line 2: amount" in str(caught.value), bad
    # A time as every time is read: ASCII digits, within the limits of an event time.
    for bad in ("+5", "\u0665", str(2**63), str(-2**63)):
        with pytest.raises(ReconcileFileError) as caught:
            parse_charges(f"account,amount,id,time\na,5,c1,{bad}\n", "f.csv")
        assert "line 2:" in str(caught.value), bad


def test_names_in_the_file_are_exact_and_a_stray_space_is_forgiven_only_when_unknown(
        ) -> None:
    from projections.queries.reconcile import MATCHED, MISSING_FROM_LEDGER, parse_charges

    journal = MemoryJournal()
    journal.append([
        NewEvent("g1", "pad", "grant", 1, {"account": "pad", "amount": 100}),
        NewEvent("g2", " pad", "grant", 1, {"account": " pad", "amount": 100}),
        NewEvent("u1", "pad", "consume", 2, {"account": "pad", "amount": 5}),
        NewEvent(" u1", " pad", "consume", 2, {"account": " pad", "amount": 3}),
        NewEvent("u2", "pad", "consume", 3, {"account": "pad", "amount": 7})])

    def verdicts(text: str) -> list[tuple[str, str, str | None]]:
        found = reconcile(journal, parse_charges(text, "f.csv")).findings
        return [(f.status, f.account, f.event_id) for f in found]

    # Both accounts and both ids exist: each row is compared with exactly what it names.
    assert verdicts('account,id,amount\n" pad"," u1",3\npad,u1,5\n') == [
        (MATCHED, " pad", " u1"), (MATCHED, "pad", "u1"),
        ("missing_from_file", "pad", "u2")]
    # "pad ," and " u2" name nothing as written; trimmed, they name what the ledger holds.
    assert verdicts("account,id,amount\npad , u2,7\n") == [
        (MATCHED, "pad", "u2"), ("missing_from_file", "pad", "u1")]
    # A name the ledger knows in neither form stays as written, and is reported so.
    assert verdicts('account,id,amount\n" pad"," u9",3\n')[0] == (
        MISSING_FROM_LEDGER, " pad", " u9")


def test_a_name_the_file_writes_decomposed_is_read_as_the_composed_one_held() -> None:
    # A billing system on macOS may hand over "caf\u00e9" as "cafe" and a combining accent:
    # it looks the same, and names nothing else the ledger holds.
    from projections.queries.reconcile import MATCHED, MISSING_FROM_LEDGER, parse_charges

    journal = MemoryJournal()
    journal.append([
        NewEvent("g1", "caf\u00e9", "grant", 1, {"account": "caf\u00e9", "amount": 100}),
        NewEvent("u-\u00e9t\u00e9", "caf\u00e9", "consume", 2,
                 {"account": "caf\u00e9", "amount": 5})])
    found = reconcile(journal, parse_charges(
        "account,id,amount\ncafe\u0301 ,u-e\u0301te\u0301,5\n", "f.csv")).findings
    assert [(f.status, f.account, f.event_id) for f in found] == [
        (MATCHED, "caf\u00e9", "u-\u00e9t\u00e9")]
    # A name the ledger holds as written is read so, decomposed or not.
    journal.append([NewEvent("g2", "cafe\u0301", "grant", 3,
                             {"account": "cafe\u0301", "amount": 100})])
    found = reconcile(journal, parse_charges("account,id,amount\ncafe\u0301,u9,5\n",
                                             "f.csv")).findings
    assert [(f.status, f.account) for f in found] == [(MISSING_FROM_LEDGER, "cafe\u0301")]


def test_a_row_under_another_account_does_not_make_the_right_row_a_duplicate() -> None:
    """A duplicate repeats an earlier row's charge: the same job or id under the same
    account. A row naming a job under an account the ledger does not charge it to claims
    no charge, so the row naming it under the right account is compared as any other
    (in either order); a row repeating either one is a duplicate of it."""
    from projections.queries.reconcile import (
        DUPLICATE,
        MATCHED,
        MISSING_FROM_LEDGER,
        parse_charges,
    )

    journal = MemoryJournal()
    journal.append([
        NewEvent("g1", "a", "grant", 1, {"account": "a", "amount": 100}),
        NewEvent("g2", "b", "grant", 1, {"account": "b", "amount": 100}),
        NewEvent("s1", "a", "submit", 2, {"account": "a", "job": "j", "cost": 30,
                                          "priority": 1}),
        NewEvent("st", "a", "start", 3, {"job": "j"}),
        NewEvent("c1", "a", "complete", 4, {"job": "j", "success": True}),
        NewEvent("u1", "a", "consume", 5, {"account": "a", "amount": 7})])

    def verdicts(text: str) -> list[tuple[str, str, str | None]]:
        found = reconcile(journal, parse_charges(text, "f.csv")).findings
        return [(f.status, f.account, f.job or f.event_id) for f in found]

    assert verdicts("account,job,id,amount\nb,j,,30\na,j,,30\na,,u1,7\n") == [
        (MISSING_FROM_LEDGER, "b", "j"), (MATCHED, "a", "j"), (MATCHED, "a", "u1")]
    assert verdicts("account,job,id,amount\nb,,u1,7\na,,u1,7\na,j,,30\n") == [
        (MISSING_FROM_LEDGER, "b", "u1"), (MATCHED, "a", "u1"), (MATCHED, "a", "j")]
    assert verdicts("account,job,id,amount\na,j,,30\nb,j,,30\nb,j,,30\na,j,,30\n"
                    "a,,u1,7\n") == [
        (MATCHED, "a", "j"), (MISSING_FROM_LEDGER, "b", "j"), (DUPLICATE, "b", "j"),
        (DUPLICATE, "a", "j"), (MATCHED, "a", "u1")]
    # Named by the file, if only under another account, a charge is not missing from it.
    assert verdicts("account,job,id,amount\nb,j,,30\na,,u1,7\n") == [
        (MISSING_FROM_LEDGER, "b", "j"), (MATCHED, "a", "u1")]


def _finance_journal() -> MemoryJournal:
    """Account a's charges at known times: usage at 2, 3 and 3, a job charged 30 at 4
    (and one charged nothing), a usage report the fold kept as an anomaly at 5, debits
    of 10 and 1 at 6, a credit of 3 at 8, and the last event recorded, usage at 9."""
    journal = MemoryJournal()
    journal.append([
        NewEvent("g1", "a", "grant", 1, {"account": "a", "amount": 200}),
        NewEvent("g2", "b", "grant", 1, {"account": "b", "amount": 200}),
        NewEvent("u1", "a", "consume", 2, {"account": "a", "amount": 5}),
        NewEvent("u2", "a", "consume", 3, {"account": "a", "amount": 6}),
        NewEvent("u4", "a", "consume", 3, {"account": "a", "amount": 2}),
        NewEvent("s1", "a", "submit", 3, {"account": "a", "job": "j", "cost": 30,
                                          "priority": 1}),
        NewEvent("st", "a", "start", 3, {"job": "j"}),
        NewEvent("c1", "a", "complete", 4, {"job": "j", "success": True}),
        NewEvent("s0", "a", "submit", 4, {"account": "a", "job": "j0", "cost": 0,
                                          "priority": 1}),
        NewEvent("st0", "a", "start", 4, {"job": "j0"}),
        NewEvent("c0", "a", "complete", 4, {"job": "j0", "success": True}),
        NewEvent("bad", "a", "consume", 5, {"account": "a", "amount": -5}),
        NewEvent("x1", "a", "adjust", 6, {"account": "a", "amount": -10, "reason": "fix"}),
        NewEvent("x3", "a", "adjust", 6, {"account": "a", "amount": -1, "reason": "fix"}),
        NewEvent("x2", "a", "adjust", 8, {"account": "a", "amount": 3, "reason": "fix"}),
        NewEvent("u3", "a", "consume", 9, {"account": "a", "amount": 4})])
    return journal


def _verdicts(journal: MemoryJournal, text: str, as_known_at: int | None = None
              ) -> list[tuple[str, str | None, int | None, int | None, str]]:
    found = reconcile(journal, parse_charges(text, "f.csv"), as_known_at=as_known_at)
    return [(f.status, f.job or f.event_id, f.file_amount, f.ledger_amount, f.note.code)
            for f in found.findings]


def test_the_charges_missing_from_a_file_are_those_of_its_whole_time_range_in_time_order(
        ) -> None:
    """The range is inclusive at both ends: a charge at the file's first or last time
    that the file lacks is missing from it. Those charges come in event-time order,
    whatever their kind (a usage report at 3 before a job charged at 4). A job charged
    nothing, and a usage report the fold kept as an anomaly, are no charge."""
    journal = _finance_journal()
    assert _verdicts(journal, "account,id,amount,time\na,u2,6,3\na,x1,10,6\n") == [
        ("matched", "u2", 6, 6, ""), ("matched", "x1", 10, 10, ""),
        ("missing_from_file", "u4", None, 2, "consume"),
        ("missing_from_file", "j", None, 30, "job"),
        ("missing_from_file", "x3", None, 1, "adjust")]


def test_a_row_is_compared_with_the_charge_it_names_wherever_it_lies() -> None:
    """Outside the file's time range an event is found by its id (trimmed of a stray
    space when only that names it, the last event recorded included); a job by its id
    trimmed as well. A completion's id names no usage report or adjustment, and neither
    does a usage report the fold kept as an anomaly. A charge's sign counts: the credit
    x2 is a charge of -3, not 3."""
    journal = _finance_journal()
    text = ("account,job,id,amount,time\n"
            "a,,u2,6,3\n"
            "a,,x1,10,6\n"
            "a,,x2,3,\n"
            "a,, u3,4,\n"
            "a, j,,30,\n"
            "a,,c1,30,\n"
            "a,,bad,-5,\n")
    assert _verdicts(journal, text) == [
        ("matched", "u2", 6, 6, ""), ("matched", "x1", 10, 10, ""),
        ("amount_differs", "x2", 3, -3, ""), ("matched", "u3", 4, 4, ""),
        ("matched", "j", 30, 30, ""), ("missing_from_ledger", "c1", 30, None, "no_event"),
        ("missing_from_ledger", "bad", -5, None, "no_event"),
        ("missing_from_file", "u4", None, 2, "consume"),
        ("missing_from_file", "x3", None, 1, "adjust")]
    # As known before the last event was recorded, the row naming it finds nothing (and
    # keeps the name as written).
    before = _verdicts(journal, text, as_known_at=journal.head() - 1)
    assert before[3] == ("missing_from_ledger", " u3", 4, None, "no_event")


def test_a_duplicate_row_is_a_difference_and_the_accounts_are_listed_in_order() -> None:
    """A file whose rows all match but one repeats another is not ok (the command exits
    1): the other system charged it twice. The accounts the file covers are sorted."""
    journal = _finance_journal()
    twice = reconcile(journal, parse_charges(
        "account,id,amount,time\na,u1,5,2\na,u1,5,2\n", "f.csv"))
    assert twice.counts()["matched"] == twice.counts()["duplicate"] == 1
    assert twice.ok is False
    once = reconcile(journal, parse_charges("account,id,amount,time\na,u1,5,2\n", "f.csv"))
    assert once.ok is True
    names = ["zed", "b", "mid", "a", "q", "c"]
    several = reconcile(journal, parse_charges(
        "account,id,amount\n" + "".join(f"{name},u1,5\n" for name in names), "f.csv"))
    assert several.accounts == sorted(names)


def test_a_file_is_read_as_a_spreadsheet_writes_it() -> None:
    """Column names in any case and with spaces around them; a blank line, one of
    empty cells or a short one of nothing but spaces, skipped; a job or id cell of
    spaces is an empty cell; an account of spaces is no account."""
    rows = parse_charges(" Account , AMOUNT,Job,Id\n,,,\n\n , \na,10,  ,u1\nb,3,j1, \n",
                         "f.csv")
    assert [(r.line, r.account, r.amount, r.job, r.event_id) for r in rows] == [
        (5, "a", 10, None, "u1"), (6, "b", 3, "j1", None)]
    with pytest.raises(ReconcileFileError) as caught:
        parse_charges("account,amount,id\n  ,10,u1\n", "f.csv")
    assert caught.value.problems == ["line 2: no account"]


def test_a_bad_file_names_its_first_five_problems_and_counts_the_rest() -> None:
    def message(bad_lines: int) -> str:
        with pytest.raises(ReconcileFileError) as caught:
            parse_charges("account,amount,id\n" + "a,x,u1\n" * bad_lines, "f.csv")
        assert len(caught.value.problems) == bad_lines
        return str(caught.value)

    five = message(5)
    assert five.startswith("f.csv: 5 problem(s): line 2: amount 'x'")
    assert "line 6:" in five and "more" not in five
    six = message(6)
    assert "line 6:" in six and "line 7:" not in six and six.endswith(" (and 1 more)")


def test_a_time_written_as_a_date_covers_the_whole_day() -> None:
    """A billing export dated by day covers each day it names: a charge later on the file's
    last day is one the file must list, as one earlier on its first day is."""
    day = 1_794_787_200  # 2026-11-16T00:00Z
    journal = MemoryJournal()
    journal.append([
        NewEvent("g", "a", "grant", day - 86_400, {"account": "a", "amount": 100}),
        NewEvent("u-15", "a", "consume", day - 86_400 + 10, {"account": "a", "amount": 1}),
        NewEvent("u-16", "a", "consume", day + 36_000, {"account": "a", "amount": 2}),
        NewEvent("u-17", "a", "consume", day + 86_400, {"account": "a", "amount": 4})])

    def missing(text: str) -> tuple[list[str | None], dict[str, int] | None]:
        found = reconcile(journal, parse_charges(text, "f.csv"))
        return ([f.event_id for f in found.findings if f.status == "missing_from_file"],
                found.span)

    assert missing("account,id,amount,time\na,u-15,1,2026-11-15\n") == (
        [], {"from": day - 86_400, "to": day - 1})
    assert missing("account,id,amount,time\na,u-15,1,2026-11-15\na,x,0,2026-11-16\n") == (
        ["u-16"], {"from": day - 86_400, "to": day + 86_399})
    # A time of day is a moment: the range ends there.
    assert missing("account,id,amount,time\na,u-15,1,2026-11-15\na,x,0,2026-11-16T00:00Z\n"
                   ) == ([], {"from": day - 86_400, "to": day})


@pytest.mark.parametrize("row", ["x", {"account": "a", "amount": 5}, None])
def test_rows_that_are_not_charges_read_from_a_file_are_refused_by_type(row: object) -> None:
    journal = MemoryJournal()
    with pytest.raises(TypeError, match=r"parse_charges.*got (str 'x'|dict|NoneType)"):
        reconcile(journal, [row])  # type: ignore[list-item]
    assert journal.head() == 0
