"""`gpu-credits` commands: reports. Registered on `tools.cli.app` when imported.

`accounts`, `expiring`, `jobs`, `reconcile` and `whatif`: read-only, each with `--json`,
and (except `whatif` and `reconcile`, which compare) `--as-known-at`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from projections import queries
from projections.events import TIMELINE_START
from projections.importing import not_utf8_at
from projections.ledger import JOB_STATES
from projections.policy import Policy
from projections.timefmt import format_time
from projections.validation import MAX_SAFE_INT, loads_strict, require_int
from tools import render, wording
from tools.cli import (
    EXIT_CHECK_FAILED,
    AllowFarTimes,
    AsKnownAtOption,
    CliError,
    DbOption,
    JsonOption,
    _known,
    _time_option,
    app,
    open_journal,
)

AtOption = Annotated[str | None, typer.Option(
    "--at", metavar="T", help="Event time (integer or ISO-8601; default: the latest).")]


@app.command()
def accounts(
    ctx: typer.Context,
    at: AtOption = None,
    as_known_at: AsKnownAtOption = None,
    as_json: JsonOption = False,
    db: DbOption = None,
) -> None:
    """Every account: balance, reserved, available and debt, and its balance per pool."""
    when = _time_option(at, "--at")
    with open_journal(ctx, db) as journal:
        report = queries.accounts(journal, at=when, as_known_at=as_known_at)
    if as_json:
        render.print_json(wording.to_dict(report))
    elif not report.rows and not report.as_known_at:
        render.console().print("no accounts yet: the journal is empty "
                               "(gpu-credits import FILE or gpu-credits demo)")
    elif not report.rows:
        # The journal holds events, none of which opens an account by then.
        render.console().print(f"no accounts at {format_time(report.at)}, as known at "
                               f"position {report.as_known_at}")
    else:
        render.print_table(render.accounts_table(report))


def _duration(value: str) -> int:
    try:
        # At most 2**53 - 1 seconds, as every time is: the window's end is a time.
        return require_int("the duration in seconds", queries.parse_duration(value),
                           1, MAX_SAFE_INT)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--within") from None


@app.command()
def expiring(
    ctx: typer.Context,
    within: Annotated[str, typer.Option(
        "--within", metavar="DURATION",
        help="How far ahead: 3600 (seconds), 3600s, 90m, 24h, 7d, 2w, a spelled-out unit "
             "(12 hours, 7 days) or ISO 8601 (PT12H, P7D).")] = "7d",
    at: AtOption = None,
    as_known_at: AsKnownAtOption = None,
    as_json: JsonOption = False,
    db: DbOption = None,
) -> None:
    """Credits that expire soon, per grant, account and pool.

    Expiries after the latest event time (or --at) up to --within later (default 7 days);
    credits held by jobs are shown apart.
    """
    seconds = _duration(within)
    when = _time_option(at, "--at")
    with open_journal(ctx, db) as journal:
        report = queries.expiring(journal, within=seconds, at=when, as_known_at=as_known_at)
    if as_json:
        render.print_json(wording.to_dict(report))
    elif not report.credits and report.at == TIMELINE_START:
        render.console().print("nothing expires: no event with a time is recorded yet")
    elif not report.credits:
        render.console().print(
            f"nothing expires between {format_time(report.at)} and "
            f"{format_time(report.until)}")
    else:
        for table in render.expiring_tables(report):
            render.print_table(table)


@app.command()
def jobs(
    ctx: typer.Context,
    account: Annotated[str | None, typer.Option("--account", metavar="A",
                                                help="Only this account's jobs.")] = None,
    state: Annotated[str | None, typer.Option(
        "--state", metavar="S", help=f"Only jobs in this state: {', '.join(JOB_STATES)}.")
    ] = None,
    as_known_at: AsKnownAtOption = None,
    as_json: JsonOption = False,
    db: DbOption = None,
) -> None:
    """Jobs in submit order, with their account, state, cost and charge."""
    try:
        queries.check_state(state)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--state") from None
    with open_journal(ctx, db) as journal:
        report = _known(journal, lambda: queries.jobs(journal, account=account, state=state,
                                                      as_known_at=as_known_at))
    if as_json:
        render.print_json(wording.to_dict(report))
    elif not report.rows:
        render.console().print("no jobs match")
    else:
        render.print_table(render.jobs_table(report))


@app.command()
def reconcile(
    ctx: typer.Context,
    file: Annotated[str, typer.Argument(
        metavar="FILE", help="CSV: account, amount, job or id, and optionally time; "
                             "'-' reads stdin.")],
    as_known_at: AsKnownAtOption = None,
    as_csv: Annotated[bool, typer.Option("--csv", help="Print every row as CSV.")] = False,
    as_json: JsonOption = False,
    allow_far_times: AllowFarTimes = False,
    db: DbOption = None,
) -> None:
    """Compare an external charges file with the ledger; exit 1 on any difference.

    Each row is matched, amount differs, missing from the ledger or a duplicate; every
    charge in the ledger that the file lacks (for its accounts and time range) is listed.
    """
    if as_csv and as_json:
        raise typer.BadParameter("choose one of --csv and --json", param_hint="--csv")
    source = "<stdin>" if file == "-" else file
    try:
        data = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
    except OSError as exc:
        raise CliError(f"cannot read {file}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line, column, what = not_utf8_at(exc)
        raise CliError(f"{source} is not UTF-8 text: {what} at line {line}, column {column}; "
                       "expected CSV") from None
    rows = queries.parse_charges(text, source, allow_far_times=allow_far_times)
    with open_journal(ctx, db) as journal:
        result = queries.reconcile(journal, rows, source=source, as_known_at=as_known_at)
    with render.check_answer():
        if as_json:
            render.print_json(wording.to_dict(result))
        elif as_csv:
            render.reconcile_csv(result, render.script_stdout())
        else:
            if not result.ok:
                render.print_table(render.reconcile_table(result))
            render.console().print(render.reconcile_summary(result))
    if not result.ok:
        raise typer.Exit(EXIT_CHECK_FAILED)


@app.command()
def whatif(
    ctx: typer.Context,
    policy_file: Annotated[str, typer.Option(
        "--policy", metavar="FILE",
        help='JSON: {"grant_order": "priority"|"expiry", "refund_fraction": 0..1, '
             '"max_running": {"account": cap}}, every key optional; \'-\' reads stdin.')],
    as_known_at: AsKnownAtOption = None,
    as_json: JsonOption = False,
    db: DbOption = None,
) -> None:
    """Fold the journal under another policy and show what would differ; writes nothing."""
    # `-` is stdin, as for every other input file (`import`, `reconcile`).
    source = "<stdin>" if policy_file == "-" else policy_file
    try:
        data = sys.stdin.buffer.read() if policy_file == "-" else Path(policy_file).read_bytes()
        # A byte-order mark is taken, as in every other input file.
        raw = data.decode("utf-8-sig")
    except OSError as exc:
        raise CliError(f"cannot read {policy_file}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        line, column, what = not_utf8_at(exc)
        raise CliError(f"{source}: not UTF-8: {what} at line {line}, column {column}"
                       ) from None
    try:
        json.loads(raw)  # for where a syntax error is: line and column
    except json.JSONDecodeError as exc:
        raise CliError(f"{source}: not JSON (line {exc.lineno}, column {exc.colno}: "
                       f"{exc.msg})") from None
    except RecursionError:
        pass  # nested too deeply: the strict reader below says so
    try:
        # Read as every input file is: a repeated key is refused, not the last one winning.
        policy = Policy.from_json(loads_strict(raw))
    except ValueError as exc:
        raise CliError(f"{source}: {exc}") from None
    with open_journal(ctx, db) as journal:
        result = queries.whatif(journal, policy, as_known_at=as_known_at)
    for name in result.unknown_accounts:
        render.warn(f"{source} caps account {name!r}, which the journal does not "
                    "hold: is it a typo?")
    if as_json:
        render.print_json(wording.to_dict(result))
        return
    for table in render.whatif_tables(result):
        render.print_table(table)
    if not result.changed:
        render.console().print("nothing differs under this policy")
