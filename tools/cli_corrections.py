"""`gpu-credits` commands: corrections. Registered on `tools.cli.app` when imported.

`grant` and `consume` record one event without writing JSON Lines; `adjust`, `void` and
`reverse` are the corrections finance makes. Each is one decision of
`projections.corrections.Corrections` (linearizable per account; `--id` makes a retry
append nothing). A time without `--at` is now, never earlier than the journal's latest
event. A refused command appends nothing and exits 2.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from projections.corrections import Corrections
from projections.outcomes import Outcome
from projections.timefmt import format_time
from tools import render
from tools.cli import AllowFarTimes, DbOption, JsonOption, _time_option, app, open_journal

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

# A negative AMOUNT ("-25") must reach the argument instead of being read as an option.
_NEGATIVE_NUMBERS = {"ignore_unknown_options": True}


def _recorded(outcome: Outcome, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"id": outcome.event_id, "type": outcome.type,
                           "time": outcome.time, **extra}
    if outcome.account is not None:
        out.setdefault("account", outcome.account)
    return out


def _say(as_json: bool, record: dict[str, Any], text: str) -> None:
    if as_json:
        render.print_json(record)
    else:
        render.console().print(text, markup=False)


@app.command()
def grant(
    ctx: typer.Context,
    account: Annotated[str, typer.Argument(metavar="ACCOUNT")],
    amount: Annotated[int, typer.Argument(metavar="AMOUNT", help="Credits (> 0).")],
    expiry: Annotated[str | None, typer.Option(
        "--expiry", metavar="T", show_default=False,
        help="Credits are valid until this time, excluded (default: never expire).")] = None,
    pool: PoolOption = None,
    priority: Annotated[int, typer.Option(
        "--priority", metavar="N", help="0-100: lower numbers are used first.")] = 50,
    at: AtOption = None,
    memo: MemoOption = None,
    event_id: IdOption = None,
    db: DbOption = None,
    as_json: JsonOption = False,
    allow_far_times: AllowFarTimes = False,
) -> None:
    """Record one grant of AMOUNT credits to ACCOUNT."""
    when = _time_option(at, "--at")
    until = _time_option(expiry, "--expiry")
    with open_journal(ctx, db, write=True) as journal:
        writer = Corrections(journal, allow_far_times=allow_far_times)
        outcome = writer.grant(account, amount, at=when, expiry=until, pool=pool,
                               priority=priority, memo=memo, event_id=event_id)
    paid = sum(a for _, a in outcome.paid_debt)
    record = _recorded(outcome, account=account, amount=amount, expiry=until,
                       pool=pool or "general", priority=priority, memo=memo, paid_debt=paid)
    text = (f"recorded grant {outcome.event_id}: {amount:,} credits to {account} at "
            f"{format_time(outcome.time)}")
    text += f", expires {format_time(until)}" if until is not None else ", no expiry"
    if paid:
        text += f"; {paid:,} paid debt first"
    _say(as_json, record, text)


@app.command(context_settings=_NEGATIVE_NUMBERS)
def consume(
    ctx: typer.Context,
    account: Annotated[str, typer.Argument(metavar="ACCOUNT")],
    amount: Annotated[int, typer.Argument(metavar="AMOUNT", help="Credits used (> 0).")],
    pool: PoolOption = None,
    at: AtOption = None,
    memo: MemoOption = None,
    user: Annotated[str | None, typer.Option(
        "--user", metavar="U", show_default=False,
        help="Who used the credits (personal: `gpu-credits erase --user U` erases it).")
    ] = None,
    event_id: IdOption = None,
    db: DbOption = None,
    as_json: JsonOption = False,
    allow_far_times: AllowFarTimes = False,
) -> None:
    """Record one usage report; print the account's debt right after it."""
    when = _time_option(at, "--at")
    with open_journal(ctx, db, write=True) as journal:
        writer = Corrections(journal, allow_far_times=allow_far_times)
        outcome = writer.consume(account, amount, at=when, pool=pool, memo=memo,
                                 event_id=event_id, user=user)
    debt = outcome.debt_after or 0
    extra = {"user": user} if user is not None else {}
    record = _recorded(outcome, account=account, amount=amount, pool=pool or "general",
                       memo=memo, debt=debt, **extra)
    _say(as_json, record, f"recorded usage {outcome.event_id}: {amount:,} credits of "
                          f"{account} at {format_time(outcome.time)}; debt after it: {debt:,}")


