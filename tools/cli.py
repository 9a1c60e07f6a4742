"""`gpu-credits`: the command line. Thin: parse, call `projections`, render with Rich.

Database: `--db URL` before or after the command name, else $GPU_CREDITS_DB, else
`sqlite:///gpu-credits.db` in the current folder. Exit status: 0 success, 1 a check
failed (`verify`), 2 bad input. Every error is one line on stderr:
`gpu-credits: error: ...`; set GPU_CREDITS_DEBUG=1 to see the traceback of a crash.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import shutil
import stat
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from itertools import islice
from pathlib import Path
from typing import IO, Annotated, Any, Protocol, TextIO, cast

import typer
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from typer.core import TyperCommand, TyperGroup

from eventstore import ChainBroken, Journal, JournalError, JournalLike, MemoryJournal, upgrade
from projections import anchors, importing, owners, queries
from projections import demo as demo_mod
from projections.errors import LedgerError
from projections.queries.common import names_account
from projections.replay import replay as replay_journal
from projections.replay import verify as verify_journal
from projections.timefmt import format_time, iso, parse_end_time, parse_time, spelled_date
from projections.validation import require_time
from projections.verifications import Verification, record_verification
from tools import render, wording

# Typer (from 0.29 on) carries its own copy of click and makes public only BadParameter,
# Abort and Exit; the error classes behind them are reached through BadParameter's own
# bases, which exist under every Typer this project accepts, instead of a private module.
UsageError: type[Exception] = typer.BadParameter.__mro__[1]
ClickException: type[Exception] = typer.BadParameter.__mro__[2]
assert UsageError.__name__ == "UsageError" and ClickException.__name__ == "ClickException"


class _ClickError(Protocol):
    """What the CLI reads of click's errors."""

    exit_code: int
    ctx: typer.Context | None

    def format_message(self) -> str: ...

PROG = "gpu-credits"
ENV_DB = "GPU_CREDITS_DB"
DEFAULT_DB = "sqlite:///gpu-credits.db"
EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2

# Errors a user can act on: exit 2 with their message.
USER_ERRORS = (LedgerError, JournalError, ValueError, KeyError, OSError, SQLAlchemyError)


class CliError(Exception):
    """An error to show as one line, with an exit status."""

    def __init__(self, message: str, code: int = EXIT_BAD_INPUT) -> None:
        super().__init__(message)
        self.code = code


def _say_error(message: str) -> None:
    one_line = render.redact(render.one_line(str(message)))
    sys.stderr.write(f"{PROG}: error: {one_line}\n")
    sys.stderr.flush()


def _usage_hint(exc: _ClickError, group: object, args: Sequence[str] | None) -> str:
    if exc.ctx is None:
        # Click's parser names no command for an option given without its value (`balance
        # a --at`): the command is the one the words name, as click would have run it.
        path = " ".join([PROG, *_command_words(group, args)])
    else:
        path = " ".join([PROG, *exc.ctx.command_path.split()[1:]])
    return f"(see '{path} --help')"


def _command_words(group: object, args: Sequence[str] | None) -> list[str]:
    """The command and subcommand names among `args` (`db upgrade`), in order: `group`
    and each command found has its subcommands in `commands` when it has any."""
    words: list[str] = []
    command = group
    for word in list(sys.argv[1:] if args is None else args):
        found = getattr(command, "commands", {}).get(word)
        if found is not None:
            words.append(word)
            command = found
    return words


def _dash_word_hint(exc: Exception, args: Sequence[str] | None) -> str:
    """For an unknown short option in a command that takes arguments, the word typed and
    how to write it as an argument: click reads `-acme` as the options -a -c -m -e and
    names only `-a`, though an account, job or id may start with `-`."""
    option = getattr(exc, "option_name", None)
    ctx = cast(_ClickError, exc).ctx
    if (type(exc).__name__ != "NoSuchOption" or not isinstance(option, str) or ctx is None
            or option.startswith("--")
            or not any(getattr(p, "param_type_name", "") == "argument"
                       for p in ctx.command.params)):
        return ""
    words = list(sys.argv[1:] if args is None else args)
    word = next((w for w in words if w.startswith(option) and not w.startswith("--")), option)
    path = " ".join([PROG, *ctx.command_path.split()[1:]])
    typed = f" (in {word!r})" if word != option else ""
    return (f"{typed}; an argument that starts with - follows --: "
            f"'{path} [OPTIONS] -- {word} ...'")


def _is_help(exc: Exception) -> bool:
    """Whether a usage error is click's "no arguments, so here is the help" (a group called
    without a command), which is an answer, not an error. Named, as the class is not public."""
    return type(exc).__name__ == "NoArgsIsHelpError"


def _help_reader_gone(exc: SystemExit) -> bool:
    """Whether `exc` is Rich's answer to stdout's reader gone, from the console Typer
    prints a help with (`gpu-credits --help | head -1`): Rich points stdout at /dev/null
    and exits 1, where every other answer cut short by its reader exits 0 (`invoke`)."""
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and frames[-1].name == "on_broken_pipe" \
        and "rich" in Path(frames[-1].filename).parts


