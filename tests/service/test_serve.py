"""`gpu-credits serve` as a real process: where it listens, and a port it cannot have.

The socket is bound before anything is announced or opened: a port in use is one
`gpu-credits: error:` line and exit status 2 with nothing started, and `--port 0` is
announced as the port the kernel gave it.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
from pathlib import Path

from tests.service.server import GPU_CREDITS
from tools.loopback import wait_ready

ROOT = Path(__file__).resolve().parents[2]


def _serve(db: Path, *args: str) -> subprocess.Popen[bytes]:
    # This tree's code, whichever tree the console script was installed from.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("GPU_CREDITS_TOKENS", None)
    return subprocess.Popen([GPU_CREDITS, "--db", f"sqlite:///{db}", "serve", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, env=env)


def test_a_port_in_use_is_one_error_line_and_nothing_started(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = _serve(tmp_path / "ledger.db", "--port", str(port))
        out, err = process.communicate(timeout=60)
    assert process.returncode == 2, err.decode()
    assert out == b""
    assert err.decode().splitlines() == [
        f"gpu-credits: error: cannot listen on 127.0.0.1:{port}: Address already in use "
        "(another process listens there: stop it, or choose another --port, or --port 0 "
        "for any free one)"]
    assert not (tmp_path / "ledger.db").exists()  # no journal opened


def test_port_0_announces_the_port_it_got(tmp_path: Path) -> None:
    process = _serve(tmp_path / "ledger.db", "--port", "0")
    try:
        assert process.stderr is not None
        lines = [process.stderr.readline().decode() for _ in range(2)]
        announced = re.fullmatch(r"gpu-credits: serving sqlite:///\S+ on "
                                 r"http://127\.0\.0\.1:(\d+) \(API docs at /docs\)\n", lines[1])
        assert announced is not None, lines
        port = int(announced[1])
        assert port != 0
        wait_ready(port, process, timeout=60)
    finally:
        process.send_signal(signal.SIGINT)  # a graceful stop: exit status 0
        _, rest = process.communicate(timeout=60)
    assert process.returncode == 0, rest.decode()
    assert "stopped: 0 decisions committed" in rest.decode()


def test_an_empty_journal_is_said_at_start_up_and_one_with_events_is_not(
        tmp_path: Path) -> None:
    """A mistyped --db is a new, empty ledger that workers would then write to: serve
    says that what it serves holds nothing yet, where the operator reads its start-up."""
    for events in (False, True):
        db = tmp_path / f"ledger-{events}.db"
        if events:
            from eventstore import Journal, NewEvent

            with Journal(f"sqlite:///{db}") as journal:
                journal.append([NewEvent("open", "a", "account", 0, {"account": "a"})])
        process = _serve(db, "--port", "0")
        try:
            assert process.stderr is not None
            lines = [process.stderr.readline().decode() for _ in range(2)]
            port = int(re.findall(r":(\d+) \(API docs", lines[1])[0])
            wait_ready(port, process, timeout=60)
        finally:
            process.send_signal(signal.SIGINT)
            _, rest = process.communicate(timeout=60)
        said = "".join(lines) + rest.decode()
        empty = (f"gpu-credits: the journal at sqlite:///{db} holds no events yet: a new "
                 "ledger (if you meant another, stop this one and give its --db)\n")
        assert (empty in said) is not events, said


def test_serve_help_shows_the_checkpoint_interval_the_service_uses() -> None:
    # The default is shown as written in the option (the service's module is imported only
    # once serve runs, to keep every other command's start-up light): it must stay the
    # service's own.
    import typer.main

    from tools.cli import app
    from tools.service.ledger import CHECKPOINT_EVERY

    serve = typer.main.get_command(app).commands["serve"]  # type: ignore[attr-defined]
    option = next(p for p in serve.params if p.name == "checkpoint_every")
    assert option.show_default == str(CHECKPOINT_EVERY)