@app.command(context_settings=_NEGATIVE_NUMBERS)
def adjust(
    ctx: typer.Context,
    account: Annotated[str, typer.Argument(metavar="ACCOUNT")],
    amount: Annotated[int, typer.Argument(
        metavar="AMOUNT", help="A credit (> 0) or a debit (< 0, e.g. -25).")],
    reason: Annotated[str, typer.Option("--reason", metavar="TEXT",
                                        help="Why: kept with the event (required).")],
    pool: PoolOption = None,
    at: AtOption = None,
    memo: MemoOption = None,
    event_id: IdOption = None,
    db: DbOption = None,
    as_json: JsonOption = False,
    allow_far_times: AllowFarTimes = False,
) -> None:
    """Record a manual credit (AMOUNT > 0) or debit (AMOUNT < 0) with its reason.

    A credit works like a grant without expiry (it pays debt first); a debit like a usage
    report (past the credits it becomes debt).
    """
    when = _time_option(at, "--at")
    with open_journal(ctx, db, write=True) as journal:
        writer = Corrections(journal, allow_far_times=allow_far_times)
        outcome = writer.adjust(account, amount, reason, at=when, pool=pool, memo=memo,
                                event_id=event_id)
    debt = outcome.debt_after
    record = _recorded(outcome, account=account, amount=amount, pool=pool or "general",
                       reason=reason, memo=memo)
    if debt is not None:
        record["debt"] = debt
    kind = "credit" if amount > 0 else "debit"
    text = (f"recorded {kind} {outcome.event_id}: {amount:+,} credits for {account} at "
            f"{format_time(outcome.time)} ({reason})")
    if debt is not None:
        text += f"; debt after it: {debt:,}"
    _say(as_json, record, text)


@app.command()
def void(
    ctx: typer.Context,
    grant_id: Annotated[str, typer.Argument(metavar="GRANT_ID", help="The grant's event id.")],
    at: AtOption = None,
    reason: Annotated[str | None, typer.Option("--reason", metavar="TEXT",
                                               show_default=False, help="Why.")] = None,
    memo: MemoOption = None,
    event_id: IdOption = None,
    db: DbOption = None,
    as_json: JsonOption = False,
    allow_far_times: AllowFarTimes = False,
) -> None:
    """From T on, the grant's unused credits no longer count; what it paid stays paid.

    Credits of it reserved for a job stay with the job; whatever the job releases (on
    failure or cancellation) lapses then.
    """
    when = _time_option(at, "--at")
    with open_journal(ctx, db, write=True) as journal:
        writer = Corrections(journal, allow_far_times=allow_far_times)
        outcome = writer.void(grant_id, at=when, reason=reason, memo=memo, event_id=event_id)
    lapsed = sum(e.amount for e in outcome.expired if e.voided)
    record = _recorded(outcome, grant=grant_id, voided=lapsed, reason=reason, memo=memo)
    _say(as_json, record, f"recorded void {outcome.event_id}: grant {grant_id} from "
                          f"{format_time(outcome.time)}; {lapsed:,} unused credits stop "
                          "counting")


@app.command()
def reverse(
    ctx: typer.Context,
    target: Annotated[str, typer.Argument(metavar="EVENT_ID",
                                          help="The id of the recorded event to reverse.")],
    reason: Annotated[str, typer.Option("--reason", metavar="TEXT",
                                        help="Why: kept with the event (required).")],
    memo: MemoOption = None,
    event_id: IdOption = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Take a recorded event out of the timeline, as if it had never happened.

    Both stay in the journal; answers as known before the reversal still show the event.
    Reversing a reversal puts its event back.
    """
    with open_journal(ctx, db, write=True) as journal:
        writer = Corrections(journal)
        outcome = writer.reverse(target, reason, memo=memo, event_id=event_id)
    record = _recorded(outcome, event=target, reason=reason, memo=memo)
    _say(as_json, record, f"recorded reversal {outcome.event_id}: event {target} no longer "
                          f"counts ({reason})")
