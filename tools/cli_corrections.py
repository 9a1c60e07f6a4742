"""`gpu-credits` commands: corrections. Registered on `tools.cli.app` when imported.

`grant` and `consume` record one event without writing JSON Lines; `adjust`, `void` and
`reverse` are the corrections finance makes. Each is one decision of
`projections.corrections.Corrections` (linearizable per account; `--id` makes a retry
append nothing). A time without `--at` is now, never earlier than the journal's latest
event. A refused command appends nothing and exits 2.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Annotated, Any

import typer

from eventstore import ConnectionProblem, MemoryJournal
from projections.corrections import Corrections
from projections.events import GENERAL
from projections.figures import Figures
from projections.outcomes import Outcome
from projections.timefmt import format_time
from projections.validation import MAX_AMOUNT, loose, require_name
from tools import render
from tools.cli import (
    AllowFarTimes,
    DbOption,
    JsonOption,
    NumbersCommand,
    _time_option,
    app,
    database_url,
    int_option,
    open_journal,
    sqlite_path,
)
from tools.wording import credit_word, credits_text

AtOption = Annotated[str | None, typer.Option(
    "--at", metavar="T", show_default=False,
    help="Event time (integer or ISO 8601; default: now, never before the latest event).")]
PoolOption = Annotated[str | None, typer.Option(
    "--pool", metavar="P", show_default=False, help="Pool (default: general credits).")]
MemoOption = Annotated[str | None, typer.Option(
    "--memo", metavar="TEXT", show_default=False,
    help="Free text kept with the event (a PO number, a ticket).")]
IdOption = Annotated[str | None, typer.Option(
    "--id", metavar="ID", show_default=False,
    help="Event id: repeating the command with the same id appends nothing.")]
_Body = Callable[..., None]

_CREDITS = f"a whole number of credits, 1 to {MAX_AMOUNT}"


def _shared_options(
    memo: MemoOption = None,
    event_id: IdOption = None,
    db: DbOption = None,
    as_json: JsonOption = False,
    allow_far_times: AllowFarTimes = False,
) -> None:
    """The options every recording command takes after its own (declared once here)."""


_SHARED = tuple(inspect.signature(_shared_options, eval_str=True).parameters.values())


@dataclass(frozen=True, slots=True)
class Recording:
    """One recording command's shared options: where to write, the event's id and memo,
    and how to answer. `rehearsal`: the command runs on an empty journal in memory and
    says nothing (`_rehearse_on_a_new_file`). `id_chosen`: the command chose `event_id`
    itself (no --id was given)."""

    ctx: typer.Context
    memo: str | None
    event_id: str | None
    db: str | None
    as_json: bool
    allow_far_times: bool = False
    rehearsal: bool = False
    id_chosen: bool = False

    @contextmanager
    def writer(self) -> Iterator[Corrections]:
        """The journal's single-event writer, for the duration of the block."""
        if self.event_id is not None:
            try:  # named as the user gave it, not as the facade's `event_id`
                require_name("an event id", self.event_id)
            except ValueError as exc:
                raise typer.BadParameter(str(exc), param_hint="--id") from None
        if self.rehearsal:
            yield Corrections(MemoryJournal(), allow_far_times=self.allow_far_times)
            return
        with open_journal(self.ctx, self.db, write=True) as journal:
            try:
                yield Corrections(journal, allow_far_times=self.allow_far_times)
            except ConnectionProblem as exc:
                if not self.id_chosen:
                    raise
                # The connection may have been lost with the COMMIT in flight: the error
                # advises a retry under the same id, which the user never saw. Without
                # it, running the command again records the decision a second time.
                raise ConnectionProblem(
                    f"{exc}; this command's event id was {self.event_id}: run it again "
                    f"with --id {self.event_id} (it appends nothing if it was recorded)"
                ) from exc

    def creates_a_file(self) -> bool:
        """Whether the journal is a SQLite file that does not exist yet."""
        path = sqlite_path(database_url(self.ctx, self.db))
        return path is not None and not path.exists()

    def warn(self, text: str) -> None:
        """A warning on stderr (none in a rehearsal)."""
        if not self.rehearsal:
            render.warn(text)

    def say(self, outcome: Outcome, text: str, **fields: Any) -> None:
        """Print what was recorded: `text`, or with --json the event and `fields`."""
        if self.rehearsal:
            return
        if not self.as_json:
            # One line at any width: the id it names is what `void` and `reverse` take,
            # copied from the terminal (which may show it over rows, never split it).
            render.console().print(text, markup=False, soft_wrap=True)
            return
        record: dict[str, Any] = {"id": outcome.event_id, "type": outcome.type,
                                  "time": outcome.time, **fields, "memo": self.memo}
        if outcome.account is not None:
            record.setdefault("account", outcome.account)
        render.print_json(record)