class _Group(TyperGroup):
    """The root command: turns every error into one line on stderr and an exit status."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             windows_expand_args: bool = True, **extra: Any) -> Any:
        render.tolerant_streams()
        try:
            code = self._run(args, prog_name or PROG, complete_var, windows_expand_args,
                             extra)
        except SystemExit as exc:
            if not _help_reader_gone(exc):
                raise
            code = 0  # the help's reader went away: answered as any other answer's
        if standalone_mode:
            sys.exit(code)
        return code

    def invoke(self, ctx: Any) -> Any:
        try:
            result = super().invoke(ctx)
            # A short answer still sits in stdout's buffer: flushed here, a reader gone
            # is answered below, not by the interpreter's last flush (exit 120).
            sys.stdout.flush()
            return result
        except BrokenPipeError:
            # The reader went away (`| head`): it has what it wanted; nothing to report.
            render.silence_stdout()
            raise typer.Exit(0) from None

    def _run(self, args: Sequence[str] | None, prog_name: str, complete_var: str | None,
             windows_expand_args: bool, extra: dict[str, Any]) -> int:
        try:
            result = super().main(args, prog_name, complete_var, standalone_mode=False,
                                  windows_expand_args=windows_expand_args, **extra)
        except UsageError as exc:
            usage = cast(_ClickError, exc)
            if _is_help(exc):  # a group called without a command: its help, exit 0
                sys.stdout.write(usage.format_message() + "\n")
                return 0
            message = usage.format_message().rstrip('.') + _dash_word_hint(exc, args)
            _say_error(f"{message} {_usage_hint(usage, self, args)}")
            return EXIT_BAD_INPUT
        except ClickException as exc:
            error = cast(_ClickError, exc)
            _say_error(error.format_message())
            return int(error.exit_code)
        except typer.Abort:
            _say_error("aborted")
            return EXIT_CHECK_FAILED
        except CliError as exc:
            _say_error(str(exc))
            return exc.code
        except importing.ImportRejected as exc:
            for problem in exc.problems:
                sys.stderr.write(render.shown(problem.render(exc.source)) + "\n")
            _say_error(f"{exc.bad_lines} invalid line(s) in {exc.source}; nothing appended")
            return EXIT_BAD_INPUT
        except ChainBroken as exc:
            _say_error(f"{exc}; nothing was answered (gpu-credits verify reports the "
                       "journal's state)")
            return EXIT_CHECK_FAILED
        except USER_ERRORS as exc:
            _say_error(str(exc) or type(exc).__name__)
            return EXIT_BAD_INPUT
        except Exception as exc:  # a bug: still one line, the traceback on request
            if os.environ.get("GPU_CREDITS_DEBUG"):
                traceback.print_exc()
            _say_error(f"internal error: {type(exc).__name__}: {exc} "
                       "(set GPU_CREDITS_DEBUG=1 for the traceback)")
            return EXIT_CHECK_FAILED
        return result if isinstance(result, int) else 0


app = typer.Typer(
    cls=_Group,
    name=PROG,
    help="An event-sourced ledger for expiring GPU credits and the jobs that spend them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
db_app = typer.Typer(help="Database administration.", no_args_is_help=True)
app.add_typer(db_app, name="db")

DbOption = Annotated[
    str | None,
    typer.Option("--db", metavar="URL", show_default=False,
                 help=f"Database URL (default: ${ENV_DB}, else {DEFAULT_DB})."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
AllowFarTimes = Annotated[bool, typer.Option(
    "--allow-far-times",
    help="Accept event times after 2200-01-01 (refused by default as probably milliseconds).")]
AsKnownAtOption = Annotated[str | None, typer.Option(
    "--as-known-at", metavar="R",
    help="Only events recorded up to position R (or an ISO-8601 recorded-at time).")]


# -- the database ---------------------------------------------------------------------------


def database_url(ctx: typer.Context, db: str | None) -> str:
    """The URL to use: this command's --db, the app's --db, $GPU_CREDITS_DB, the default.

    A --db given empty is refused (`--db "$LEDGER"` with the variable unset), never read as
    no --db, which would fall back to another database. An empty $GPU_CREDITS_DB is unset.
    """
    if db is not None:
        return _given_db(db)
    if isinstance(ctx.obj, str):
        return ctx.obj
    return os.environ.get(ENV_DB) or DEFAULT_DB


def _given_db(db: str) -> str:
    if not db.strip():
        raise typer.BadParameter("the database URL is empty; give one such as "
                                 "sqlite:///path.db or postgresql+psycopg://user@host/dbname",
                                 param_hint="--db")
    return db


def sqlite_path(url: str) -> Path | None:
    """The file a `sqlite:` URL names, None for any other URL or an in-memory database."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return None
    database = parsed.database
    if not parsed.drivername.startswith("sqlite") or not database or database == ":memory:":
        return None
    return Path(str(database))


