"""What each page shows, gathered from projections' queries: plain data for the templates.

No ledger rule lives here: figures, statements, lineage and revisions come from
`projections`; this module picks, filters and orders them for a page, and parses the
page's query string (bad values raise `ValueError` naming what would be valid).
"""

from __future__ import annotations

import dataclasses
import heapq
import io
import re
from dataclasses import dataclass, field
from typing import Any

from eventstore import JournalLike, RecordedEvent
from projections import csvcells
from projections.events import GENERAL, TIMELINE_START
from projections.jobqueue import CANCELLED, FAILED, RUNNING, SUCCEEDED
from projections.ledger import PENDING
from projections.owners import (
    event_account,
    job_stream,
    submitted_elsewhere,
)
from projections.personal import personal_of
from projections.queries import (
    AccountExplanation,
    Figures,
    JobExplanation,
    RevisionRow,
    Statement,
    StatementLine,
    json_time,
    latest_time,
    recorded_position,
    revision_rows,
    unknown_account,
)
from projections.queries.common import exists_later, names_account
from projections.queries.explain import waiting_reason
from projections.queries.history import (
    AccountHistory,
    event_lines,
    extended_history,
    lines_of,
)
from projections.queries.history import account_history as history_of
from projections.queries.livejob import job_whereabouts, live_job_explanation
from projections.queries.ownjobs import NOT_HELD, jobs_differ, own_jobs, submitted_jobs
from projections.queries.reports import window_end
from projections.queries.walk import own_reversed
from projections.timefmt import format_time, parse_end_time, parse_time
from projections.timeline import (
    ENTRY_ORDER,
    ExpiringEntry,
    grant_burndown,
    unordered_expiring_entries,
)
from projections.validation import loose, require_time
from tools import wording
from tools.service.times import query_text
from tools.web.source import AuditSource
from tools.web.verifying import last_verify

DAY = 86_400
EXPIRING_WINDOW = 7 * DAY
"""The summary page lists credits expiring within a week of the latest event time."""

JOURNAL_PAGE = 50
"""Events per page of the journal, unless `limit` says otherwise."""

MAX_PAGE = 500

LINE_KINDS = ("account", "grant", "consume", "adjust", "void", "reverse", "submit", "start",
              "complete", "cancel", "expire", "refill")
"""Kinds of statement line the ledger filter offers."""

# -- query strings -----------------------------------------------------------------------


def parse_optional_time(name: str, text: str | None, *, end: bool = False) -> int | None:
    """An event time from a query parameter (integer or ISO-8601), None when empty;
    `end`: it ends a window, so a date alone is its whole day (`parse_end_time`)."""
    if text is None or not text.strip():
        return None
    try:
        return require_time(name, (parse_end_time if end else parse_time)(query_text(text)))
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


def parse_known_at(journal: JournalLike, text: str | None) -> int:
    """The position of `as_known_at` (a position or an ISO-8601 recorded time); the head
    when empty. As `--as-known-at` and the API: a journal that holds events has nothing
    to answer from before its first one."""
    if text is None or not text.strip():
        return journal.head()
    try:
        return recorded_position(journal, query_text(text))
    except ValueError as exc:
        first = 1 if journal.head() else 0
        raise ValueError(f"as_known_at: {exc}; give a position ({first} to "
                         f"{journal.head():,}) or a recorded time such as "
                         "2026-11-03T12:00Z") from None


_WHOLE = re.compile(r"-?[0-9]{1,19}")
"""A whole number in a query string: ASCII digits (int() would also take 1_000, full-width
digits and thousands of digits, which it refuses with a message about Python)."""


def parse_int(name: str, text: str | None, default: int, *, low: int = 0,
              high: int | None = None) -> int:
    """A whole number from a query parameter within [low, high]."""
    if text is None or not text.strip():
        return default
    if _WHOLE.fullmatch(text.strip()) is None:
        raise ValueError(f"{name}: not a whole number: {text[:40]!r}")
    value = int(text)
    if value < low or (high is not None and value > high):
        valid = f"{low:,} or more" if high is None else f"between {low:,} and {high:,}"
        raise ValueError(f"{name}: {value} is out of range; expected {valid}")
    return value


# -- summary -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AccountRow:
    """One account on the summary page: its figures, in total and per pool."""

    account: str
    figures: Figures
    pools: dict[str, Figures]  # by pool name, sorted (`Figures.by_pool`)


