"""`gpu-credits` commands: trust. The head to keep outside the database, and its checks.

`head` prints the anchor `POSITION:HASH` (or signs it with `--sign KEY`); `verify`'s
`--anchor`, `--anchor-file` and `--public-key` options are checked here. The logic lives
in `projections.anchors`, which the HTTP service calls too.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from eventstore import Anchor, ChainReport, JournalLike
from projections import anchors, personal, signing
from projections.validation import spelling
from tools import render
from tools.cli import (
    STDIO,
    CliError,
    DbOption,
    JsonOption,
    app,
    open_journal,
    output_file,
)


def _read_file(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise CliError(f"cannot read {what} {path}: {exc.strerror or exc}") from None


@app.command()
def head(
    ctx: typer.Context,
    sign: Annotated[Path | None, typer.Option(
        "--sign", metavar="KEY",
        help="Write a statement of the head signed with this Ed25519 private key (PEM or "
             "OpenSSH).")] = None,
    out: Annotated[Path | None, typer.Option(
        "--out", metavar="FILE",
        help="With --sign: write the statement here ('-': stdout).")] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="With --out: overwrite an existing file.")] = False,
    as_json: JsonOption = False,
    db: DbOption = None,
) -> None:
    """The last position and its chain hash: an anchor to keep outside the database.

    Prints POSITION:HASH. Keep it (after each import, daily, in the finance system); a
    later `gpu-credits verify --anchor POSITION:HASH` proves the journal still holds that
    prefix unchanged.
    """
    if out is not None and sign is None:
        raise typer.BadParameter("--out goes with --sign KEY", param_hint="--out")
    out = None if out == STDIO else out
    key = signing.load_private_key(_read_file(sign, "signing key")) if sign else None
    with open_journal(ctx, db) as journal:
        anchor = anchors.head_anchor(journal)
    if key is not None:
        text = signing.dump_statement(signing.sign_anchor(anchor, key))
        if out is None:
            render.script_stdout().write(text)
        else:
            with output_file(out, force=force) as handle:
                handle.write(text)
            render.console(stderr=True).print(
                f"wrote a signed anchor of {anchor} to {render.shown(str(out))}")
        return
    if as_json:
        render.print_json({"position": anchor.position, "hash": anchor.hash})
    else:
        sys.stdout.write(f"{anchor}\n")


def parse_anchor_option(text: str | None) -> Anchor | None:
    """The `--anchor` value, or a usage error (exit 2) naming the expected form."""
    if text is None:
        return None
    try:
        return anchors.parse_anchor(text)
    except anchors.AnchorError as exc:
        raise typer.BadParameter(str(exc), param_hint="--anchor") from None


def signed_anchor_option(anchor_file: Path | None,
                         public_key: Path | None) -> Anchor | None:
    """The anchor a signed statement attests, checked against the given public key.

    A statement that does not check out is a failed check (exit 1), not bad input: it is
    exactly what an auditor runs `verify` to find.
    """
    if anchor_file is None and public_key is None:
        return None
    if anchor_file is None or public_key is None:
        raise typer.BadParameter("--anchor-file F and --public-key K go together",
                                 param_hint="--anchor-file")
    key = signing.load_public_key(_read_file(public_key, "public key"))
    data = _read_file(anchor_file, "anchor file")
    try:
        anchor, _ = signing.read_statement(data, key)
    except anchors.AnchorError as exc:
        raise CliError(f"{anchor_file}: {exc}", code=1) from None
    return anchor


def check_anchors(journal: JournalLike,
                  wanted: list[Anchor]) -> list[tuple[Anchor, ChainReport]]:
    """Each anchor with the journal's answer: does it still hold that prefix unchanged."""
    return [(anchor, anchors.check_anchor(journal, anchor)) for anchor in wanted]


@app.command()
def erase(
    ctx: typer.Context,
    user: Annotated[str | None, typer.Option(
        "--user", metavar="U", help="Erase the personal fields of every event naming U.")
    ] = None,
    event: Annotated[list[str] | None, typer.Option(
        "--event", metavar="ID", help="Erase the personal fields of this event (repeatable).")
    ] = None,
    reason: Annotated[str | None, typer.Option(
        "--reason", metavar="TEXT",
        help="Why (a request number); recorded with the erasure: never the person's name.")
    ] = None,
    as_json: JsonOption = False,
    db: DbOption = None,
) -> None:
    """Erase personal data (user, memo) while history stays verifiable.

    The personal fields of the events naming --user U (or of each --event ID) are deleted
    from the database; the events, every figure, the state digest, the hash chain and
    every anchor stay as they were, and `verify` still passes. The erasure is recorded as
    an `erase` event naming the events, never the person. Erasing again, or a user of
    whom nothing is held, changes nothing (exit 0, with a warning, which names a user held
    under a spelling differing only in case, spaces or Unicode form); an --event ID the
    journal never recorded is refused (exit 2).
    """
    if user is None and not event:
        raise typer.BadParameter("give --user U or --event ID (or both)", param_hint="--user")
    with open_journal(ctx, db, write=True, create=False) as journal:
        ids = list(event or [])
        # An id the journal never recorded is a typo, not "nothing held": event ids are in
        # the chain, so naming it tells nothing about a person (unlike an unknown user).
        unknown = [i for i in dict.fromkeys(ids) if journal.get(i) is None]
        if unknown:
            named = ", ".join(map(repr, unknown))
            raise CliError(f"no event{'s' if len(unknown) > 1 else ''} {named} in the journal: "
                           "--event must be the id of a recorded event; nothing was erased")
        # Records written before personal fields were kept apart (schema revision 0003)
        # carry their memo in the chained payload: "nothing held" would be untrue.
        given = [(i, journal.get(i)) for i in dict.fromkeys(ids)]
        inline = sorted(i for i, rec in given if rec is not None and personal.inline_fields(rec))
        like: list[str] = []
        if user is not None:
            of_user = personal.events_of_user(journal, user)
            ids += of_user
            if not of_user:
                like = personal.users_like(journal, user)
        done = personal.erase_events(journal, ids, reason=reason)
    for note in done.notes:
        render.warn(note)
    whom = f"user {user!r}" if user is not None else "the given event(s)"
    if inline:
        render.warn(f"the personal fields of event(s) {', '.join(map(repr, inline))} are "
                    "inline in their chained records (written before they were kept apart, "
                    "schema revision 0003) and cannot be erased without breaking the chain "
                    "and every anchor: they stay, and are still shown")
    if like:
        # Names are compared exactly: a request spelled otherwise than the usage reports
        # erased nothing, and "nothing held" alone would read as done.
        holds = ", ".join(f"user {spelling(u)}" for u in like)
        render.warn(f"no personal data of user {user!r} is held, but the journal holds "
                    f"{holds}, spelled otherwise only in letter case, spaces or Unicode "
                    "form: if that is the person, erase --user with that spelling")
    if done.record is None and not inline:
        render.warn(f"nothing to erase: no personal data of {whom} is held (never recorded, "
                    "or already erased); nothing was appended")
    elif done.record is None:
        render.warn("nothing else to erase; nothing was appended")
    if as_json:
        render.print_json({
            "erased": len(done.erased), "events": list(done.erased),
            "erasure": None if done.record is None else done.record.id,
            "position": None if done.record is None else done.record.position,
            "not_erasable": inline})
    elif done.record is not None:
        render.console().print(
            f"erased the personal fields of {len(done.erased)} event(s) of {whom}: erasure "
            f"{done.record.id} at position {done.record.position}; every figure, the hash "
            "chain and every anchor are unchanged", soft_wrap=True, markup=False)
