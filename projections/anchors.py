"""Anchors: the journal's head kept outside the database, and the proof it still holds.

An **anchor** is `POSITION:HASH`, the chain hash of the record at POSITION. The hash
commits to that record and, through the chain, to every record before it. Whoever keeps
an anchor somewhere the database's owner cannot reach (a finance system, a ticket, an
email) can later prove that the journal still holds exactly that prefix: a rewrite of
any earlier record, even one that re-hashes the whole chain, changes the hash at
POSITION; a truncation removes POSITION.

Signed anchors are in `projections.signing`. The command line, the HTTP service and the
facades call these functions.
"""

from __future__ import annotations

import re
from typing import Any

from eventstore import Anchor, ChainBroken, ChainReport, JournalLike
from eventstore.hashing import GENESIS_HASH


class AnchorError(ValueError):
    """An anchor, or a signed anchor statement, that cannot be read or does not check out."""


_POSITION = re.compile(r"[0-9]{1,19}")
_HASH = re.compile(r"[0-9a-fA-F]{64}")

ANCHOR_FORMAT = ("a position (0 or more), a colon and a hash of 64 hex digits, as "
                 "`gpu-credits head` prints it")


def parse_anchor(text: str) -> Anchor:
    """`POSITION:HASH` as `gpu-credits head` prints it, around blanks (as pasted from a
    file), the hash in either case (as a SHA-256 is written either way; kept lowercase,
    as the journal stores it); AnchorError naming what is wrong and the format."""
    position, sep, digest = text.strip().partition(":")
    if not sep or not _POSITION.fullmatch(position):
        raise AnchorError(f"anchor {_shown(text)} is not POSITION:HASH: {ANCHOR_FORMAT}")
    if not _HASH.fullmatch(digest):
        raise AnchorError(f"anchor hash must be 64 hex digits (a SHA-256), got "
                          f"{_shown(digest)} (an anchor is POSITION:HASH: {ANCHOR_FORMAT})")
    try:
        return Anchor.of(int(position), digest.lower())
    except ValueError as exc:  # position 0 with another hash than the empty journal's
        raise AnchorError(str(exc)) from None


def _shown(text: str) -> str:
    """A value quoted in an error, cut short when long (an anchor is 66 characters or so)."""
    return repr(text) if len(text) <= 100 else f"{text[:100]!r}... ({len(text)} characters)"


def head_anchor(journal: JournalLike) -> Anchor:
    """The journal's head as an anchor: its last position and that record's chain hash."""
    return journal.head_anchor()


def check_anchor(journal: JournalLike, anchor: Anchor) -> ChainReport:
    """Whether the journal is a whole chain that still holds exactly the prefix `anchor`
    names: every hash recomputed, then the one at the anchor's position compared."""
    return journal.verify_chain(anchor=anchor)


def hash_at(journal: JournalLike, position: int) -> str:
    """The chain hash the journal stores at `position` (the genesis hash at 0); KeyError
    when it holds no record there."""
    if position == 0:
        return GENESIS_HASH
    stored = getattr(journal, "stored_hash", None)
    if stored is not None:
        # The hash as stored, not the record's content checked: a verified point or a
        # checkpoint at an edited record still names the state folded before the edit;
        # whatever reads that record refuses it.
        found: str | None = stored(position)
        if found is not None:
            return found
    else:  # a view of a journal: its read
        for rec in journal.read(after_position=position - 1, to_position=position,
                                order="position"):
            if rec.position == position:
                return rec.hash
    raise KeyError(f"the journal holds no record at position {position}")


VERIFIED = "verified-chain"
"""Snapshot name of the journal's verified mark: a position and its chain hash up to which
every event was checked to chain (no state: the digest field holds the chain hash)."""