def head_record(journal: JournalLike, position: int | None = None) -> RecordedEvent | None:
    """The record at `position` (default: the head), None for an empty journal."""
    at = journal.head() if position is None else position
    if at <= 0:
        return None
    return next(iter(journal.read(after_position=at - 1, to_position=at, order="position")),
                None)


@dataclass(frozen=True, slots=True)
class Summary:
    """What the summary page needs of the whole ledger, once per head: every account's
    name and the credits expiring soon (the figures of the accounts a page shows are
    read when it is shown)."""

    at: int
    names: list[str]  # every account, by name
    expiring: list[ExpiringEntry]  # in no particular order
    expiring_until: int
    soonest: list[ExpiringEntry]  # the first `EXPIRING_SHOWN` of them, soonest first


def soonest_expiring(entries: list[ExpiringEntry]) -> list[ExpiringEntry]:
    """The first `EXPIRING_SHOWN` of `entries` in `expiring_entries`' order, without
    sorting the tens of thousands a large ledger can hold."""
    return heapq.nsmallest(EXPIRING_SHOWN, entries, key=ENTRY_ORDER)


def summary_figures(source: AuditSource) -> Summary:
    """Every account's name and the credits expiring soon, at the journal's latest event
    time (remembered until the head moves: they change only with it)."""

    def build() -> Summary:
        at = latest_time(source.journal)
        with source.reading() as ledger:  # copy out what the page shows: it holds a lock
            names = sorted(ledger.accounts)
            expiring = unordered_expiring_entries(ledger, at, window_end(at, EXPIRING_WINDOW))
        return Summary(at, names, expiring, window_end(at, EXPIRING_WINDOW),
                       soonest_expiring(expiring))

    return source.cached(("summary",), build)


def account_rows(source: AuditSource, names: list[str], at: int
                 ) -> tuple[list[AccountRow], int]:
    """The figures of these accounts at `at`, in total and per pool, from the live
    ledger, and the time they are at: later than `at` if the ledger has events past it
    (appended since `at` was read), as figures are never of a time before an account's
    last event."""
    with source.reading() as ledger:
        at = max(at, ledger.last[0])
        states = [(name, ledger.accounts.get(name)) for name in names]
        return [AccountRow(name, Figures.of(state, at), Figures.by_pool(state, at))
                for name, state in states], at


EXPIRING_SHOWN = 200
"""The soonest expiries the summary lists (`gpu-credits expiring` lists them all)."""

ACCOUNTS_PAGE = 100
"""Accounts per page of the summary."""


def summary(source: AuditSource, params: dict[str, str]) -> dict[str, Any]:
    """The summary page: accounts (those whose name contains `q`, a page of them), credits
    expiring soon, the head, the last verify."""
    figures = summary_figures(source)
    # Letter case, spaces and Unicode form set aside on both sides: `café` typed in a
    # browser (composed) finds an account a file brought in decomposed, which looks the same.
    wanted = loose(params.get("q") or "")
    names = [n for n in figures.names if wanted in loose(n)] if wanted else figures.names
    accounts = pager("page", params.get("page"), len(names), ACCOUNTS_PAGE, latest=False)
    shown = names[accounts.first:accounts.first + ACCOUNTS_PAGE]
    expiring = [e for e in figures.expiring if wanted in loose(e[1])] if wanted \
        else figures.expiring
    soonest = figures.soonest if not wanted else soonest_expiring(expiring)
    rows, at = account_rows(source, shown, figures.at)
    return {"accounts": rows, "matching": len(names),
            "total": len(figures.names), "q": (params.get("q") or "").strip(),
            "page": accounts.page, "pages": accounts.pages, "at": at,
            "expiring": soonest,
            "expiring_more": max(0, len(expiring) - EXPIRING_SHOWN),
            "expiring_until": figures.expiring_until,
            # Before any timed event the timeline has no time to count a week from.
            "timed": at != TIMELINE_START,
            "head": head_record(source.journal),
            "verify": last_verify(source.journal, source.verifier)}


# -- one account -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LedgerFilter:
    """The ledger filters of the account page, as given in its query string."""

    from_time: int | None = None
    to_time: int | None = None
    pool: str | None = None
    kind: str | None = None

    def named(self) -> str:
        """The filters in words (`pool h100, kind consume, from T, to T`); empty for none."""
        said = [f"pool {self.pool}" if self.pool else "",
                f"kind {self.kind}" if self.kind else "",
                f"from {format_time(self.from_time)}" if self.from_time is not None else "",
                f"to {format_time(self.to_time)}" if self.to_time is not None else ""]
        return ", ".join(s for s in said if s)

    def keeps(self, line: StatementLine) -> bool:
        """Whether `line` passes every filter."""
        if self.from_time is not None and line.time < self.from_time:
            return False
        if self.to_time is not None and line.time > self.to_time:
            return False
        if self.pool and (line.pool or "") != self.pool:
            return False
        return not self.kind or line.type == self.kind


