"""`gpu-credits` commands: serve. Registered on `tools.cli.app` when imported."""

from __future__ import annotations

import errno
import logging
import socket
import sys
from typing import Annotated

import typer
from sqlalchemy.engine import make_url

from tools.cli import CliError, DbOption, app, database_url, say_upgraded
from tools.loopback import is_loopback

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to `host`:`port` and listening (port 0: any free port), made
    before anything is announced or started: a port in use, an address this machine does
    not have or a port it may not bind is a `CliError` naming host:port and why."""
    name = host.strip("[]")
    where = f"[{name}]:{port}" if ":" in name else f"{name}:{port}"
    try:
        found = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
        # A name (localhost) is bound on its IPv4 address when it has one, as uvicorn
        # binds it; an IPv6 literal on itself.
        family, kind, proto, _, address = min(
            found, key=lambda info: info[0] != socket.AF_INET)
    except socket.gaierror as exc:
        raise CliError(f"cannot listen on {where}: {exc.strerror} (--host takes an IP "
                       "address or a name this machine resolves)") from None
    sock = socket.socket(family, kind, proto)
    try:
        # As uvicorn binds its own: a restart may take the port while connections of
        # the previous process linger in TIME_WAIT.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        hint = {errno.EADDRINUSE: "another process listens there: stop it, or choose "
                                  "another --port, or --port 0 for any free one",
                errno.EACCES: "ports below 1024 need privileges; choose --port 1024 or more",
                errno.EADDRNOTAVAIL: "this machine has no such address; choose a --host "
                                     "it has (default 127.0.0.1)"}.get(exc.errno or 0)
        reason = exc.strerror or str(exc)
        raise CliError(f"cannot listen on {where}: {reason}" + (f" ({hint})" if hint else "")
                       ) from None
    sock.set_inheritable(True)
    return sock


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
    read_only: Annotated[bool, typer.Option(
        "--read-only", help="Open the journal read-only (an auditor's copy, a read-only "
                            "mount): reads and the web view answer, writes get 503.")
    ] = False,
    lock_timeout: Annotated[float, typer.Option(
        "--lock-timeout", metavar="SECONDS", min=0.01, max=3600,
        help="How long a write waits for another writer's lock (an import, a command) "
             "before it is answered 503.")] = 10.0,
    db: DbOption = None,
) -> None:
    """The HTTP service and the web audit view: JSON API under /v1, docs at /docs.

    Without tokens it answers anyone, so it binds only to loopback and refuses any
    other --host. Ctrl-C (SIGINT) or SIGTERM stops it after the batch in flight commits.
    """
    import uvicorn

    from eventstore import Journal, ReadOnlyJournal
    from tools.service import create_app
    from tools.service.auth import exposure, load_tokens
    from tools.service.connections import GuardedProtocol
    from tools.service.ledger import CHECKPOINT_EVERY

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
    # Bound before anything is said or opened: a port in use is one error line and
    # nothing started; `--port 0` is announced as the port it got.
    sock = listening_socket(host, port)
    try:
        journal = Journal(url, read_only=read_only, lock_timeout=lock_timeout)
    except ReadOnlyJournal as exc:
        sock.close()
        if read_only:
            raise
        # "Commands that only read still answer" names none that serves: this one does.
        raise CliError(f"{exc}; serve --read-only answers the reads and the web view "
                       "from it") from None
    except BaseException:
        sock.close()
        raise
    say_upgraded(journal)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    if read_only:
        _say("the journal is open read-only: reads and the web view answer, every write "
             "gets 503")
    if not configured:
        _say("no tokens configured: serving WITHOUT authentication, on loopback only")
    else:
        exposed = exposure(tokens) if tokens is not None else None
        if exposed is not None:
            _say(f"warning: {exposed}")
        roles = sorted({t.role for t in configured})
        # A token listed twice under its role is one token.
        count = len({t.secret for t in configured})
        _say(f"{count} token(s) configured (roles: {', '.join(roles)})")
    bound_host, bound_port = sock.getsockname()[:2]
    where = f"[{bound_host}]" if ":" in bound_host else bound_host
    _say(f"serving {shown} on http://{where}:{bound_port} (API docs at /docs)")
    if journal.head() == 0:
        # A mistyped --db opens a new ledger, which workers would then write to.
        _say(f"the journal at {shown} holds no events yet: a new ledger (if you meant "
             "another, stop this one and give its --db)")
    service_app = create_app(journal, tokens=configured, allow_far_times=allow_far_times,
                             max_batch=max_batch, load_in_background=True,
                             checkpoint_every=every, loopback_hosts_only=not configured,
                             owns_process=True)
    # An answer's head and body in one write (tools/service/onewrite.py), with bounds on
    # what a connection may send and how slowly (tools/service/connections.py).
    config = uvicorn.Config(service_app, host=host, port=bound_port, access_log=False,
                            log_level="warning", timeout_graceful_shutdown=30,
                            server_header=False, http=GuardedProtocol)
    server = uvicorn.Server(config)
    try:
        # As `uvicorn.run` does, on the socket bound above: SIGINT and SIGTERM stop it
        # gracefully (the signal is raised again once stopped, so SIGTERM ends the
        # process by that signal, and Ctrl-C ends here).
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    except SystemExit:
        # uvicorn's own exit when the application does not start (it said why above).
        if server.started:
            raise
    finally:
        sock.close()
    if not server.started:
        raise CliError("the service did not start (the messages above say why)")