def _recording(*, far_times: bool = True, **settings: Any) -> Callable[[_Body], _Body]:
    """Register `body(rec, ...)` as a command taking its own parameters, then the shared
    options (`--allow-far-times` only where the command takes a time). Its arguments may
    be negative numbers (`NumbersCommand`)."""
    shared = [p for p in _SHARED if far_times or p.name != "allow_far_times"]

    def register(body: _Body) -> _Body:
        own = list(inspect.signature(body, eval_str=True).parameters.values())[1:]

        @functools.wraps(body)
        def command(ctx: typer.Context, **values: Any) -> None:
            options = {p.name: values.pop(p.name) for p in shared}
            chosen = options["event_id"] is None
            if chosen:
                # Chosen here (as the facade would: 128 random bits), not by the facade,
                # so an error that leaves the outcome unknown can name it for the retry.
                options["event_id"] = os.urandom(16).hex()
            rec = Recording(ctx, **options, id_chosen=chosen)
            if rec.creates_a_file():
                _rehearse_on_a_new_file(body, rec, values)
            body(rec, **values)

        ctx = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                annotation=typer.Context)
        params = [ctx, *own, *shared]
        # Typer reads a command's options from its signature and type hints.
        command.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            params, return_annotation=None)
        command.__annotations__ = {p.name: p.annotation for p in params} | {"return": None}
        app.command(name=body.__name__, cls=NumbersCommand, **settings)(command)
        return command

    return register


@_recording()
def grant(
    rec: Recording,
    account: Annotated[str, typer.Argument(metavar="ACCOUNT")],
    amount: Annotated[str, typer.Argument(metavar="AMOUNT", help="Credits (> 0).")],
    expiry: Annotated[str | None, typer.Option(
        "--expiry", metavar="T", show_default=False,
        help="Credits are valid until this time, excluded (default: never expire).")] = None,
    pool: PoolOption = None,
    priority: Annotated[str, typer.Option(
        "--priority", metavar="N", help="0-100: lower numbers are used first.")] = "50",
    at: AtOption = None,
) -> None:
    """Record one grant of AMOUNT credits to ACCOUNT."""
    credits = int_option(amount, "AMOUNT", _CREDITS)
    rank = int_option(priority, "--priority", "a whole number, 0 to 100")
    until = _time_option(expiry, "--expiry")
    with rec.writer() as writer:
        outcome = writer.grant(account, credits, at=_time_option(at, "--at"), expiry=until,
                               pool=pool, priority=rank, memo=rec.memo,
                               event_id=rec.event_id)
    paid = sum(a for _, a in outcome.paid_debt)
    text = (f"recorded grant {outcome.event_id}: {credits_text(credits)} to {account}"
            f"{_in_pool(pool)} at {format_time(outcome.time)}")
    text += f", expires {format_time(until)}" if until is not None else ", no expiry"
    if paid:
        text += f"; {paid:,} paid debt first"
    rec.say(outcome, text, account=account, amount=credits, expiry=until,
            pool=pool or "general", priority=rank, paid_debt=paid)