def ledger_filter(params: dict[str, str]) -> LedgerFilter:
    """The filters from a query string; ValueError for a bad time or kind."""
    kind = (params.get("kind") or "").strip() or None
    if kind is not None and kind not in LINE_KINDS:
        raise ValueError(f"kind: {kind!r} is not a kind of line; expected one of "
                         f"{', '.join(LINE_KINDS)}")
    start = parse_optional_time("from", params.get("from"))
    end = parse_optional_time("to", params.get("to"), end=True)
    if start is not None and end is not None and start > end:
        raise ValueError(f"from {format_time(start)} is after to {format_time(end)}")
    # A pool is named exactly (a file may bring in "h100 " beside "h100"): not stripped.
    return LedgerFilter(start, end, params.get("pool") or None, kind)


@dataclass(slots=True)
class GrantRow:
    """One grant of the account page: its amount is the debt it paid, what it paid for,
    what a job holds, what expired and what remains."""

    grant_id: str
    position: int | None
    time: int
    pool: str
    amount: int
    paid_debt: int  # on arrival, and by its credits a job released
    used: int
    held: int
    expired: int
    remaining: int
    priority: int
    expiry: int | None
    memo: str | None = None
    refill: bool = False  # the account's refill bucket, which no grant event makes


@dataclass(slots=True)
class AccountPage:
    """Everything the account page shows, as known at `position`."""

    account: str
    position: int
    head: int
    at: int
    explanation: AccountExplanation
    statement: Statement
    lines: list[StatementLine]
    grants: list[GrantRow]
    pools: list[str]
    revisions: list[RevisionRow] | None  # of this account's events; None: still being found
    later_revisions: list[RevisionRow]  # recorded after `position`: not in this view
    recorded_later: int  # events of the account recorded after `position`
    revised_ids: set[str] = field(default_factory=set)  # events some revision changed
    matching: int = 0  # ledger lines that pass the filters (`lines` is one page of them)
    first_line: int = 0  # the index of `lines[0]` among those
    ledger_page: int = 1
    ledger_pages: int = 1
    grants_pager: Pager = field(default_factory=lambda: Pager())
    revisions_pager: Pager = field(default_factory=lambda: Pager())
    """The page of `grants` and of `revisions` shown (they hold that page only)."""
    filters: LedgerFilter = field(default_factory=lambda: LedgerFilter())
    """The ledger's filters, named beside its lines (the form is not printed)."""
    whole: bool = False  # every line that passes the filters on this one page (page=all)
    offers_whole: bool = False  # paged, and few enough lines for page=all


@dataclass(frozen=True, slots=True)
class Pager:
    """Which page of a table is shown: rows `first` to `first + size` of `total`."""

    page: int = 1
    pages: int = 1
    first: int = 0
    total: int = 0