def in_memory(url: str) -> bool:
    """Whether `url` is an in-memory SQLite database (`sqlite://`, `sqlite:///:memory:`)."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return False
    return parsed.drivername.startswith("sqlite") and parsed.database in (None, "", ":memory:")


def refuse_in_memory(url: str) -> None:
    """CliError for an in-memory database where a command would write: it ends with the
    command, and the command would report as recorded what nobody can read again."""
    if in_memory(url):
        raise CliError(f"{render.redact(url)} is an in-memory database: it ends with this "
                       "command, so nothing written to it would be kept; give a file, "
                       "sqlite:///path.db")


@contextmanager
def open_journal(ctx: typer.Context, db: str | None, *, write: bool = False,
                 create: bool | None = None, check_chain: bool = True,
                 full_check: bool = False, keeps: bool = True,
                 mark: bool = True) -> Iterator[JournalLike]:
    """The journal at the chosen URL.

    Only a command that appends creates or upgrades a database (`create` defaults to
    `write`): a read never does, so a mistyped path is an error (exit 2), never an empty
    journal that "verifies"; a read opens it read-only. A command first checks the hash
    chain (`check_chain=False` for `verify`, which reports breaks itself): it never
    answers from, nor appends to, an altered journal (exit 1). The check covers the
    events after the journal's last verified point (`anchors.check_chain`: a mark or a
    checkpoint); with `full_check`, every event (for commands that read them all
    anyway). A command that writes records a new mark at the head when it succeeds
    (`mark=False`: the command sees to that itself).
    `keeps=False`: what the command writes is only there to be shown (`demo`), so an
    in-memory database is fine; any other command that writes refuses one.
    """
    url = database_url(ctx, db)
    path = sqlite_path(url)
    create = write if create is None else create
    if write and keeps:
        refuse_in_memory(url)
    if not create and path is not None and not path.exists():
        raise CliError(f"no database file {path} (from {render.redact(url)}); a command "
                       "that only reads never creates one: check --db or $GPU_CREDITS_DB, "
                       "or create it with gpu-credits import or demo")
    try:
        if create:
            journal = Journal(url)
        else:
            journal = Journal(url, create=False) if write else Journal(url, read_only=True)
    except ArgumentError as exc:
        raise CliError(f"cannot use database URL {render.redact(url)!r}: {exc}") from None
    say_upgraded(journal)
    try:
        if check_chain:
            anchors.check_chain(journal, full=full_check)
        yield journal
        if write and check_chain and mark:
            # Checked up to here, this command's own events included: the next command
            # checks only what comes after.
            _advance_verified(journal)
    finally:
        journal.close()


def say_upgraded(journal: Journal) -> None:
    """A note on stderr when opening the journal upgraded its schema (a command that
    writes does so on the way): from then on an earlier release refuses it."""
    if journal.upgraded is not None:
        before, after = journal.upgraded
        render.warn(f"upgraded the journal's schema at {render.redact(str(journal.url))} "
                    f"from {before} to {after}: an earlier release of gpu-credits can no "
                    "longer open it")


def _advance_verified(journal: JournalLike, *, recorded: bool = True) -> None:
    """Record the verified mark at the head; a warning, not a failure, when it cannot be
    written (another writer holds the lock past lock_timeout, the disk filled up, the
    file turned read-only): what the command recorded is committed by now (an import
    that said `error` after appending 30,000 lines was retried as if nothing had
    happened; a `grant` that said the disk was full had recorded its grant, and its
    retry recorded a second), and the mark is a cache the next command does without.
    `recorded=False`: the command recorded no event (a replay), so the warning does not
    tell its user to keep from running it again. A chain found broken is still an
    error."""
    try:
        anchors.advance_verified(journal)
    except ChainBroken:
        raise
    except JournalError as exc:
        done = ("what this command recorded is committed (do not run it again), but "
                if recorded else "")
        render.warn(f"{done}the journal's verified mark (a cache) was not moved to its "
                    f"head ({exc}); the next command checks the chain from the previous mark")


def refuse_journal_file(out: Path, url: str) -> None:
    """CliError when `out` is the SQLite journal's own file (or its -wal, -shm, -journal)."""
    database = sqlite_path(url)
    if database is None:
        return
    target = out.resolve()
    for suffix in ("", "-wal", "-shm", "-journal"):
        own = Path(f"{database}{suffix}")
        same = (target == own.resolve() or
                (target.exists() and own.exists() and os.path.samefile(target, own)))
        if same:
            raise CliError(f"refusing to write onto the journal's own file {own}; "
                           "choose another --out")


STDIO = Path("-")
"""`-` as a FILE: stdin to read (import, reconcile, whatif), stdout to write (--out)."""


@contextmanager
def output_file(out: Path, *, force: bool) -> Iterator[TextIO]:
    """A new file at `out`, mode 0600; an existing one only with `force`.

    Exclusive creation without `force`, so a file that appears meanwhile is not
    clobbered either; a write that fails removes what it started: the regular file at
    `out` it opened, never a path that leads elsewhere (`--out /dev/stdout`, a symbolic
    link, a FIFO, a device such as /dev/null, which a failed write removed as root).
    """
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if force else os.O_EXCL)
    try:
        fd = os.open(out, flags, 0o600)
    except FileExistsError:
        raise CliError(f"{out} already exists; give --force to overwrite it") from None
    except OSError as exc:
        raise CliError(f"cannot write {out}: {exc.strerror or exc}") from None
    opened = os.fstat(fd)
    try:
        with open(fd, "w", encoding="utf-8", newline="") as handle:
            yield handle
    except BaseException as exc:
        _remove_if_ours(out, opened)
        if isinstance(exc, OSError):
            raise CliError(f"cannot write {out}: {exc.strerror or exc}") from None
        raise


def _remove_if_ours(out: Path, opened: os.stat_result) -> None:
    """Remove `out` when it is the regular file the command opened (not a link to it,
    not another file put there meanwhile)."""
    try:
        now = out.lstat()
    except OSError:
        return
    if stat.S_ISREG(now.st_mode) and (now.st_dev, now.st_ino) == (opened.st_dev,
                                                                   opened.st_ino):
        out.unlink(missing_ok=True)


def version_text() -> str:
    """What `--version` prints: the release, which build of the fold runs, the schema
    revision this release migrates journals to, and the Python it runs on."""
    from importlib.metadata import PackageNotFoundError, version

    from eventstore.migrate import HEAD_REVISION
    from projections import native

    try:
        release = version(PROG)
    except PackageNotFoundError:  # a source tree that was never installed
        release = "(not installed)"
    native.choose()
    build = "compiled" if native.in_use() else "Python source"
    return (f"{PROG} {release} (fold: {build}; journal schema {HEAD_REVISION}; "
            f"Python {sys.version.split()[0]})")


def _print_version(value: bool) -> None:
    if value:
        typer.echo(version_text())
        raise typer.Exit()


VersionOption = Annotated[
    bool,
    typer.Option("--version", is_eager=True, callback=_print_version,
                 help="Print the release, the fold's build and the schema revision, and exit."),
]


@app.callback()
def _root(ctx: typer.Context, db: DbOption = None, _version: VersionOption = False) -> None:
    """An event-sourced ledger for expiring GPU credits and the jobs that spend them.

    Every command reads or writes one journal: --db URL (before or after the command),
    else $GPU_CREDITS_DB, else sqlite:///gpu-credits.db here.
    """
    ctx.obj = None if db is None else _given_db(db)
    # A command may fold twice (from a checkpoint, then from the journal): a checkpoint
    # passed over is worth one warning per command, not one per fold.
    said_once = _SaidOnce()
    checkpoint_log = logging.getLogger("projections.checkpoint")
    checkpoint_log.addFilter(said_once)
    # Said as every warning of the command line is: without a handler, logging's last
    # resort printed it bare, without the `gpu-credits: warning:` a script watches for;
    # not passed on as well (serve's own handler would say it a second time).
    said_as_warning = _WarningLine(logging.WARNING)
    checkpoint_log.addHandler(said_as_warning)
    checkpoint_log.propagate = False

    def detach() -> None:
        checkpoint_log.removeFilter(said_once)
        checkpoint_log.removeHandler(said_as_warning)
        checkpoint_log.propagate = True

    ctx.call_on_close(detach)