def _in_pool(pool: str | None) -> str:
    """The pool a confirmation names, when the command was given one."""
    return "" if pool is None else f" in pool {pool}"


def _rehearse_on_a_new_file(body: _Body, rec: Recording, values: dict[str, Any]) -> None:
    """Run the command first on an empty journal in memory, which is what a database file
    that does not exist yet holds: a command refused there (an amount of 0, an unknown
    grant or event id) is refused before the file is created, so a failed command leaves
    no empty database behind. What passes runs again on the file, which decides."""
    body(replace(rec, rehearsal=True), **values)


def _warn_new_account(rec: Recording, account: str, what: str, event_id: str) -> None:
    """Warn that a usage or debit names an account with no event before it."""
    # Recorded, as the tracker records it (the debt is real), but a misspelt name would
    # otherwise open a second account silently.
    rec.warn(f"account {account!r} had no event before this one (no grant, no "
                f"account event): its {what} is its debt; if the name is misspelt, "
                f"gpu-credits reverse {event_id} --reason ... takes it out")


def _pools_before(writer: Corrections, account: str) -> set[str]:
    """The pools `account` lists before the call (`Figures`: every pool it has been seen
    in); none for an account with no event."""
    state = writer.ledger().accounts.get(account)
    return set() if state is None else set(Figures.of(state, state.last_time).pools)


def _warn_new_pool(rec: Recording, account: str, pool: str | None, pools: set[str],
                   outcome: Outcome, what: str) -> None:
    """Warn that a usage or debit made debt in a pool the account was never seen in: a
    misspelt pool (`H100` for `h100`) draws on no credits but the general ones."""
    if not pool or pool == GENERAL or pool in pools or not pools or not outcome.debt_created:
        return
    like = sorted(p for p in pools if loose(p) == loose(pool))
    hint = (f"; {', '.join(like)} {'is' if len(like) == 1 else 'are'} spelled otherwise "
            "only in letter case, spaces or Unicode form") if like else ""
    rec.warn(f"pool {pool!r} had no event of account {account!r} before this one (its "
             f"pools: {', '.join(sorted(pools))}{hint}), and {outcome.debt_created:,} of "
             f"this {what} is debt; if the pool is misspelt, gpu-credits reverse "
             f"{outcome.event_id} --reason ... takes it out")


@_recording()
def consume(
    rec: Recording,
    account: Annotated[str, typer.Argument(metavar="ACCOUNT")],
    amount: Annotated[str, typer.Argument(metavar="AMOUNT", help="Credits used (> 0).")],
    pool: PoolOption = None,
    at: AtOption = None,
    user: Annotated[str | None, typer.Option(
        "--user", metavar="U", show_default=False,
        help="Who used the credits (personal: `gpu-credits erase --user U` erases it).")
    ] = None,
) -> None:
    """Record one usage report; print the account's debt right after it."""
    credits = int_option(amount, "AMOUNT", _CREDITS)
    with rec.writer() as writer:
        unknown = writer.journal.stream_version(account) == 0
        pools = set() if unknown else _pools_before(writer, account)
        outcome = writer.consume(account, credits, at=_time_option(at, "--at"), pool=pool,
                                 memo=rec.memo, event_id=rec.event_id, user=user)
    if unknown:
        _warn_new_account(rec, account, "usage", outcome.event_id)
    _warn_new_pool(rec, account, pool, pools, outcome, "usage")
    debt = outcome.debt_after or 0
    extra = {"user": user} if user is not None else {}
    rec.say(outcome, f"recorded usage {outcome.event_id}: {credits_text(credits)} of {account}"
                     f"{_in_pool(pool)} at {format_time(outcome.time)}; debt after it: "
                     f"{debt:,}",
            account=account, amount=credits, pool=pool or "general", debt=debt, **extra)