def check_chain(journal: JournalLike, since: Anchor | None = None, *,
                full: bool = False) -> int:
    """Check that every event after `since` chains from the one before; return how many
    were checked.

    `since` None: after the journal's last verified point (`verified_checkpoint`), or
    from the start when there is none, or when `full`. Raises `eventstore.ChainBroken`
    naming the first altered position. A command calls this before it answers, so it
    never answers from an altered journal: the events up to the verified point were
    checked when it was recorded, and its chain hash pins them since (`verify` checks
    them all again, every time).
    """
    if since is None:
        # Asked even for a full check: a mark the journal no longer holds (its tail cut,
        # the chain rewritten after it) is found nowhere else.
        mark = verified_checkpoint(journal)
        if full:
            # The whole walk `verify` makes: the private parts against their seals and
            # the head marker too, so that a command writing out every event (export to
            # stdout) refuses before its first line rather than halfway.
            report = journal.verify_chain()
            if not report.ok:
                assert report.first_bad_position is not None
                raise ChainBroken(report.first_bad_position,
                                  report.problem or "the journal's chain is broken")
            return report.events
        since = mark
    return sum(1 for _ in journal.read_verified(after=since))


def advance_verified(journal: JournalLike) -> Anchor:
    """Check the events after the last verified point, then record the head as the new
    verified mark (after a command that writes; a read-only one cannot record)."""
    since = verified_checkpoint(journal)
    last = since or Anchor(0, GENESIS_HASH)
    for rec in journal.read_verified(after=since):
        last = Anchor(rec.position, rec.hash)
    if since is None or last.position > since.position:
        # One transaction: a new mark that cannot be written (another writer took the
        # lock in between, a full disk) leaves the previous one, which the next command
        # then checks from, instead of none (the whole chain checked by every command).
        with journal.transaction():
            journal.drop_snapshots(VERIFIED)
            journal.save_snapshot(VERIFIED, last.position, 0, last.hash, b"")
    return last


def verified_checkpoint(journal: JournalLike) -> Anchor | None:
    """Where the journal was last verified: the newest verified mark (`advance_verified`)
    or saved checkpoint, as (position, chain hash), when the journal still has that hash
    there; None when there is neither.

    A mark is recorded after a check of every event up to it, and a checkpoint is saved
    only from events read with their chain checked (a replay after its check, a facade as
    it reads), so the events up to either were whole then; the chain hash pins them
    since. One whose hash the journal no longer has there, or whose position it no longer
    reaches, means the journal was rewritten or cut after it was recorded: ChainBroken,
    at the first altered position when the chain shows one, else at the recorded
    position (a rewrite that re-hashed the chain).
    """
    from projections.checkpoint import CHECKPOINT, checkpoint_claim

    candidates = [(info.position, 1, info) for info in journal.snapshots(VERIFIED)]
    candidates += [(info.position, 0, info) for info in journal.snapshots(CHECKPOINT)]
    for position, is_mark, info in sorted(candidates, key=lambda c: (c[0], c[1], c[2].id),
                                          reverse=True):
        if is_mark:
            chain_hash = info.digest
        else:
            try:
                claim = checkpoint_claim(journal.load_snapshot(info.id))
            except KeyError:  # dropped meanwhile (a replay saving fresh ones)
                continue
            if claim is None or claim[0] != position:
                continue  # not a checkpoint this code reads: the facades ignore it too
            chain_hash = claim[1]
        try:
            held: str | None = hash_at(journal, position)
        except KeyError:
            held = None
        if held == chain_hash:
            return Anchor.of(position, chain_hash)
        _rewritten(journal, position, held is None)
    return None


def _rewritten(journal: JournalLike, position: int, cut: bool) -> None:
    """Raise ChainBroken for a journal that no longer holds a verified point: at the first
    altered position if the chain shows one, else at the point's."""
    for _ in journal.read_verified():  # raises at the first altered position
        pass
    head = journal.head()
    if cut:
        raise ChainBroken(
            head + 1,
            f"the journal ends at position {head}, but it was verified up to position "
            f"{position}: records {head + 1}..{position} were removed",
        )
    raise ChainBroken(
        position,
        f"the journal's chain hash at position {position} is not the one recorded when it "
        "was verified there: the prefix was rewritten and re-hashed since (or the record "
        "of it belongs to another journal); gpu-credits verify --anchor tells more",
    )


def report_dict(report: ChainReport, anchor: Anchor | None = None) -> dict[str, Any]:
    """`{"ok", "events", "first_bad_position"?, "problem"?, "anchor"?}`, as `verify
    --json` and `POST /v1/journal/verify` answer."""
    out: dict[str, Any] = {"ok": report.ok, "events": report.events}
    if not report.ok:
        out["first_bad_position"] = report.first_bad_position
        out["problem"] = report.problem
    if anchor is not None:
        out["anchor"] = str(anchor)
    return out