class _WarningLine(logging.Handler):
    """A log record said as one `gpu-credits: warning:` line on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        render.warn(record.getMessage())


class _SaidOnce(logging.Filter):
    """Lets each message through once."""

    def __init__(self) -> None:
        super().__init__()
        self._said: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if text in self._said:
            return False
        self._said.add(text)
        return True


@db_app.callback()
def _db_group(ctx: typer.Context, db: DbOption = None) -> None:
    """Database administration."""
    if db is not None:
        ctx.obj = _given_db(db)


def program_path() -> str:
    """How to run this program again from here, as a user would type it.

    `gpu-credits` when that name on $PATH is this program; else the path it was started
    by, relative to the current folder when it lies below it (`.venv/bin/gpu-credits`
    after `make demo`, whose venv is not on $PATH).
    """
    started = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if started is None or started.name != PROG:
        on_path = shutil.which(PROG)
        return PROG if on_path else f"{sys.executable} -m tools.cli"
    found = shutil.which(PROG)
    if found and Path(found).resolve() == started.resolve():
        return PROG
    try:
        relative = started.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return shlex.quote(str(started.resolve()))
    return shlex.quote(str(relative))


# An integer on the command line is read as import reads one in a CSV file: ASCII digits
# after an optional minus (docs/semantics.md, "Valid values"); int() would also take
# "1_000", "+5", "10.0" (through Typer) and digits of other scripts.
_INTEGER = re.compile(r"-?[0-9]{1,20}")
_NEGATIVE_NUMBER_WORD = re.compile(r"-\.?[0-9].*")  # "-25", "-2.5": never an option


def int_option(value: str, option: str, expected: str) -> int:
    """The integer `value` of `option` (an option or an ARGUMENT); a BadParameter naming
    the word given and what is `expected` otherwise."""
    text = value.strip()
    if not _INTEGER.fullmatch(text):
        raise typer.BadParameter(f"not an integer: {value!r}; expected {expected}",
                                 param_hint=option)
    return int(text)


# The metavars of the str parameters that name a file or a database, not ledger text.
_PATH_METAVARS = frozenset({"FILE", "URL"})


def _undecoded(value: str) -> bool:
    """Whether `value` holds bytes the locale's encoding could not read: Python keeps
    each such byte of the command line as a lone surrogate U+DC80..U+DCFF."""
    return any("\udc80" <= c <= "\udcff" for c in value)


class TextCommand(TyperCommand):
    """A command that refuses, before it does anything, a word of ledger text (a name,
    an id, a memo, a time) the locale could not decode.

    Under an ASCII locale with Python's UTF-8 mode off, `café` arrives as `caf` and two
    escaped bytes, which no account is named and no journal can store: every read and
    write would end on an encoding error far from the word. Guessing that the bytes are
    UTF-8 could record a name other than the one typed (Latin-1 `Ã©` is UTF-8 `é`), so
    the word is refused with what to change. A file or database path keeps its bytes:
    the file system takes them back as they came.
    """

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        rest = super().parse_args(ctx, args)
        for param in self.get_params(ctx):
            value = ctx.params.get(param.name)
            words = value if isinstance(value, list | tuple) else [value]
            if param.metavar in _PATH_METAVARS:
                continue
            for word in words:
                if isinstance(word, str) and _undecoded(word):
                    raise CliError(_undecoded_text(param, word))
        return rest


def _undecoded_text(param: Any, word: str) -> str:
    name = param.opts[0] if param.param_type_name == "option" else (
        param.metavar or param.name.upper())
    raw = os.fsencode(word)
    return (f"{name} {str(raw)[1:]} cannot be read as text: the locale's encoding "
            f"({sys.getfilesystemencoding()}) lacks its bytes; set a UTF-8 locale "
            "(e.g. LANG=C.UTF-8) or PYTHONUTF8=1 and run the command again")


class NumbersCommand(TextCommand):
    """A command whose arguments may be negative numbers (`adjust acme -25`).

    Click reads every word that starts with `-` as an option ("No such option: -25").
    Before parsing, the command's arguments move behind `--`, in their order, where no word
    is an option; the options and their values stay in front, so a mistyped option is
    still refused as an option, with the ones it may mean. A word after `--` is an
    argument, as usual (`grant -- -acme 5`).
    """

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, self._arguments_last(ctx, args))

    def _arguments_last(self, ctx: Any, args: list[str]) -> list[str]:
        values: dict[str, int] = {}  # option name -> how many words it takes
        for param in self.get_params(ctx):
            if param.param_type_name == "option":
                takes = 0 if getattr(param, "is_flag", False) or getattr(
                    param, "count", False) else param.nargs
                values.update(dict.fromkeys([*param.opts, *param.secondary_opts], takes))
        options: list[str] = []
        arguments: list[str] = []
        words = iter(args)
        for word in words:
            if word == "--":
                arguments.extend(words)
            elif word.startswith("-") and len(word) > 1 \
                    and not _NEGATIVE_NUMBER_WORD.fullmatch(word):
                options.append(word)  # `--at 5` takes the next word; `--at=5` is one
                options.extend(islice(words, values.get(word, 0)))
            else:
                arguments.append(word)
        return [*options, "--", *arguments] if arguments else options


def _time_option(value: str | None, option: str, *, end: bool = False) -> int | None:
    """The event time an option gives; `end`: the option ends a window, so a date alone
    is its whole day (`parse_end_time`)."""
    if value is None:
        return None
    try:
        # Within +-(2**53 - 1), as every time is (docs/semantics.md, "Limits").
        when = require_time("the time", (parse_end_time if end else parse_time)(value))
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None
    day = spelled_date(value)
    if day is not None:
        # An integer is an event time, as the journal's times are; one that spells a date
        # is read so, and the reader told how to write the day, before it gets an answer
        # (or a recorded event) from 1970.
        render.warn(f"{option} {value.strip()} is read as event time {when} ({iso(when)}); "
                    f"for the day {day}, write {option} {day}")
    return when


# -- commands -------------------------------------------------------------------------------


def _another_demo_db(url: str, seed: int) -> str:
    """A SQLite file in this folder for the seed's demo, neither `url` nor a file already
    there: a hint that names the refused database (or another taken one) fails again."""
    number = 1
    while True:
        name = f"demo-{seed}.db" if number == 1 else f"demo-{seed}-{number}.db"
        if f"sqlite:///{name}" != url and not Path(name).exists():
            return f"sqlite:///{name}"
        number += 1


@app.command()
def demo(
    ctx: typer.Context,
    seed: Annotated[str, typer.Option("--seed", metavar="N",
                                      help="Seed of the simulated month.")] = "42",
    db: DbOption = None,
) -> None:
    """Write a simulated month into the database; show balances and an audit summary.

    Twenty accounts, expiring grants, jobs, failures, cancellations, debt, a few late and
    duplicated events. The same seed twice appends nothing the second time; a database
    holding other events is refused.
    """
    number = int_option(seed, "--seed", "an integer such as 42")
    # On an in-memory database the month is shown and then gone: a look at the product.
    with open_journal(ctx, db, write=True, keeps=False) as journal:
        with render.progress_bar("simulating and writing the month") as progress:
            try:
                run = demo_mod.write_demo(journal, number, progress=progress)
            except demo_mod.DemoRefused as exc:
                other = _another_demo_db(database_url(ctx, db), number)
                raise CliError(f"{exc}: use another --db, e.g. --db {other}") from None
        with render.progress_bar("replaying") as progress:
            report = replay_journal(journal, progress=progress, checkpoint=True)
        at = queries.latest_time(journal)
        out = render.console()
        figures = queries.account_figures(report.ledger, at)
        render.print_table(render.balances_table(figures, at), out)
        audit = queries.audit(report.ledger, events=report.events,
                              revisions=len(report.revisions), at=at)
        render.print_table(render.audit_table(audit, run), out)
        out.print(f"State digest: {audit.digest}", soft_wrap=True)
        url = render.redact(database_url(ctx, db))
        if in_memory(url):
            out.print(f"\n{url} is in memory: this month is gone with the command. Give a "
                      "file (--db sqlite:///demo.db) to keep it and look around.")
            return
        account, job = demo_mod.examples(report.ledger)
        where = "" if url == DEFAULT_DB else f" --db {shlex.quote(url)}"
        out.print(f"\nWritten to {url}. Try:")
        for command in ("accounts", f"statement {account}", f"explain {account}",
                        f"explain --job {job}", "expiring --within 7d", "revisions", "verify"):
            out.print(f"  {program_path()}{where} {command}", soft_wrap=True)


@app.command("import")
def import_(
    ctx: typer.Context,
    file: Annotated[str, typer.Argument(metavar="FILE",
                                        help="JSON Lines (or CSV) file; '-' reads stdin.")],
    fmt: Annotated[str | None, typer.Option(
        "--format", metavar="jsonl|csv",
        help="Input format (default: csv for a .csv file, else jsonl).")] = None,
    db: DbOption = None,
    allow_far_times: AllowFarTimes = False,
) -> None:
    """Append events from a file, all or nothing: every line is checked first.

    Lines without an id get one from the line's own content and how many identical lines
    came before it, so importing the same file again (grown, or with other line endings)
    appends only its new lines. Event times after 2200-01-01 are refused as probably
    milliseconds unless --allow-far-times.
    """
    kind = fmt or ("csv" if file.lower().endswith(".csv") else "jsonl")
    if kind not in ("jsonl", "csv"):
        raise typer.BadParameter(f"expected jsonl or csv, got {kind!r}", param_hint="--format")
    source = "<stdin>" if file == "-" else file
    with _input_file(file) as stream:
        if fmt is None and kind == "jsonl" and _looks_like_csv(_first_line(stream)):
            raise CliError(f"{source} looks like CSV (its first line is "
                           f"{_first_line(stream)!r}), not JSON Lines; import it with "
                           f"--format csv")
        survey = _checked_before_a_new_file(ctx, db, stream, source, kind, allow_far_times)
        with open_journal(ctx, db, write=True) as journal:
            with render.progress_bar(f"checking {source}") as checking, \
                    render.progress_bar(f"appending {source}") as appending:
                result = importing.import_stream(journal, stream, source, fmt=kind,
                                                 checking=checking, appending=appending,
                                                 allow_far_times=allow_far_times,
                                                 survey=survey)
            with render.progress_bar("projecting the new events") as progress:
                effects = queries.import_effects(
                    journal, after=result.after, latest_before=result.latest_before,
                    progress=progress, count=result.appended)
    for warning in result.warnings:
        render.warn(warning)
    render.import_summary(source, result.appended, result.already_present, effects)


def _checked_before_a_new_file(ctx: typer.Context, db: str | None, stream: IO[bytes],
                               source: str, kind: str,
                               allow_far_times: bool) -> importing.Survey | None:
    """On a SQLite file that does not exist yet, the import's first pass (every line
    checked, see `importing.survey_stream`), made before the file is created: a file with
    bad lines, those only the second pass refuses included (`importing.may_refuse_on_empty`),
    is refused without leaving an empty database behind, and the import then takes this
    pass instead of making it again. None on any other database."""
    path = sqlite_path(database_url(ctx, db))
    if path is None or path.exists():
        return None
    with render.progress_bar(f"checking {source}") as checking:
        survey = importing.survey_stream(stream, fmt=kind, progress=checking,
                                         allow_far_times=allow_far_times)
    if survey.problems or survey.far or importing.may_refuse_on_empty(stream, kind, survey):
        # The whole report, lines the second pass refuses included, from what a new file
        # holds: an empty journal, here in memory. It raises ImportRejected, unless
        # `may_refuse_on_empty` erred on the side of caution; then the import goes on.
        importing.import_stream(MemoryJournal(), stream, source, fmt=kind,
                                allow_far_times=allow_far_times, survey=survey)
    return survey


@contextmanager
def _input_file(file: str) -> Iterator[IO[bytes]]:
    """The file to import, opened for reading twice (stdin, or a pipe such as
    `<(zcat events.jsonl.gz)`, is copied to a temporary file first, a chunk at a time: an
    import reads its input twice, never whole)."""
    with ExitStack() as stack:
        if file == "-":
            stream = sys.stdin.buffer
        else:
            try:
                stream = stack.enter_context(open(file, "rb"))
            except OSError as exc:
                raise CliError(f"cannot read {file}: {exc.strerror or exc}") from None
            if stream.seekable():
                yield stream
                return
        spool = stack.enter_context(tempfile.TemporaryFile())
        shutil.copyfileobj(stream, spool)
        yield spool


def _first_line(stream: IO[bytes]) -> str:
    """The first line that is not blank (at most 80 characters of it); the stream is left
    at its start."""
    stream.seek(0)
    try:
        while raw := stream.readline(4096):
            if raw.strip():
                return raw.decode("utf-8-sig", "replace").strip()[:80]
        return ""
    finally:
        stream.seek(0)


def _looks_like_csv(first: str) -> bool:
    """Whether a file given as JSON Lines starts like a CSV header (`id,type,time,...`)."""
    return bool(first) and not first.startswith("{") and "," in first \
        and "type" in first.lower()


@app.command()
def export(
    ctx: typer.Context,
    fmt: Annotated[str, typer.Option("--format", metavar="jsonl|csv",
                                     help="Output format.")] = "jsonl",
    out: Annotated[Path | None, typer.Option("--out", metavar="FILE",
                                             help="Write here instead of stdout ('-': "
                                                  "stdout).")] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Overwrite FILE if it exists (never the journal's own file).")
    ] = False,
    recorded: Annotated[bool, typer.Option(
        "--recorded", help="Also write each event's recorded-at time (UTC) and, in JSON "
                           "Lines, its position (CSV always has it), for an audit; import "
                           "ignores them.")
    ] = False,
    db: DbOption = None,
) -> None:
    """Write the journal in canonical order (event time, position), ids included.

    The JSON Lines export imports back into an empty database to the same state digest.
    The CSV has each event's `position` always; `--recorded` adds when the journal
    recorded each event (`recorded_at`), and in JSON Lines its `position` too. `--out`
    refuses an existing file unless `--force`, and always the journal's own file.
    """
    if fmt not in ("jsonl", "csv"):
        raise typer.BadParameter(f"expected jsonl or csv, got {fmt!r}", param_hint="--format")
    write = importing.write_csv if fmt == "csv" else importing.write_jsonl
    out = None if out == STDIO else out
    if out is not None:
        refuse_journal_file(out, database_url(ctx, db))
    # It writes out every event: every event's chain is checked first, not only the
    # events after the last checkpoint.
    with open_journal(ctx, db, full_check=True) as journal:
        records = importing.export_records(journal)
        if out is None:
            write(records, render.script_stdout(), recorded=recorded)
            return
        with output_file(out, force=force) as handle:
            count = write(records, handle, recorded=recorded)
    render.console(stderr=True).print(f"wrote {count} events to {render.shown(str(out))}")


@app.command()
def balance(
    ctx: typer.Context,
    account: Annotated[str, typer.Argument(metavar="ACCOUNT", help="Account id.")],
    at: Annotated[str | None, typer.Option(
        "--at", metavar="T", help="Event time (integer or ISO-8601; default: the latest).")
    ] = None,
    as_known_at: AsKnownAtOption = None,
    pool: Annotated[str | None, typer.Option("--pool", help="Show this pool's balance.")
    ] = None,
    as_json: JsonOption = False,
    db: DbOption = None,
) -> None:
    """An account's balance at an event time, as the journal stood at a position."""
    when = _time_option(at, "--at")
    with open_journal(ctx, db) as journal:
        report = _known(journal, lambda: queries.balance(
            journal, account, at=when, as_known_at=as_known_at, pool=pool))
    if not report.pool_is_known:
        render.warn(f"account {account!r} has never had a grant, usage or debt in pool "
                    f"{report.pool!r} (its pools: {', '.join(report.known_pools)}); "
                    "is it a typo?")
    if as_json:
        render.print_json(wording.to_dict(report))
    else:
        render.balance_report(report)