@_recording()
def adjust(
    rec: Recording,
    account: Annotated[str, typer.Argument(metavar="ACCOUNT")],
    amount: Annotated[str, typer.Argument(
        metavar="AMOUNT", help="A credit (> 0) or a debit (< 0, e.g. -25).")],
    reason: Annotated[str, typer.Option("--reason", metavar="TEXT",
                                        help="Why: kept with the event (required).")],
    pool: PoolOption = None,
    at: AtOption = None,
) -> None:
    """Record a manual credit (AMOUNT > 0) or debit (AMOUNT < 0) with its reason.

    A credit works like a grant without expiry (it pays debt first); a debit like a usage
    report (past the credits it becomes debt).
    """
    credits = int_option(amount, "AMOUNT", "a whole number of credits other than 0: a "
                         "credit (> 0) or a debit (< 0, e.g. -25)")
    with rec.writer() as writer:
        # A credit opens the account, as a grant does; a debit only owes, as usage does.
        unknown = credits < 0 and writer.journal.stream_version(account) == 0
        pools = set() if unknown or credits > 0 else _pools_before(writer, account)
        outcome = writer.adjust(account, credits, reason, at=_time_option(at, "--at"),
                                pool=pool, memo=rec.memo, event_id=rec.event_id)
    if unknown:
        _warn_new_account(rec, account, "debit", outcome.event_id)
    _warn_new_pool(rec, account, pool, pools, outcome, "debit")
    debt = outcome.debt_after
    kind = "credit" if credits > 0 else "debit"
    text = (f"recorded {kind} {outcome.event_id}: {credits_text(credits, signed=True)} for "
            f"{account} at {format_time(outcome.time)} ({reason})")
    if debt is not None:
        text += f"; debt after it: {debt:,}"
    rec.say(outcome, text, account=account, amount=credits, pool=pool or "general",
            reason=reason, **({} if debt is None else {"debt": debt}))


@_recording()
def void(
    rec: Recording,
    grant_id: Annotated[str, typer.Argument(metavar="GRANT_ID", help="The grant's event id.")],
    at: AtOption = None,
    reason: Annotated[str | None, typer.Option("--reason", metavar="TEXT",
                                               show_default=False, help="Why.")] = None,
) -> None:
    """From T on, the grant's unused credits no longer count; what it paid stays paid.

    Credits of it reserved for a job stay with the job; whatever the job releases (on
    failure or cancellation) lapses then.
    """
    with rec.writer() as writer:
        outcome = writer.void(grant_id, at=_time_option(at, "--at"), reason=reason,
                              memo=rec.memo, event_id=rec.event_id)
        grant = writer.journal.get(grant_id)
    lapsed = sum(e.amount for e in outcome.expired if e.voided)
    what = f"{lapsed:,} unused {credit_word(lapsed)} stop counting"
    if grant is not None and grant.time > outcome.time:
        # The grant comes later on the timeline: it arrives voided, all of it.
        lapsed = int(grant.payload["amount"])
        what = (f"the grant takes effect later, at {format_time(grant.time)}: none of its "
                f"{credits_text(lapsed)} will count")
    rec.say(outcome, f"recorded void {outcome.event_id}: grant {grant_id} from "
                     f"{format_time(outcome.time)}; {what}",
            grant=grant_id, voided=lapsed, reason=reason)


@_recording(far_times=False)
def reverse(
    rec: Recording,
    target: Annotated[str, typer.Argument(metavar="EVENT_ID",
                                          help="The id of the recorded event to reverse.")],
    reason: Annotated[str, typer.Option("--reason", metavar="TEXT",
                                        help="Why: kept with the event (required).")],
) -> None:
    """Take a recorded event out of the timeline, as if it had never happened.

    Both stay in the journal; answers as known before the reversal still show the event.
    Reversing a reversal puts its event back.
    """
    with rec.writer() as writer:
        outcome = writer.reverse(target, reason, memo=rec.memo, event_id=rec.event_id)
    rec.say(outcome, f"recorded reversal {outcome.event_id}: event {target} no longer "
                     f"counts ({reason})", event=target, reason=reason)