def pager(name: str, raw: str | None, total: int | None, size: int, *,
          latest: bool = True) -> Pager:
    """The page a query parameter `name` asks for (default: the last, the latest rows;
    the first unless `latest`). `total` None: the rows are not known yet (the revisions,
    while the journal is replayed in the background): any page is taken, and none shown."""
    if total is None:
        parse_int(name, raw, 1, low=1)
        return Pager()
    pages_ = max(1, -(-total // size))
    page = parse_int(name, raw, pages_ if latest else 1, low=1, high=pages_)
    return Pager(page, pages_, (page - 1) * size, total)


def require_account(source: AuditSource, account: str) -> None:
    """UnknownAccount, naming the known ones, unless the journal has events of `account`."""
    if source.journal.stream_version(account) == 0:
        with source.reading() as ledger:
            raise unknown_account(account, ledger)


def account_revisions(source: AuditSource, account: str) -> list[RevisionRow] | None:
    """Revisions that changed an outcome of one of the account's events (the account
    the whole fold gives the event, `owners.event_account`, wherever it was filed: a
    job's step may lie in `job:<id>` or in another submitter's stream); None while the
    revisions of a large journal are still being found."""
    revisions = source.revisions()
    if revisions is None:
        return None

    def find() -> list[RevisionRow]:
        # Asked once: each ask looks at the journal's head (a round trip), and a page of
        # a service that has run a while lists thousands of revisions.
        accounts = revised_accounts()
        return revision_rows(source.journal, [r for r in revisions
                                              if accounts[r.event_id] == account])

    def revised_accounts() -> dict[str, str | None]:
        # From the fold that found the revisions, not the live projection: on a replica
        # that has not yet read another writer's latest events, a job's step whose
        # submit is among them would belong to no account, and its revision would be
        # left out of a page that claims the head.
        return source.cached(("revised-accounts", len(revisions)),
                             source.revision_log.accounts)

    # Remembered by how many revisions they were made from, not only until the head
    # moves: the head may have moved since these were found (revisions only grow).
    return source.cached(("account-revisions", account, len(revisions)), find)


def account_stream_events(source: AuditSource, account: str,
                   position: int | None = None) -> list[RecordedEvent]:
    """The events of the account's stream recorded up to `position` (None: the head), in
    position order, with those of the `job:<id>` streams of the jobs it submits (a job's
    steps recorded before its submit): the events `owners.account_events` reads for a
    statement, through the streams the source keeps."""
    events = source.stream_events(account, position)

    def job_streams() -> list[str]:
        names = [job_stream(job) for job in sorted(submitted_jobs(source.stream_events(account)))]
        journal = source.journal
        # One query says whether any of them exists (rarely: an import that named a job
        # before its submit); only then is each asked.
        if not names or journal.max_time(names) is None:
            return []
        return [name for name in names if journal.stream_version(name)]

    streams = source.cached(("job-streams", account), job_streams)
    if not streams:
        return events
    return list(heapq.merge(events, *(source.stream_events(s, position) for s in streams),
                            key=lambda rec: rec.position))


ProjectedJobs = dict[str, tuple[str, int | None]]
"""Job id -> (state, charge), as the whole journal's projection holds the job."""


def _projected_jobs(source: AuditSource, account: str, events: list[RecordedEvent],
                    position: int) -> ProjectedJobs | None:
    """The jobs the account's events submit, as the whole journal's projection holds them
    as known at `position` (`own_jobs`; at the head, asked of the source's whole fold, the
    service's live projection, without a fold of its own); NOT_HELD for one no account
    holds (its submits reversed); None when one of those ids is another account's job (a
    reused id: this submit is an anomaly of the whole fold), or when another account's
    stream holds a submit of one of them the fold does not count, where events of the
    job may be filed (`owners.submitted_elsewhere`)."""
    submitted = submitted_jobs(events)
    if not submitted:
        return {}
    if position != source.head():
        return own_jobs(source.journal, account, events, position)
    with source.reading() as ledger:
        jobs = ledger.jobs
        found: ProjectedJobs = {}
        for job_id in submitted:
            job = jobs.get(job_id)
            if job is None:
                found[job_id] = NOT_HELD
            elif job.account != account:
                return None
            else:
                found[job_id] = (job.state, job.charge)
        if submitted_elsewhere(source.journal, ledger, account, submitted):
            return None
        return found


_EVENTS_A_STATE_NEEDS = {RUNNING: ("start",), SUCCEEDED: ("start", "complete"),
                         FAILED: ("start", "complete"), CANCELLED: ("cancel",)}
"""The events of a job that must have taken effect for it to be in each state."""


def _job_events_elsewhere(events: list[RecordedEvent], jobs: ProjectedJobs) -> bool:
    """Whether one of these jobs is in a state its events among `events` cannot have put
    it in: a start, completion or cancellation of it was recorded in another stream (an
    import files a job's events under the account the projection gave the job then, and
    a late submit of the same id elsewhere can make the job another account's)."""
    recorded = {(rec.payload.get("job"), rec.type) for rec in events
                if rec.type in ("start", "complete", "cancel")}
    return any((job, kind) not in recorded for job, (state, _) in jobs.items()
               for kind in _EVENTS_A_STATE_NEEDS.get(state, ()))


def _stream_tells_jobs(source: AuditSource, account: str, events: list[RecordedEvent],
                       position: int) -> bool:
    """Whether the account's own events tell its jobs as the whole journal does, as far
    as can be seen without folding them: every job they submit is the account's, and
    each one's events that took effect are among them; one no account holds is submitted
    there only by events the stream itself reverses (so its fold holds none either)."""
    jobs = _projected_jobs(source, account, events, position)
    return jobs is not None and not _job_events_elsewhere(events, jobs) and (
        NOT_HELD not in jobs.values() or _submits_reversed(events, jobs))


def _submits_reversed(events: list[RecordedEvent], jobs: ProjectedJobs) -> bool:
    """Whether every submit among `events` of a job NOT_HELD is reversed by them."""
    reversed_here = own_reversed(events)
    return all(rec.id in reversed_here for rec in events
               if rec.type == "submit" and isinstance(job := rec.payload.get("job"), str)
               and jobs.get(job) == NOT_HELD)


def stream_tells_jobs(source: AuditSource, stream: str,
                      events: list[RecordedEvent]) -> bool:
    """Whether `stream`'s events (all of them, to the head) tell its jobs as the whole
    journal does: remembered until the head moves, as every event page of the stream asks."""
    return source.cached(("stream-tells-jobs", stream),
                         lambda: _stream_tells_jobs(source, stream, events, source.head()))


def account_history(source: AuditSource, account: str, position: int) -> AccountHistory:
    """The account's statement, lineage and timeline as known at `position`, from one fold
    of its stream (remembered until the head moves); UnknownAccount for an account the
    journal never names."""

    def whole() -> AccountHistory:
        everything = source.journal.read(to_position=position, order="position")
        return history_of(everything, account, at=latest_time(source.journal),
                          as_known_at=position, private=source.journal.private)

    def build() -> AccountHistory:
        events = account_stream_events(source, account, position)
        jobs = _projected_jobs(source, account, events, position)
        if jobs is None or _job_events_elsewhere(events, jobs):
            # One of its submits reuses a job id another account holds, or an event of
            # one of its jobs is in another stream: only the whole fold sees them (as
            # `statement` and `explain` fold).
            return whole()
        # The fold kept from the account's last page goes on with what the stream gained
        # since, when nothing of it came late (else it is folded anew).
        kept = source.take_fold(account)
        fold, found = extended_history(kept, events, account,
                                       at=latest_time(source.journal), as_known_at=position,
                                       private=source.journal.private)
        if not found.seen and not exists_later(source.journal, account):
            # Nothing of it as known then, and nothing later makes it an account (a
            # stream of orphan job events, `job:ID`, is none): unknown, as to `statement`.
            # No fold of it is kept: an event page takes a kept fold for its account's.
            if kept is not None:
                source.keep_fold(account, kept)
            with source.reading() as ledger:
                raise unknown_account(account, ledger)
        source.keep_fold(account, fold)
        if kept is not None and kept is not fold:  # a view as known earlier: keep both,
            source.keep_fold(account, kept)  # the one that went further stays
        if jobs and jobs_differ(fold.walk.ledger, jobs):
            # Its fold leaves a job otherwise than the whole journal does: as `statement`
            # checks after folding the stream, the whole fold tells.
            return whole()
        # An account recorded only after `position` has an empty history: as known
        # then, an account with nothing yet.
        return found

    return source.cached(("history", account, position), build)


LEDGER_PAGE = 200
"""Ledger lines per page of the account page (the CSV download has them all)."""

ALL_LINES = 10_000
"""Most ledger lines `page=all` shows on one page, to print a whole statement; more is a
422 that points at the CSV download, which holds them all."""

GRANTS_PAGE = 100
"""Grants per page of the account page."""

REVISIONS_PAGE = 100
"""Revisions per page of the account page."""


def account_page(source: AuditSource, account: str, params: dict[str, str], *,
                 paged: bool = True) -> AccountPage:
    """The account page; UnknownAccount for an account the journal never names,
    ValueError for a bad filter. The ledger shows `LEDGER_PAGE` lines a page, the latest
    by default (`page`); `paged=False`: every line that passes the filters."""
    journal = source.journal
    require_account(source, account)
    position = parse_known_at(journal, params.get("as_known_at"))
    filters = ledger_filter(params)
    history = account_history(source, account, position)
    stmt, expl = history.statement, history.explanation
    known = account_stream_events(source, account, position)
    by_id = {rec.id: rec for rec in known}
    # A page of the grants: each row looks up its grant's memo, so only the page's rows.
    grants_pager = pager("grants_page", params.get("grants_page"), len(expl.grants),
                         GRANTS_PAGE)
    grants = []
    for g in expl.grants[grants_pager.first:grants_pager.first + GRANTS_PAGE]:
        rec = by_id.get(g.grant_id) if g.position is not None else None
        memo = personal_of(journal, rec).get("memo") if rec is not None else None
        grants.append(GrantRow(g.grant_id, g.position, g.time, g.pool, g.amount,
                               g.debt_paid, g.used,
                               sum(a for _, a in g.held), g.expired, g.remaining,
                               g.priority, g.expiry,
                               memo if isinstance(memo, str) else None, g.refill))
    pools = sorted({line.pool for line in stmt.lines if line.pool} | set(expl.figures.pools))
    revisions = account_revisions(source, account)
    later = [r for r in revisions or () if r.revision.late_position > position]
    head = journal.head()
    recorded_later = 0
    if position < head:
        recorded_later = len(account_stream_events(source, account)) - len(known)
    revisions_pager = pager("revisions_page", params.get("revisions_page"),
                            None if revisions is None else len(revisions), REVISIONS_PAGE)
    kept = [line for line in stmt.lines if filters.keeps(line)]
    # `page=all`: the whole ledger on one page, for a statement printed whole (a page of
    # it prints that page); bounded, as a page must render.
    whole = paged and params.get("page") == "all"
    if whole and len(kept) > ALL_LINES:
        raise ValueError(f"page: all shows at most {ALL_LINES:,} lines and {len(kept):,} "
                         f"match: narrow them with from and to, or download them all "
                         f"(ledger.csv)")
    paged = paged and not whole
    ledger_pager = pager("page", None if whole else params.get("page"), len(kept),
                         LEDGER_PAGE)
    first = ledger_pager.first
    return AccountPage(account, position, head, stmt.to_time, expl, stmt,
                       kept[first:first + LEDGER_PAGE] if paged else kept, grants, pools,
                       None if revisions is None else revisions[
                           revisions_pager.first:revisions_pager.first + REVISIONS_PAGE],
                       later, recorded_later,
                       {r.revision.event_id for r in revisions or ()},
                       len(kept), first if paged else 0,
                       ledger_pager.page if paged else 1, ledger_pager.pages if paged else 1,
                       grants_pager, revisions_pager, filters, whole,
                       paged and ledger_pager.pages > 1 and len(kept) <= ALL_LINES)


CSV_COLUMNS = ("time", "position", "event_id", "type", "pool", "job", "change", "balance",
               "reserved", "status", "detail")


def ledger_csv(page: AccountPage) -> str:
    """The page's ledger lines (filters applied) as CSV, times in ISO-8601 UTC."""
    out = io.StringIO()
    writer = csvcells.writer(out)
    writer.writerow(CSV_COLUMNS)
    for line in page.lines:
        writer.writerow([format_time(line.time), line.position or "", line.event_id or "",
                         line.type, line.pool or "", line.job or "", line.change,
                         line.balance, line.reserved, line.status,
                         wording.line_detail(line.effect, line.memo)])
    return out.getvalue()


def timeline_json(source: AuditSource, account: str, position: int) -> dict[str, Any]:
    """The chart's data: the account's figures over time and each grant's burn-down."""

    require_account(source, account)

    def build() -> dict[str, Any]:
        history = account_history(source, account, position)
        until = history.statement.to_time
        points = history.timeline
        pools = sorted({p for point in points for p in point.pools} or {GENERAL})
        grants = []
        for g in history.explanation.grants:
            if g.position is None:
                continue
            # A void ends its unused credits as an expiry would.
            ends = min((t for t in (g.expiry, g.voided_at) if t is not None), default=None)
            # Credits a job released back to the grant that paid debt are gone from it
            # as a use's are, when the release paid.
            spent = [(u.time, u.amount) for u in (*g.uses, *g.released_to_debt)]
            steps = grant_burndown(g.amount - g.paid_debt, g.time, spent, ends, until=until)
            grants.append({"grant": g.grant_id, "pool": g.pool, "amount": g.amount,
                           "steps": [[s.time, s.remaining] for s in steps]})
        # An event without time (an `account` line) is at the start of the timeline:
        # null, as every JSON answer gives it, never its internal placeholder.
        return {"account": account, "as_known_at": position, "to": json_time(until),
                "pools": pools,
                "points": [{**wording.to_dict(p), "time": json_time(p.time)} for p in points],
                "grants": grants}

    return source.cached(("timeline", account, position), build)


FIGURES_CELLS = 12_000
"""Most cells of a chart's figures listed in the account page (some 500 KiB of HTML):
listed in the page, the figures of an account of 10,000 events made it 4 MB. Past this
the page says how many times there are, and the script lists them from the chart's JSON
as it draws the chart."""


@dataclass(frozen=True, slots=True)
class FiguresTable:
    """A chart's figures as a table: a time column, then one column per line drawn;
    `rows` are (time, the value of each line, None where the line is not drawn)."""

    names: list[str]
    rows: list[tuple[int, list[int | None]]]

    def listed(self) -> bool:
        """Whether the page lists them (few enough cells: `FIGURES_CELLS`)."""
        return len(self.rows) * (len(self.names) + 1) <= FIGURES_CELLS


def chart_tables(data: dict[str, Any]) -> tuple[FiguresTable, FiguresTable]:
    """The balance chart's and the burn-down's figures, from the chart's JSON
    (`timeline_json`): the numbers `static/web.js` draws, line for line, so a reader
    without the script, or without sight of the picture, reads the same figures."""
    pools: list[str] = data["pools"]
    timeline = FiguresTable(
        [f"balance {pool}" for pool in pools] + ["available (all)", "held", "debt"],
        [(p["time"], [p["pools"].get(pool, 0) for pool in pools]
          + [p["available"], p["held"], p["debt"]])
         for p in data["points"] if p["time"] is not None])  # the start has no time
    grants = data["grants"]
    times = sorted({step[0] for g in grants for step in g["steps"]})
    columns: list[list[int | None]] = []
    for g in grants:
        steps = g["steps"]
        first = steps[0][0] if steps else None
        last = steps[-1] if steps else None
        column: list[int | None] = []
        k, current = 0, None
        for t in times:
            while k < len(steps) and steps[k][0] <= t:
                current = steps[k][1]
                k += 1
            # Not drawn before it was granted, nor after it ran out for good.
            ended = last is not None and last[1] == 0 and t > last[0]
            column.append(None if first is None or t < first or ended else current)
        columns.append(column)
    burndown = FiguresTable([f"{g['grant']} ({g['pool']})" for g in grants],
                            [(t, [c[i] for c in columns]) for i, t in enumerate(times)])
    return timeline, burndown


# -- jobs, journal, events ---------------------------------------------------------------


def job_page(source: AuditSource, job: str) -> tuple[JobExplanation, dict[str, int]]:
    """A job's explanation and the positions of the grants that paid or held for it;
    UnknownJob when no event names it."""
    journal = source.journal
    with source.reading() as ledger:
        where = job_whereabouts(journal, ledger, job)

    def explain() -> JobExplanation:
        return live_job_explanation(journal, where, source.stream_events)

    explanation = source.cached(("job", job), explain)
    if explanation.waiting is not None and explanation.state == PENDING:
        # Its place in the queue depends on every account's pending jobs: the live ledger.
        with source.reading() as ledger:
            if job in ledger.jobs and ledger.jobs[job].state == PENDING:
                explanation = dataclasses.replace(explanation)
                explanation.waiting, explanation.ahead = waiting_reason(ledger, job)
    positions = {}
    for grant_id, _ in (*explanation.paid_by, *explanation.held_from):
        rec = journal.get(grant_id)
        if rec is not None:
            positions[grant_id] = rec.position
    return explanation, positions


@dataclass(frozen=True, slots=True)
class JournalPage:
    """A page of the journal in arrival order, and where the neighbouring pages start."""

    events: list[RecordedEvent]
    after: int
    limit: int
    head: int
    previous: int | None
    next: int | None
    accounts: frozenset[str] = frozenset()  # the streams of `events` that are accounts


def accounts_among(source: AuditSource, names: set[str]) -> frozenset[str]:
    """Those of `names` the journal names as accounts (their pages answer): a stream of
    a job's steps filed before its submit, `job:<id>`, is none. One look at the
    projection for all of them; the journal is asked only about the others."""
    with source.reading() as ledger:
        known = {name for name in names if name in ledger.accounts}
    return frozenset(known | {name for name in names - known
                              if names_account(source.journal, name)})


def journal_page(source: AuditSource, params: dict[str, str]) -> JournalPage:
    """Events after position `after`, `limit` of them."""
    journal = source.journal
    head = journal.head()
    after = parse_int("after", params.get("after"), 0, high=max(head, 0))
    limit = parse_int("limit", params.get("limit"), JOURNAL_PAGE, low=1, high=MAX_PAGE)
    events = list(journal.read(after_position=after, to_position=after + limit,
                               order="position"))
    previous = max(0, after - limit) if after > 0 else None
    following = after + limit if after + limit < head else None
    accounts = accounts_among(source, {rec.stream for rec in events})
    return JournalPage(events, after, limit, head, previous, following, accounts)


REVISIONS_SHOWN = 100
"""The journal page lists the latest revisions; `GET /v1/revisions` pages through all."""


def recent_revisions(source: AuditSource) -> tuple[list[RevisionRow] | None, int]:
    """The latest `REVISIONS_SHOWN` revisions with the times of both events, and how many
    there are in all (None and 0 while they are still being found)."""
    revisions = source.revisions()
    if revisions is None:
        return None, 0
    rows = source.cached(("recent-revisions", len(revisions)),
                         lambda: revision_rows(source.journal, revisions[-REVISIONS_SHOWN:]))
    return rows, len(revisions)


@dataclass(frozen=True, slots=True)
class EventPage:
    """One recorded event and what it changed."""

    record: RecordedEvent
    account: str | None
    lines: list[StatementLine]  # its lines in the account's statement (change, balance)
    caused: list[RevisionRow] | None  # outcomes of earlier events this late event changed
    revised: list[RevisionRow] | None  # changes to its own outcome by later late events
    # (both None while the revisions of a large journal are still being found)
    late: bool  # recorded after events of its stream with a later event time
    # Its personal fields (user, memo), kept beside the record; {} once erased.
    personal: dict[str, Any] = field(default_factory=dict)
    # Whether `account` is one (has a page): not for a step of a job no account holds,
    # whose `account` is its stream, `job:<id>`.
    is_account: bool = True
    # Whether the account's page answers as known right before it: not before the first
    # event of an account named only by rejected submits (unknown then, as to `statement`).
    known_before: bool = True


def event_page(source: AuditSource, position: int) -> EventPage | None:
    """The event at `position`, None when there is none."""
    journal = source.journal
    rec = head_record(journal, position) if 0 < position <= journal.head() else None
    if rec is None:
        return None
    revisions = source.revisions()
    caused: list[RevisionRow] | None = None
    revised: list[RevisionRow] | None = None
    if revisions is not None:
        rows = revision_rows(journal, [r for r in revisions if r.late_position == rec.position
                                       or r.event_id == rec.id])
        caused = [r for r in rows if r.revision.late_position == rec.position]
        revised = [r for r in rows if r.revision.event_id == rec.id]
    account = _account_of(source, rec)
    if account != rec.stream:
        # A job's step filed under another stream than its account's: its line is in
        # the account's history, which folds the whole journal to place it.
        lines = lines_of(account_history(source, account, journal.head()).statement.lines,
                         rec.position)
    else:
        lines = _own_lines(source, rec)
    # Late for its account: recorded after an event of its stream with a later time.
    earlier = [other for other in account_stream_events(source, account)
               if other.position < rec.position]
    late = any(other.time > rec.time for other in earlier)
    return EventPage(rec, account, lines, caused, revised, late,
                     {k: v for k, v in personal_of(journal, rec).items() if k not in rec.payload},
                     account != rec.stream or bool(accounts_among(source, {account})),
                     any(other.stream == account for other in earlier)
                     or exists_later(journal, account))


def _own_lines(source: AuditSource, rec: RecordedEvent) -> list[StatementLine]:
    """The lines of `rec` in its stream's account's statement."""
    journal = source.journal
    stream = account_stream_events(source, rec.stream)
    known = source.peek(("history", rec.stream, journal.head()))
    if not isinstance(known, AccountHistory) and (
            source.has_fold(rec.stream)
            or not stream_tells_jobs(source, rec.stream, stream)):
        # Its account's fold is kept from an earlier page: extending it to the head costs
        # only what the stream gained since, less than folding up to this event again.
        # Or the stream alone would mislead: one of its submits reuses a job id another
        # account holds, which the stream's own fold takes as accepted (and counts as
        # reserved from there on); the account page's history folds the whole journal.
        known = account_history(source, rec.stream, journal.head())
    if isinstance(known, AccountHistory):  # its account page was just seen: no fold at all
        return lines_of(known.statement.lines, rec.position)
    # Fold the account's events only up to this one.
    lines: list[StatementLine] = source.cached(
        ("event-lines", rec.position),
        lambda: event_lines(stream, rec.stream, rec.position, private=journal.private))
    return lines


def _account_of(source: AuditSource, rec: RecordedEvent) -> str:
    """The account whose figures `rec` changes, as the whole journal gives it
    (`owners.event_account`): its stream's, but for a step of a job (start, completion,
    cancel), or a reversal of one, that the whole journal gives another account. An
    import files a job's step under the account the projection gave the job then (or
    `job:ID` before any submit); a submit of the id placed earlier can make it another's.
    Its stream for an event of no account (a step of a job nobody submitted)."""
    with source.reading() as ledger:
        account = event_account(rec, ledger.jobs, source.journal.get)
    return rec.stream if account is None else account


def event_position(journal: JournalLike, event_id: str) -> int | None:
    """The position of the event recorded under `event_id`."""
    rec = journal.get(event_id)
    return None if rec is None else rec.position