def _known(journal: JournalLike, answer: Any) -> Any:
    """Run a query; an unknown name on an empty journal says the journal is empty."""
    try:
        return answer()
    except LedgerError as exc:
        if journal.head() == 0:
            where = (f"the journal at {render.redact(journal.url)} is empty"
                     if journal.url is not None else "the journal is empty")
            raise CliError(f"{exc}; {where} (run gpu-credits import or gpu-credits demo "
                           "first)") from None
        raise


@app.command()
def statement(
    ctx: typer.Context,
    account: Annotated[str, typer.Argument(metavar="ACCOUNT", help="Account id.")],
    from_: Annotated[str | None, typer.Option(
        "--from", metavar="T", help="Start here, with an opening balance.")] = None,
    to: Annotated[str | None, typer.Option(
        "--to", metavar="T",
        help="End here, T included (a date alone: its whole day; default: the latest event "
             "time).")] = None,
    as_csv: Annotated[bool, typer.Option("--csv", help="Print CSV.")] = False,
    as_known_at: AsKnownAtOption = None,
    as_json: JsonOption = False,
    db: DbOption = None,
) -> None:
    """Every change to an account, with a running balance and subtotals.

    Grants, consumption, job reservations, charges and releases, expiries, rejections;
    then opening, granted, used, refunded, expired, adjusted, voided and closing. Exit
    status 1, with a warning, if the subtotals do not add up to the closing balance.
    """
    if as_csv and as_json:
        raise typer.BadParameter("choose one of --csv and --json", param_hint="--csv")
    start, end = _time_option(from_, "--from"), _time_option(to, "--to", end=True)
    if start is not None and end is not None and start > end:
        raise typer.BadParameter(f"--from {from_} is after --to {to}", param_hint="--from")
    with open_journal(ctx, db) as journal:
        st = _known(journal, lambda: queries.statement(journal, account, from_time=start,
                                                       to_time=end, as_known_at=as_known_at))
    with render.check_answer():
        if as_json:
            render.print_json(wording.to_dict(st))
        elif as_csv:
            render.statement_csv(st, render.script_stdout())
        else:
            render.print_table(render.statement_table(st))
            render.print_table(render.subtotals_table(st.subtotals))
    problems = st.subtotals.problems
    if problems:
        render.warn(f"statement of {account} does not add up: "
                    f"{'; '.join(wording.text(p) for p in problems)}")
        raise typer.Exit(EXIT_CHECK_FAILED)


