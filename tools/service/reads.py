"""The read endpoints: answered from the live projection where it holds the answer
(balances, jobs), from the journal where the question is about the past as it was known
(`as_known_at`) or about every event (statements, revisions, the journal itself).

Every read needs a token of any role when tokens are configured.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import io
import itertools
import logging
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Annotated, Any, TypeVar
from urllib.parse import urlencode

import anyio
import orjson
from fastapi import APIRouter, Depends, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from eventstore import JournalLike, RecordedEvent
from projections import importing, owners, queries
from projections.anchors import parse_anchor
from projections.errors import UnknownAccount, UnknownJob
from projections.events import TIMELINE_START
from projections.ledger import Ledger
from projections.personal import with_personal
from projections.queries.common import exists_later, names_account, recorded_position
from projections.queries.livejob import job_whereabouts, live_job_explanation
from projections.replay import verify as verify_journal
from projections.revisionlog import RevisionLog
from projections.session import LedgerSession
from projections.validation import spelling
from projections.verifications import Verification, record_verification
from tools import render, wording
from tools.service.auth import READ, needs
from tools.service.ledger import STALE, Busy, LedgerService, service_of
from tools.service.models import (
    BalanceAnswer,
    Head,
    JobAnswer,
    JournalPage,
    RevisionsPage,
    StatementAnswer,
    VerifyAnswer,
    VerifyBody,
)
from tools.service.problems import CLIENT_GONE, ServiceProblem, documented
from tools.service.times import parse_query_time, query_text

log = logging.getLogger("gpu_credits.service")
T = TypeVar("T")

router = APIRouter(prefix="/v1", dependencies=[Depends(needs(READ))])

_ERRORS = documented([
    (400, "`Authorization` sent more than once (when tokens are configured)"),
    (401, "no or unknown bearer token (when tokens are configured)"),
    (404, "unknown account or job"),
    (422, "invalid parameters"),
    (503, "database unavailable or service starting"),
])

_PAGE_RANGES = {"after": "a whole number, 0 or more", "limit": "a whole number from 1 to 1000"}
# `GET /v1/accounts` pages by name: only its `limit` is a number.
_ACCOUNT_PAGE_RANGES = {"limit": "a whole number from 1 to 10000"}


def _plain_page_numbers(request: Request, ranges: dict[str, str] = _PAGE_RANGES) -> None:
    """A page's `after` and `limit` read as `at` and `as_known_at` read integers: digits
    (blanks around, as a query string's `+` arrives), not the other spellings of an int
    Python takes (`1_000`, `+5`), which FastAPI's reading lets through."""
    for name, valid in ranges.items():
        value = request.query_params.get(name)
        if value is not None and not re.fullmatch(r"\s*-?[0-9]+\s*", value):
            raise ServiceProblem(422, f"query.{name}: not a whole number (got {value!r}; "
                                 f"give {valid})", slug="invalid")


TimeParam = Annotated[str | None, Query(
    description="event time: an integer or ISO 8601 with an offset (default: the latest)",
    max_length=64)]
KnownParam = Annotated[str | None, Query(
    description="only events recorded up to this journal position (or ISO 8601 recorded-at "
                "time); default: all", max_length=64)]


# A query string's `+` arrives as a space (form decoding): `?at=2026-11-20T00:00:00+01:00`
# as a client writes it reads `...00:00:00 01:00`.
def _time(name: str, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return parse_query_time(query_text(value))
    except ValueError as exc:
        raise ServiceProblem(422, f"{name}: {exc}", slug="invalid") from None


def _known(journal: JournalLike, value: str | None) -> int:
    """A position from `as_known_at`: an integer position or an ISO 8601 recorded-at, read
    and refused as `--as-known-at` reads them (never clamped to the head: a position the
    journal has not reached is a typo or another journal's, and a position any answer
    gave is committed, so every replica's journal holds it), but for a recorded-at
    without its offset."""
    if value is None:
        return journal.head()
    text = query_text(value).strip()
    try:
        position = text if text.lstrip("+-").isdigit() else _with_offset(text)
        return recorded_position(journal, position, shows_head="GET /v1/journal/head")
    except ValueError as exc:
        said = str(exc).removeprefix("as known at: ")
        raise ServiceProblem(422, f"as_known_at: {said}", slug="invalid") from None


def _with_offset(text: str) -> str:
    """A recorded-at time as every time of the service is given: ISO 8601 with its offset
    (the command line takes one without as UTC; a server has no local time a client could
    mean, so here it is refused rather than guessed)."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return text  # parse_micros says what is wrong with it
    if moment.tzinfo is None:
        utc = f"{text}Z" if len(text) > 10 else f"{text}T00:00:00Z"
        raise ValueError(f"{text!r} has no offset; write it as {utc} (UTC) or with +HH:MM")
    return text


class _ReversalTimes:
    """The event times of reversals and of the events they name, looked up in the journal
    once each (an event's time never changes)."""

    def __init__(self) -> None:
        self.times: dict[str, int] = {}

    def load(self, journal: JournalLike, ledger: Ledger) -> None:
        for event_id in {*ledger.reversals, *ledger.reversals.values()} - self.times.keys():
            rec = journal.get(event_id)
            self.times[event_id] = TIMELINE_START if rec is None else rec.time


_REVERSAL_TIMES: weakref.WeakKeyDictionary[LedgerService, _ReversalTimes] = (
    weakref.WeakKeyDictionary())


def _latest(service: LedgerService, ledger: Ledger) -> int | None:
    """The journal's latest event time, the default `at` of `balance --json`; None when it
    needs the journal (`_read_with_times`). `ledger.last` is it but for reversals and the
    events they take out, which it leaves out so that they do not drag the live decisions'
    clock (a reversal of a time in milliseconds, say): here they count, as in the journal."""
    latest = TIMELINE_START if ledger.applied == 0 and not ledger.accounts else ledger.last[0]
    if not ledger.reversals:
        return latest
    known = _REVERSAL_TIMES.get(service)
    if known is None:
        return None
    times = known.times
    for reversal, target in ledger.reversals.items():
        if reversal not in times or target not in times:
            return None
        latest = max(latest, times[reversal], times[target])
    return latest


def _read_with_times(service: LedgerService, read: Callable[[LedgerSession, Ledger], T]) -> T:
    """`read` on a worker thread, once the times `_latest` needs are loaded."""
    with service.reading_session() as session:
        ledger = session.ledger
        _REVERSAL_TIMES.setdefault(service, _ReversalTimes()).load(service.journal, ledger)
        return read(session, ledger)


def _figures(account: str, figures: queries.Figures, at: int, position: int) -> dict[str, Any]:
    return {"account": account, **wording.to_dict(figures), "at": at, "as_known_at": position}


ACCOUNTS_ON_THE_LOOP = 2_000
"""A listing of at most this many accounts is read on the event loop when the projection
is free; a longer one on a worker thread (10^5 accounts take seconds, for which the loop
would answer no one else)."""


@router.get("/accounts", response_model=list[BalanceAnswer], responses=_ERRORS,
            summary="Every account's balance")
async def accounts(request: Request, response: Response, at: TimeParam = None,
                   as_known_at: KnownParam = None,
                   after: Annotated[str | None, Query(
                       min_length=1, max_length=200,
                       description="list only the accounts whose names sort after this "
                                   "one (the last of the previous page)")] = None,
                   limit: Annotated[int | None, Query(
                       ge=1, le=10_000,
                       description="at most this many accounts; a `Link` header "
                                   "(rel=\"next\") gives the next page when more follow "
                                   "(default: every account)")] = None) -> Any:
    """Every account with its figures at event time `at`, as the journal stood at
    position `as_known_at` (by default: at the journal's latest event time, as it stands):
    the accounts and figures of `gpu-credits accounts --json`, each as a balance object,
    in order of name; a page of them with `after` and `limit`."""
    _plain_page_numbers(request, _ACCOUNT_PAGE_RANGES)
    service = service_of(request)
    when = _time("at", at)
    if when is not None or as_known_at is not None:
        rows = await run_in_threadpool(_accounts_as_known, service, when, as_known_at,
                                       after, limit)
        return _account_page(request, response, rows, limit)

    def read(_: LedgerSession, ledger: Ledger, *, on_loop: bool = True
             ) -> list[dict[str, Any]] | None:
        at, position = _latest(service, ledger), service.head()
        held = len(ledger.accounts)
        if at is None or (on_loop and min(limit or held, held) > ACCOUNTS_ON_THE_LOOP):
            return None
        names = _page_of(ledger.accounts, after, limit)
        return [_figures(name, queries.Figures.of(ledger.accounts[name], at), at, position)
                for name in names]

    answer = await _from_projection(service, read)
    if answer is None:
        answer = await run_in_threadpool(_read_with_times, service,
                                         functools.partial(read, on_loop=False))
    assert answer is not None  # the reversals' times are loaded: `_latest` knows
    return _account_page(request, response, answer, limit)


def _page_of(names: Iterable[str], after: str | None, limit: int | None) -> list[str]:
    """The names after `after` in order, at most `limit` + 1 of them (the one more says
    whether another page follows)."""
    following = names if after is None else (n for n in names if n > after)
    return sorted(following) if limit is None else heapq.nsmallest(limit + 1, following)


def _account_page(request: Request, response: Response, rows: list[dict[str, Any]],
                  limit: int | None) -> Any:
    """`rows` as the answer: the page of `limit` with a `Link` to the next when one more
    was read; encoded at once (a balance object of plain ints and names needs no model
    to check it, and 10^5 of them took FastAPI's encoder seconds)."""
    headers: dict[str, str] = {}
    if limit is not None and len(rows) > limit:
        rows = rows[:limit]
        query = [(k, v) for k, v in request.query_params.multi_items() if k != "after"]
        following = urlencode([*query, ("after", rows[-1]["account"])])
        headers["Link"] = f'<{request.url.path}?{following}>; rel="next"'
    try:
        body = orjson.dumps(rows)
    except orjson.JSONEncodeError:  # an integer past 64 bits: FastAPI's own encoder
        response.headers.update(headers)
        return rows
    return Response(body, media_type="application/json", headers=headers)


def _accounts_as_known(service: LedgerService, when: int | None, as_known_at: str | None,
                       after: str | None = None, limit: int | None = None
                       ) -> list[dict[str, Any]]:
    """Every account at `when` as known at a position: from the journal (its checkpoints
    and events), as `accounts --at --as-known-at` reads it; an account opened after
    `when`, or recorded after the position, is not listed. A page of them with `after`
    and `limit` (one more, as `_page_of`)."""
    journal = service.journal
    report = queries.accounts(journal, at=when, as_known_at=_known(journal, as_known_at))
    wanted = set(_page_of((row.account for row in report.rows), after, limit))
    return [_figures(row.account, row.figures, report.at, report.as_known_at)
            for row in report.rows if row.account in wanted]


@router.get("/accounts/{account:path}/balance", response_model=BalanceAnswer, responses=_ERRORS,
            summary="An account's balance")
async def balance(account: str, request: Request, at: TimeParam = None,
                  as_known_at: KnownParam = None) -> Any:
    """The same object as `gpu-credits balance ACCOUNT --json`: at event time `at`, as
    the journal stood at position `as_known_at`."""
    service = service_of(request)
    when = _time("at", at)
    if as_known_at is not None:
        return await run_in_threadpool(_balance_as_known, service, account, when, as_known_at)

    def read(session: LedgerSession, ledger: Ledger) -> dict[str, Any] | None:
        if account not in ledger.accounts:
            return _NOT_IN_PROJECTION
        moment = _latest(service, ledger) if when is None else when
        if moment is None:
            return None
        state = session.account_at(account, moment)
        return _figures(account, queries.Figures.of(state, moment), moment, service.head())

    answer = await _from_projection(service, read)
    if answer is None:
        answer = await run_in_threadpool(_read_with_times, service, read)
    if answer is _NOT_IN_PROJECTION:
        return await run_in_threadpool(_balance_from_journal, service, account, when)
    return answer


# The live projection holds no such account; the journal may still name it.
_NOT_IN_PROJECTION: dict[str, Any] = {}


def _balance_from_journal(service: LedgerService, account: str,
                          when: int | None) -> dict[str, Any]:
    """The balance of an account the live projection does not hold, as `balance --json`
    answers it: one whose events the journal records (its opening grant reversed, say)
    has figures, every other is unknown (404)."""
    journal = service.journal
    if not exists_later(journal, account):
        with service.reading() as ledger:
            raise queries.unknown_account(account, ledger)
    return _balance_as_known(service, account, when, str(journal.head()))


def _balance_as_known(service: LedgerService, account: str, when: int | None,
                      as_known_at: str) -> dict[str, Any]:
    position = _known(service.journal, as_known_at)
    return wording.to_dict(queries.balance(service.journal, account, at=when,
                                           as_known_at=position))


async def _from_projection(service: LedgerService,
                           read: Callable[[LedgerSession, Ledger], T]) -> T:
    """`read` on the live projection: on the event loop when that costs no wait (the
    usual case under load), else on a worker thread, which may wait for the batch in
    commit or look for other writers' events first."""
    asked_at = time.monotonic()
    answer = service.read_at_once(read, asked_at)
    if answer is STALE:
        with contextlib.suppress(Exception):  # else the worker thread's read says why
            await asyncio.wrap_future(service.refreshed())
        answer = service.read_at_once(read, asked_at)
    if not isinstance(answer, Busy):
        return answer

    def waiting() -> T:
        with service.reading_session() as session:
            return read(session, session.ledger)

    return await run_in_threadpool(waiting)


def prefers_csv(accept: str) -> bool:
    """Whether an Accept header asks for CSV over JSON: the one its best-weighted media
    range matching each names first (`q`, default 1; 0 refuses); JSON on a tie, without
    a header, or when neither is named."""
    csv_q = json_q = -1.0
    for item in accept.split(","):
        media, *params = (part.strip() for part in item.split(";"))
        q = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0  # a weight that is not a number asks for nothing
        media = media.lower()
        if media in ("text/csv", "text/*"):
            # The exact type outranks the wildcard, whatever their order.
            csv_q = q if media == "text/csv" or csv_q < 0 else csv_q
        elif media in ("application/json", "application/*", "*/*"):
            json_q = q if media == "application/json" or json_q < 0 else json_q
    return csv_q > 0 and csv_q > json_q


STATEMENTS_AT_ONCE = 4
"""How many statements one process reads at a time. A statement reads the account's
history from the journal and holds the whole answer until it is sent: 200 asked at once
held 1.5 GB, and on two cores more than a few at once only share the same CPU. The rest
wait their turn, costing nothing meanwhile."""

@router.get("/accounts/{account:path}/statement", response_model=StatementAnswer,
            responses={**_ERRORS, 200: {"content": {"text/csv": {}},
                                        "description": "the statement (JSON, or CSV for "
                                                       "Accept: text/csv)"}},
            summary="An account's statement")
async def statement(account: str, request: Request,
                    from_: Annotated[str | None, Query(alias="from", max_length=64,
                                                       description="start, with an opening "
                                                                   "balance")] = None,
                    to: TimeParam = None, as_known_at: KnownParam = None) -> Any:
    """Every change to the account with a running balance (as `statement --json`);
    `Accept: text/csv` gives the CSV of `statement --csv`."""
    service = service_of(request)
    start, end = _time("from", from_), _time("to", to)
    if start is not None and end is not None and start > end:
        raise ServiceProblem(422, f"from {start} is after to {end}", slug="invalid")
    csv = prefers_csv(request.headers.get("accept", ""))
    async with request.app.state.statements:
        # Its turn came: a client that hung up meanwhile gets nothing read for it (clients
        # that asked and left kept the service reading for minutes).
        if await request.is_disconnected():
            return Response(status_code=CLIENT_GONE)
        return await run_in_threadpool(_statement, service, account, start, end,
                                       as_known_at, csv)


def _statement(service: LedgerService, account: str, start: int | None, end: int | None,
               as_known_at: str | None, csv: bool) -> Any:
    journal = service.journal
    position = _known(journal, as_known_at)
    # As `statement --as-known-at`: only the events recorded up to `position`, to the
    # journal's latest event time (the balance's default `at`), an account opened later
    # has no lines yet.
    st = queries.statement(journal, account, from_time=start, to_time=end,
                           as_known_at=position)
    if csv:
        out = io.StringIO()
        render.statement_csv(st, out)
        return Response(out.getvalue(), media_type="text/csv")
    return {**wording.to_dict(st), "as_known_at": position}


@router.get("/jobs/{job:path}", response_model=JobAnswer, response_model_exclude_none=False,
            responses=_ERRORS, summary="A job")
def job(job: str, request: Request) -> Any:
    """A job's state, cost, charge, the grants that paid it, and why it was rejected."""
    service = service_of(request)
    with service.reading_session() as session:
        ledger = session.ledger
        answer = _job_state(service, ledger, job)
        if answer["state"] not in _FINISHED:
            return answer
        streams = owners.job_streams(service.journal, ledger, job)
        read_to = session.projector.position
    # The job's streams are read up to that position without the projection's lock: an
    # account with a long history would otherwise hold every decision of the service
    # for the whole read. Only what was recorded meanwhile is read under the lock below,
    # so the answer is the projection's at one position.
    early = {stream: owners.stream_job_events(service.journal, stream, job,
                                              to_position=read_to) for stream in streams}
    with service.reading_session() as session:
        ledger = session.ledger
        answer = _job_state(service, ledger, job)
        if answer["state"] not in _FINISHED:
            return answer
        position = session.projector.position
        found: list[RecordedEvent] = []
        streams = owners.job_streams(service.journal, ledger, job)
        for stream in streams:
            if stream in early and read_to <= position:
                found.extend(early[stream])
            else:  # a stream that holds the job's events only since (or a rebuild)
                found.extend(owners.stream_job_events(service.journal, stream, job,
                                                      to_position=position))
        if read_to < position:
            found.extend(owners.job_events_since(
                service.journal, [s for s in streams if s in early], job, read_to, position))
        found.sort(key=lambda rec: (rec.time, rec.position))
        events = [rec for rec in found
                  if rec.id not in ledger.excluded]  # reversed: refused or paid nothing
        # The outcomes say who paid and why a submit was refused. The projection
        # remembers its recent ones; the job's events are found wherever they were
        # filed (a completion recorded before its submit is in `job:<id>`, one recorded
        # while another account's submit of the id was known is in that account's
        # stream), not only in the job's account's stream.
        told = [session.remembered_outcome(rec) for rec in events]
        # Older than the projection remembers (or before the checkpoint it started from):
        # the job's streams folded, as the web view's job page does, at the cost of its
        # account's events rather than the timeline's.
        where = None if None not in told else job_whereabouts(
            service.journal, ledger, job, position=position)
    if where is None:
        for rec, outcome in zip(events, told, strict=True):
            assert outcome is not None
            if rec.type == "submit" and not outcome.ok and not outcome.anomaly:
                answer["reason"] = outcome.reason
            elif rec.type == "complete" and not outcome.anomaly:
                answer["paid_by"] = [{"grant": g, "amount": a} for g, a in outcome.paid_by]
        return answer
    explanation = live_job_explanation(service.journal, where)
    answer["reason"] = explanation.reason
    answer["paid_by"] = [{"grant": g, "amount": a} for g, a in explanation.paid_by]
    return answer


_FINISHED = ("rejected", "succeeded", "failed")
"""The states whose answer names who paid or why the submit was refused."""


def _job_state(service: LedgerService, ledger: Ledger, job: str) -> dict[str, Any]:
    """The job's answer from the projection, without who paid and why it was refused
    (read under `reading()`); UnknownJob naming a reversed submit when one names it."""
    state = ledger.jobs.get(job)
    if state is None:
        # A reversed submit still names the job: say so, not "no submit names it".
        # In timeline order: the answer must not depend on the order they arrived in.
        taken_out = [rec.id for rec in sorted(
            owners.uncounted_submits(service.journal, ledger, {job}),
            key=lambda rec: (rec.time, rec.position)) if rec.id in ledger.excluded]
        if taken_out:
            listed = ", ".join(repr(event_id) for event_id in taken_out)
            were = "s " + listed + " were" if len(taken_out) > 1 else " " + listed + " was"
            raise UnknownJob(f"unknown job {spelling(job)}: its submit{were} reversed, so it was "
                             "never submitted (`explain --job` lists its events)")
        raise UnknownJob(f"unknown job {spelling(job)} (no submit names it)")
    return {"job": job, "account": state.account, "state": state.state, "cost": state.cost,
            "priority": state.priority, "pool": state.pool, "charged": state.charge,
            "paid_by": [], "reason": None}


class _RevisionCache:
    """The revisions' JSON rows, made again only when the journal's head moved, from a
    `RevisionLog` that folds only what was recorded since."""

    def __init__(self, log: RevisionLog) -> None:
        self._log = log
        self._lock = threading.Lock()
        self._head = -1
        self._made: list[dict[str, Any]] = []  # each row without its account
        self._rows: list[dict[str, Any]] = []

    def rows(self, journal: JournalLike) -> list[dict[str, Any]]:
        with self._lock:
            head = journal.head()
            if head != self._head:
                rows, accounts = self._log.rows()
                self._made.extend(wording.to_dict(row) for row in rows[len(self._made):])
                # The account of the revised event as the fold holds it, not the stream
                # it was filed in (`job:<id>` is none; a job's step may lie in another
                # submitter's stream): the same events give the same accounts whatever
                # order they arrived in.
                self._rows = [{**made, "account": accounts[row.revision.event_id]}
                              for made, row in zip(self._made, rows, strict=True)]
                self._head = head
            return self._rows


@router.get("/revisions", response_model=RevisionsPage, responses=_ERRORS,
            summary="What late events and reversals changed")
def revisions(request: Request,
              after: Annotated[int, Query(ge=0, description="revisions already seen (the "
                                                            "`next` of the last page, or "
                                                            "its `seen` at the end)")] = 0,
              limit: Annotated[int, Query(ge=1, le=1000)] = 100,
              account: Annotated[str | None, Query(min_length=1, max_length=200)] = None
              ) -> Any:
    """Each outcome a late event revised, before and after, in the order they came."""
    _plain_page_numbers(request)
    service = service_of(request)
    if account is not None and not names_account(service.journal, account):
        # As every route naming an account: a misspelt one (or a stream of a job's
        # events, `job:<id>`, which is no account) must not read as "nothing was
        # revised".
        with service.reading() as ledger:
            raise queries.unknown_account(account, ledger)
    cache: _RevisionCache = request.app.state.revisions
    rows = cache.rows(service.journal)
    if after > len(rows):
        # No page gave it (revisions only ever come after those listed): an empty page
        # would hide the revisions up to it once they come.
        raise ServiceProblem(422, f"after: {after} is more than the {len(rows)} revision(s) "
                             f"so far: give 0 to {len(rows)} (the `next` or `seen` of the "
                             "last page)", slug="invalid")
    # Only the rows the page shows (and one more, to say whether more follow) are read:
    # listing every revision first made paging through them cost the square of their
    # number.
    matching = (i for i in range(after, len(rows))
                if account is None or rows[i]["account"] == account)
    found = [(i, rows[i]) for i in itertools.islice(matching, limit + 1)]
    page = found[:limit]
    more = len(found) > limit
    following = page[-1][0] + 1 if more else None
    # At the end, `next` is none and a client filtering by account could not tell where
    # to ask again later: the revisions it skipped as other accounts' count in `after`.
    # `seen` says, so a poller lists each new revision once.
    seen = following if following is not None else len(rows)
    return {"revisions": [r for _, r in page], "next": following, "seen": seen}


def _journal_record(rec: RecordedEvent, personal: dict[str, Any]) -> dict[str, Any]:
    from datetime import UTC, datetime

    recorded = datetime.fromtimestamp(rec.recorded_at / 1_000_000, UTC)
    return {**importing.export_record(rec, personal), "position": rec.position,
            "recorded_at": recorded.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}


@router.get("/journal", response_model=JournalPage, responses=_ERRORS,
            summary="The journal, in arrival order")
def journal_page(request: Request,
                 after: Annotated[int, Query(ge=0, description="the last position seen")] = 0,
                 limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> Any:
    """Events in the JSON Lines format with `id`, `position` and `recorded_at` (UTC)."""
    _plain_page_numbers(request)
    journal = service_of(request).journal
    head = journal.head()
    if after > head:
        # As `as_known_at` past the head: no page gave it (a typo, another journal's),
        # and an empty page would hide the events up to it once they are recorded.
        raise ServiceProblem(422, f"after: position {after} is past the journal's head "
                             f"{head}: give a position from 0 to {head} (the `next` of the "
                             "last page, or the last position it listed)", slug="invalid")
    # Fetched a page at a time (and the one after it, to tell whether there is more),
    # not the 5,000 rows a read fetches by default: a page costs its own size.
    got = list(itertools.islice(journal.read(after_position=after, order="position",
                                             batch_size=limit + 1), limit + 1))
    page = got[:limit]
    more = len(got) > limit
    return {"events": [_journal_record(r, p) for r, p in with_personal(journal, page)],
            "next": page[-1].position if more else None}


@router.get("/journal/head", response_model=Head, responses=_ERRORS,
            summary="The journal's head: an anchor")
def head(request: Request) -> Any:
    """The last position and its chain hash: keep it outside the database, and later
    `POST /v1/journal/verify` with it proves the journal still holds that prefix."""
    anchor = service_of(request).journal.head_anchor()
    return {"position": anchor.position, "hash": anchor.hash}


@router.post("/journal/verify", response_model=VerifyAnswer,
             response_model_exclude_none=True,
             responses={**_ERRORS, **documented([(413, "the body is larger than 64 KiB")])},
             summary="Verify the journal")
def verify(request: Request, body: VerifyBody | None = None) -> Any:
    """Check the hash chain (and, with an anchor `POSITION:HASH`, that the journal still
    holds the anchored prefix unchanged), then that replay reproduces the recorded
    checkpoints: what `gpu-credits verify [--anchor]` checks."""
    journal = service_of(request).journal
    anchor = None
    if body is not None and body.anchor is not None:
        try:
            anchor = parse_anchor(body.anchor)  # as `verify --anchor` reads it
        except ValueError as exc:
            raise ServiceProblem(422, str(exc), slug="invalid") from None
    head = journal.head()
    chain = journal.verify_chain(anchor=anchor)
    if not chain.ok:
        _record(journal, Verification(False, head, chain.events, 0, chain.first_bad_position,
                                      chain.problem, time.time(), "http"))
        return {"ok": False, "events": chain.events,
                "first_bad_position": chain.first_bad_position, "problem": chain.problem}
    verdict = Verification.of(verify_journal(journal), head=head, by="http",
                              finished_at=time.time(), events=chain.events)
    _record(journal, verdict)
    answer: dict[str, Any] = {"ok": verdict.ok, "events": verdict.events}
    if not verdict.ok:
        answer["first_bad_position"] = verdict.first_bad_position
        answer["problem"] = verdict.problem
    if verdict.stale_checkpoints:
        answer["stale_checkpoints"] = list(verdict.stale_checkpoints)
    return answer


def _record(journal: Any, verdict: Verification) -> None:
    """Keep the verdict as the journal's last verification (the web view's summary shows
    it); a journal this process cannot write keeps none, and the answer is the same."""
    problem = record_verification(journal, verdict)
    if problem is not None:
        log.info("verification not recorded: %s", problem)


def install(app: Any) -> None:
    """State the read routes need."""
    log = RevisionLog(app.state.ledger.journal)
    app.state.revision_log = log  # the web view, mounted beside, catches up the same one
    app.state.revisions = _RevisionCache(log)
    app.state.statements = anyio.CapacityLimiter(STATEMENTS_AT_ONCE)


__all__ = ["UnknownAccount", "install", "router"]
