"""`gpu-credits` commands: serve. Registered on `tools.cli.app` when imported."""

from __future__ import annotations

import ipaddress
import logging
import sys
from typing import Annotated

import typer
from sqlalchemy.engine import make_url

from tools.cli import CliError, DbOption, app, database_url

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000


def is_loopback(host: str) -> bool:
    """Whether `host` only ever answers this machine (127.0.0.0/8, ::1, localhost)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _say(message: str) -> None:
    sys.stderr.write(f"gpu-credits: {message}\n")
    sys.stderr.flush()


@app.command()
def serve(
    ctx: typer.Context,
    host: Annotated[str, typer.Option("--host", metavar="H",
                                      help="Address to bind (non-loopback needs tokens).")
    ] = DEFAULT_HOST,
    port: Annotated[int, typer.Option("--port", metavar="P", min=0, max=65535,
                                      help="TCP port.")] = DEFAULT_PORT,
    tokens: Annotated[str | None, typer.Option(
        "--tokens", metavar="FILE",
        help="Bearer tokens, one ROLE:TOKEN per line (roles: worker, finance, auditor); "
             "also read from $GPU_CREDITS_TOKENS.")] = None,
    allow_far_times: Annotated[bool, typer.Option(
        "--allow-far-times", help="Accept event times after 2200-01-01 (else 422).")] = False,
    max_batch: Annotated[int, typer.Option("--max-batch", min=1, max=100_000,
                                           help="Most decisions committed together.")
    ] = 512,
    checkpoint_every: Annotated[int | None, typer.Option(
        "--checkpoint-every", metavar="N", min=0, show_default="100000",
        help="Write a checkpoint once N events (and an eighth of the journal) were "
             "committed after the newest; 0: only at shutdown.")] = None,
    db: DbOption = None,
) -> None:
    """The HTTP service and the web audit view: JSON API under /v1, docs at /docs.

    Without tokens it answers anyone, so it binds only to loopback and refuses any
    other --host. Ctrl-C (SIGINT) or SIGTERM stops it after the batch in flight commits.
    """
    import uvicorn

    from eventstore import Journal
    from tools.service import create_app
    from tools.service.auth import load_tokens
    from tools.service.ledger import CHECKPOINT_EVERY
    from tools.service.onewrite import OneWriteProtocol

    every = CHECKPOINT_EVERY if checkpoint_every is None else (checkpoint_every or None)

    try:
        configured = load_tokens(tokens)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if not configured and not is_loopback(host):
        raise CliError(f"refusing to serve on {host} without tokens: anyone who can reach it "
                       "could write to the ledger; give --tokens FILE (or "
                       "$GPU_CREDITS_TOKENS), or bind to 127.0.0.1")
    url = database_url(ctx, db)
    shown = make_url(url).render_as_string(hide_password=True)
    journal = Journal(url)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    if not configured:
        _say("no tokens configured: serving WITHOUT authentication, on loopback only")
    else:
        roles = sorted({t.role for t in configured})
        # A token listed twice under its role is one token.
        count = len({t.secret for t in configured})
        _say(f"{count} token(s) configured (roles: {', '.join(roles)})")
    where = f"[{host}]" if ":" in host else host
    _say(f"serving {shown} on http://{where}:{port} (API docs at /docs)")
    service_app = create_app(journal, tokens=configured, allow_far_times=allow_far_times,
                             max_batch=max_batch, load_in_background=True,
                             checkpoint_every=every)
    # An answer's head and body in one write (tools/service/onewrite.py).
    uvicorn.run(service_app, host=host, port=port, access_log=False, log_level="warning",
                timeout_graceful_shutdown=30, server_header=False, http=OneWriteProtocol)