@app.command()
def explain(
    ctx: typer.Context,
    account: Annotated[str | None, typer.Argument(metavar="ACCOUNT", help="Account id.")] = None,
    job: Annotated[str | None, typer.Option("--job", metavar="JOB",
                                            help="Explain this job instead.")] = None,
    as_known_at: AsKnownAtOption = None,
    as_json: JsonOption = False,
    db: DbOption = None,
) -> None:
    """Which grants paid what, and why a job was rejected or has not started.

    Give an ACCOUNT (the lineage of its grants: what they paid, what expired unused) or
    --job JOB (its state, acceptance, holds, charge and payers).
    """
    if (account is None) == (job is None):
        raise typer.BadParameter("give an ACCOUNT or --job JOB (one of them)",
                                 param_hint="ACCOUNT")
    with open_journal(ctx, db) as journal:
        if job is not None:
            job_ex = _known(journal, lambda: queries.explain_job(journal, job,
                                                                   as_known_at=as_known_at))
            if as_json:
                render.print_json(wording.to_dict(job_ex))
            else:
                render.explain_job(job_ex)
            return
        assert account is not None
        acct_ex = _known(journal, lambda: queries.explain_account(
            journal, account, as_known_at=as_known_at))
    if as_json:
        render.print_json(wording.to_dict(acct_ex))
    else:
        render.explain_account(acct_ex)


