"""The words of every answer: what an event did, why a job waits, why a finding is what
it is, where a statement does not add up, what a late event revised.

`projections.queries` answers in values (kinds, figures, lineage, codes); this module
turns them into the sentences people read, once, for the command line's tables, CSV and
`--json`, the HTTP service's bodies and the web view's pages, so all of them say the same
thing. `to_dict(answer)` is an answer's JSON with these words in it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from projections.creditbook import Lineage
from projections.events import GENERAL
from projections.queries.answers import Words
from projections.queries.answers import to_dict as _to_dict
from projections.queries.effects import (
    ANOMALY,
    EXPIRE,
    OPENING,
    REFILL,
    REVERSED,
    UNEXPLAINED,
    Effect,
)
from projections.queries.explain import BEHIND, BLOCKED, NEXT, RUNNING_HELD, Waiting
from projections.queries.reconcile import Note
from projections.queries.statement import CLOSING_DIFFERS, SUBTOTALS_DIFFER, Mismatch
from projections.timefmt import format_time


def pool_text(pool: object) -> str:
    """` h100` after an amount; nothing for general credits."""
    return "" if pool in (None, GENERAL) else f" {pool}"


def credits_text(amount: int, pool: object = None, *, signed: bool = False) -> str:
    """`5 h100 credits`, `1 credit`, `+1 credit`: an amount in words, singular for one."""
    number = f"{amount:+,}" if signed else f"{amount:,}"
    return f"{number}{pool_text(pool)} {credit_word(amount)}"


def credit_word(amount: int) -> str:
    """`credit` for one (or minus one), `credits` for any other amount."""
    return "credit" if abs(amount) == 1 else "credits"


def lineage_text(lineage: Lineage) -> str:
    """`g1 50, g2 20`: which grants gave how many credits."""
    return ", ".join(f"{grant} {amount:,}" for grant, amount in lineage) or "nothing"


def reported_text(reported: Mapping[str, Any]) -> str:
    """An outcome as a caller was told it (a revision's before or after):
    `ok; debt 10; paid by g1 5`."""
    parts = ["ok" if reported.get("ok", True) else "rejected"]
    if "debt_after" in reported:
        parts.append(f"debt {reported['debt_after']:,}")
    if "charge" in reported:
        parts.append(f"charged {reported['charge']:,}")
    if reported.get("paid_by"):
        paid = ", ".join(f"{g} {a:,}" for g, a in reported["paid_by"])
        parts.append(f"paid by {paid}")
    if "reason" in reported:
        parts.append(str(reported["reason"]))
    return "; ".join(parts)


def _debt(e: Effect) -> str:
    return f"; {e.debt_created:,} became debt (debt now {e.debt_after:,})" \
        if e.debt_created else ""


def _adjust(e: Effect) -> str:
    text = f"adjustment of {credits_text(e.amount, e.pool, signed=True)}: {e.reason}"
    if e.amount < 0:
        return text + f"; paid by {lineage_text(e.paid_by)}" + _debt(e)
    return text + (f"; {e.paid_debt:,} paid debt first" if e.paid_debt else "")


def _grant(e: Effect) -> str:
    text = f"grant of {credits_text(e.amount, e.pool)}"
    text += f", expires {format_time(e.expiry)}" if e.expiry is not None else ", no expiry"
    return text + (f"; {e.paid_debt:,} paid debt first" if e.paid_debt else "")


def _submit(e: Effect) -> str:
    head = f"job {e.job}, cost {e.cost:,}, priority {e.priority}"
    if e.pool not in (None, GENERAL):
        head += f", pool {e.pool}"
    if not e.ok:
        return f"{head}: rejected: {e.reason}"
    return f"{head}: reserved from {lineage_text(e.paid_by)}"


def _released(e: Effect) -> str:
    """`released 8; 3 paid debt first (g1 3)`: released credits pay debt before they are
    usable again, so the words say how much and whose credits they were."""
    text = f"released {e.released:,}"
    if e.paid_debt:
        text += f"; {e.paid_debt:,} paid debt first ({lineage_text(e.debt_paid_by)})"
    return text


def _complete(e: Effect) -> str:
    text = f"job {e.job} {e.state}: charged {e.charge:,}"
    if e.charge:
        text += f" (paid by {lineage_text(e.paid_by)})"
    return text + (f", {_released(e)}" if e.released else "")


def _expire(e: Effect) -> str:
    credits = f"{e.amount:,}{pool_text(e.pool)} of grant {e.ref}"
    if e.job is None:
        if e.voided:
            return f"{credits} never count: the grant was voided at " \
                f"{format_time(e.expiry)}, before it took effect"
        return f"{credits} expired unused"
    ended = "was voided" if e.voided else "expired"
    return f"{credits} released by job {e.job} after the grant {ended} at " \
        f"{format_time(e.expiry)}"


def _account(e: Effect) -> str:
    if not e.again:
        return "account opened" + (f" (at most {e.max_running} running)"
                                   if e.max_running else "")
    if not e.changed:
        return "account declared again, nothing changed"
    return "account changed: " + ", ".join(
        f"{name} {_setting(before)} -> {_setting(after)}" for name, before, after in e.changed)


def _setting(value: int | None) -> str:
    return "none" if value is None else str(value)


_EFFECTS: dict[str, Callable[[Effect], str]] = {
    REVERSED: lambda e: "reversed, no effect",
    ANOMALY: lambda e: f"anomaly, no effect: {e.reason}",
    "adjust": _adjust,
    "void": lambda e: f"grant {e.ref} voided, {e.amount:,} unused {credit_word(e.amount)} "
                      f"stop counting" + (f": {e.reason}" if e.reason else ""),
    "reverse": lambda e: f"reversal of event {e.ref}: {e.reason}",
    "account": _account,
    "grant": _grant,
    "consume": lambda e: f"consumed {e.amount:,}{pool_text(e.pool)}, paid by "
                         f"{lineage_text(e.paid_by)}" + _debt(e),
    "submit": _submit,
    "start": lambda e: f"job {e.job}",
    "complete": _complete,
    "cancel": lambda e: f"job {e.job}: {e.reason}" if e.reason
                        else f"job {e.job} cancelled: {_released(e)}",
    EXPIRE: _expire,
    REFILL: lambda e: f"refill of {credits_text(e.amount)} accrued"
                      + (f"; {e.paid_debt:,} paid debt first" if e.paid_debt else ""),
    OPENING: lambda e: "opening balance",
    UNEXPLAINED: lambda e: f"unexplained change (please report): balance is {e.amount}, "
                           f"the lines above add up to {e.counted}",
}


def effect_text(effect: Effect) -> str:
    """What an event (an expiry, a refill) did, in words: a statement line's and a job
    event's detail."""
    say = _EFFECTS.get(effect.kind)
    return effect.kind if say is None else say(effect)


def line_detail(effect: Effect, memo: str | None) -> str:
    """A statement line's detail: what it did, in words, then the event's memo (the
    contract shows memos in statements: a purchase order, the run a usage report is for)."""
    words = effect_text(effect)
    return f"{words}; memo: {memo}" if memo else words


def waiting_text(w: Waiting) -> str:
    """Why a pending job has not started (or that a running one holds its cost)."""
    if w.code == BLOCKED:
        return (f"account {w.account!r} already runs {w.running} of at most "
                f"{w.max_running} jobs; {w.ahead} pending job(s) ahead of it")
    if w.code == BEHIND:
        return f"{w.ahead} pending job(s) ahead of it (higher priority, or submitted earlier)"
    if w.code == NEXT:
        return "first in line: the next start_next starts it"
    if w.code == RUNNING_HELD:
        return f"running; {credits_text(w.held)} held until it completes"
    raise ValueError(f"unknown waiting code {w.code!r}; expected {BLOCKED}, {BEHIND}, "
                     f"{NEXT} or {RUNNING_HELD}")


_NOTES: dict[str, Callable[[Note], str]] = {
    "": lambda n: "",
    "duplicate": lambda n: (f"{n.kind} {n.ref} appears earlier in the file under account "
                           f"{n.account!r}"),
    "no_job": lambda n: f"no job {n.ref!r} in the ledger",
    "job_not_charged": lambda n: f"job {n.ref!r} is {n.state}: not charged",
    "reversed": lambda n: f"event {n.ref!r} was reversed: not a charge",
    "no_event": lambda n: f"no usage report or adjustment with id {n.ref!r}",
    "other_account": lambda n: f"the ledger charges {n.ref} to account {n.account!r}",
    "job": lambda n: "job charge",
    "consume": lambda n: "usage report",
    "adjust": lambda n: "adjustment",
}


def note_text(note: Note) -> str:
    """Why a reconciliation finding has its verdict, in words ("" for a plain one)."""
    return _NOTES[note.code](note)


def mismatch_text(m: Mismatch) -> str:
    """Where a statement's subtotals and closing balance disagree."""
    if m.code == SUBTOTALS_DIFFER:
        return f"the subtotals add up to {m.found:,} but the closing balance is {m.expected:,}"
    if m.code == CLOSING_DIFFERS:
        return (f"the closing balance {m.found:,} differs from the account's balance "
                f"{m.expected:,} at the same time")
    raise ValueError(f"unknown mismatch code {m.code!r}; expected {SUBTOTALS_DIFFER} or "
                     f"{CLOSING_DIFFERS}")


def stale_checkpoints_text(count: int) -> str:
    """Why a verification passed over `count` checkpoints: what `gpu-credits verify`
    notes and the web view's verdict shows."""
    return (f"{count} checkpoint(s) saved in another format not compared (a stale cache, "
            "not damage: gpu-credits replay saves fresh ones)")


WORDS: Words = {Effect: effect_text, Waiting: waiting_text, Note: note_text,
                Mismatch: mismatch_text}
"""Every worded value type, and its words."""


def text(value: Any) -> str:
    """The words of a worded value (an effect, a waiting, a note, a mismatch); "" for None."""
    if value is None:
        return ""
    say = WORDS.get(type(value))
    if say is None:
        raise TypeError(f"no words for a {type(value).__name__}; worded types are "
                        f"{', '.join(t.__name__ for t in WORDS)}")
    return str(say(value))


def to_dict(answer: Any) -> dict[str, Any]:
    """An answer's JSON object, with its words: what `--json`, the service and the web
    view's downloads print."""
    return _to_dict(answer, WORDS)