@app.command()
def revisions(
    ctx: typer.Context,
    account: Annotated[str | None, typer.Option(
        "--account", metavar="A",
        help="Only the revisions of account A's events (as GET /v1/revisions?account=).")
    ] = None,
    as_json: JsonOption = False,
    db: DbOption = None,
) -> None:
    """What late events and reversals changed: each outcome they revised, before and after."""
    with open_journal(ctx, db, full_check=True) as journal:  # it replays every event
        with render.progress_bar("replaying", show=not as_json) as progress:
            report = replay_journal(journal, progress=progress)
        if account is not None and not names_account(journal, account):
            # As every command naming an account: a misspelt one (or `job:<id>`, the
            # stream of a job's events recorded before its submit) must not read as
            # "nothing was revised".
            raise queries.unknown_account(account, report.ledger)
        rows = queries.revision_rows(journal, report.revisions)
        # As `GET /v1/revisions`: the account the revised event belongs to as the fold
        # holds it, not the stream it was filed in.
        accounts = owners.revision_accounts(journal, report.ledger,
                                            (r.event_id for r in report.revisions))
        if account is not None:
            rows = [row for row in rows if accounts[row.revision.event_id] == account]
    if as_json:
        render.print_json([{**wording.to_dict(row), "account": accounts[row.revision.event_id]}
                           for row in rows])
    elif rows:
        render.print_table(render.revisions_table(rows))
    else:
        render.console().print(
            "no revisions: no late event or reversal changed an outcome" if account is None
            else f"no revisions of account {account!r}: no late event or reversal changed an "
            "outcome of its events")


@app.command()
def replay(
    ctx: typer.Context,
    to: Annotated[str | None, typer.Option(
        "--to", metavar="T",
        help="Only events with event time <= T (a date alone: its whole day), and every "
             "reversal, whatever its time.")
    ] = None,
    as_json: JsonOption = False,
    db: DbOption = None,
) -> None:
    """Rebuild every projection from the journal and print the state digest."""
    until = _time_option(to, "--to", end=True)
    # Not read-only: a full replay records a checkpoint. Never creates a database.
    # Every event's chain checked, not only beyond the last checkpoint: the checkpoints
    # this replay saves will vouch for all of them. A file this process may not write (an
    # auditor's copy, a read-only mount) is replayed all the same, without saving one:
    # the digest is the answer, the checkpoint a cache.
    path = sqlite_path(database_url(ctx, db))
    read_only = path is not None and path.is_file() and not os.access(path, os.W_OK)
    with open_journal(ctx, db, write=not read_only, create=False, full_check=True,
                      mark=False) as journal:
        with render.progress_bar("replaying", show=not as_json) as progress:
            report = replay_journal(journal, to_time=until, progress=progress,
                                    checkpoint=until is None and not read_only)
        if not read_only and report.checkpoint_problem is None:
            # A checkpoint saved at the head is a verified point already (this costs
            # no write then). One that could not be saved is not followed by a try at
            # the mark: the writer that held the lock past lock_timeout (a long import)
            # most likely holds it still, and the replay would wait as long again.
            _advance_verified(journal, recorded=False)
    if report.checkpoint_problem is not None:
        render.warn(f"the replay stands, but no fresh checkpoint was saved "
                    f"({report.checkpoint_problem}); the checkpoints saved before are kept")
    if read_only and until is None:
        render.warn(f"{path} is read-only here: no checkpoint was saved (reads fold the "
                    "journal from its newest saved one); run replay where the file can be "
                    "written to save one")
    summary = {"digest": report.digest, "events": report.events, "position": report.position,
               "to": until, "revisions": len(report.revisions),
               "anomalies": len(report.anomalies)}
    if as_json:
        render.print_json(summary)
        return
    span = f" up to {format_time(until)}" if until is not None else ""
    out = render.console()
    out.print(f"replayed {report.events} events{span} (journal position {report.position}): "
              f"{len(report.revisions)} revisions, {len(report.anomalies)} anomalies")
    # The answer, copied and compared: one line at any width (the terminal may show it
    # over several rows, but never splits it with a line break).
    out.print(f"digest {report.digest}", soft_wrap=True)


@app.command()
def verify(
    ctx: typer.Context,
    anchor: Annotated[list[str] | None, typer.Option(
        "--anchor", metavar="POSITION:HASH",
        help="Also prove the journal still holds this prefix (from `gpu-credits head`; "
             "repeatable).")
    ] = None,
    anchor_file: Annotated[list[Path] | None, typer.Option(
        "--anchor-file", metavar="F",
        help="A signed anchor (`head --sign`) to prove too (repeatable).")
    ] = None,
    public_key: Annotated[Path | None, typer.Option(
        "--public-key", metavar="K", help="The Ed25519 public key that signed --anchor-file.")
    ] = None,
    as_json: JsonOption = False,
    db: DbOption = None,
) -> None:
    """Check the hash chain, and that replay reproduces the recorded outcomes.

    With --anchor (or a signed --anchor-file), also prove that the journal still holds
    exactly the anchored prefix: a rewrite that re-hashed the chain, or a truncated tail,
    fails here. Each anchor given is checked. Exit status 1 and the first bad position
    when a check fails.
    """
    given = [cli_trust.parse_anchor_option(text) for text in anchor or []]
    signed = [cli_trust.signed_anchor_option(file, public_key) for file in anchor_file or []]
    if not anchor_file:
        signed.append(cli_trust.signed_anchor_option(None, public_key))
    wanted = [a for a in (*given, *signed) if a]
    with open_journal(ctx, db, check_chain=False) as journal:
        head = journal.head()
        with render.progress_stages(show=not as_json) as progress:
            report = verify_journal(journal, progress=progress, stage=progress.stage)
        checks = cli_trust.check_anchors(journal, wanted)
    failed = next((c for _, c in checks if not c.ok), None)
    ok = report.ok and failed is None
    first_bad = report.first_bad_position if not report.ok else (
        failed.first_bad_position if failed else None)
    problem = report.problem if not report.ok else (failed.problem if failed else None)
    verdict = Verification.of(report, head=head, by="cli", finished_at=time.time())
    _record_verdict(ctx, db, replace(verdict, ok=ok, first_bad_position=first_bad,
                                     problem=problem))
    with render.check_answer():
        if as_json:
            out: dict[str, Any] = {"ok": ok, "first_bad_position": first_bad, "problem": problem,
                                   "events": report.checked_events,
                                   "checkpoints": report.checked_checkpoints,
                                   "stale_checkpoints": list(report.stale_checkpoints)}
            if checks:
                out["anchors"] = [anchors.report_dict(c, a) for a, c in checks]
            render.print_json(out)
        elif ok:
            out_ = render.console()
            if report.checked_checkpoints:
                out_.print(
                    f"ok: {report.checked_events} events, hash chain intact, replay reproduces "
                    f"the {report.checked_checkpoints} recorded checkpoint(s)")
            elif not report.stale_checkpoints:
                out_.print(
                    f"ok: {report.checked_events} events, hash chain intact; no checkpoint "
                    "recorded yet to compare replay with (gpu-credits replay records one)")
            else:
                out_.print(f"ok: {report.checked_events} events, hash chain intact")
            if report.stale_checkpoints:
                out_.print(f"note: {wording.stale_checkpoints_text(len(report.stale_checkpoints))}")
            for anchor_, _ in checks:
                out_.print(f"ok: holds anchor {anchor_} unchanged", soft_wrap=True)
        else:
            render.console().print(f"FAILED at position {first_bad}: {problem}")
    if not ok:
        _say_error(f"verification failed at position {first_bad}: {problem}")
        raise typer.Exit(EXIT_CHECK_FAILED)


VERDICT_LOCK_WAIT = 1.0
"""Seconds `verify` waits for the write lock to keep its verdict: a reader answers beside
a long writer (an import holding SQLite's one lock) rather than after lock_timeout."""


def _record_verdict(ctx: typer.Context, db: str | None, verdict: Verification) -> None:
    """Keep the verdict beside the journal for the web view's summary, when this user may
    write the database (verify reads through a read-only connection; the record is written
    through another, which never creates or upgrades anything). A database it cannot write
    now (or whose lock another writer holds past VERDICT_LOCK_WAIT) keeps no record: the
    verdict printed is the same either way."""
    try:
        with Journal(database_url(ctx, db), create=False, upgrade=False,
                     lock_timeout=VERDICT_LOCK_WAIT) as writable:
            record_verification(writable, verdict)
    except (JournalError, SQLAlchemyError, OSError, ValueError):
        pass


@db_app.command("upgrade")
def db_upgrade(ctx: typer.Context, db: DbOption = None) -> None:
    """Apply the Alembic migrations: bring the schema to this version's head."""
    refuse_in_memory(database_url(ctx, db))
    before, after = upgrade(database_url(ctx, db))
    url = render.redact(database_url(ctx, db))
    if before == after:
        render.console().print(f"{url}: schema already at revision {after}")
    else:
        render.console().print(f"{url}: schema upgraded from {before or 'nothing'} to {after}")


# Commands grouped by area live in their own modules and register themselves on `app`.
from tools import cli_corrections, cli_reports, cli_serve, cli_trust  # noqa: E402, F401

# Every command refuses an undecodable word of text (`TextCommand`), those registered
# without a class of their own (Typer's default) too.
for _info in [*app.registered_commands, *db_app.registered_commands]:
    if _info.cls in (None, TyperCommand):
        _info.cls = TextCommand


def main() -> None:
    """The `gpu-credits` console script."""
    app()


if __name__ == "__main__":
    # `python -m tools.cli` runs this file as `__main__`, a second copy of the module: the
    # area modules register their commands on `tools.cli.app`, so run that one.
    from tools.cli import main as _registered_main

    _registered_main()
