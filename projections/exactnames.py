"""Names a live decision brings into the journal carry no surrounding whitespace.

Names are compared exactly, so `" alice"` would be an account apart from `"alice"`,
with its own balance and statement: the kind of stray space a script or a form adds and
nobody sees until the numbers disagree. A live decision (a facade call, the command
line, the HTTP service) is refused when a name it would record (an account, job, pool
or user, or the caller's event id) is blank or begins or ends with whitespace, unless
the journal already holds that very name in that role: what was recorded stays
reachable. The journal itself, its decoding and its files (import, `POST /v1/events`)
keep the older rule (non-empty printable text), since a file may carry a journal that
holds such a name, and replay must read every journal it ever wrote.

The same goes for a name not in Unicode's composed form (NFC): `"cafe\\u0301"` (an `e`
and a combining accent, as some file systems and macOS text hand it over) looks exactly
like `"caf\\u00e9"` in every table, list and page, yet would be another account.
"""

from __future__ import annotations

import unicodedata

from projections.events import DomainEvent
from projections.ledger import Ledger
from projections.validation import escaped

_ROLES = ("account", "job", "pool", "user")
"""The fields of an event that name something a later call can name again."""


def padded(value: str) -> bool:
    """Whether `value` is blank or begins or ends with whitespace."""
    return value[:1].isspace() or value[-1:].isspace()


def inexact(value: str) -> bool:
    """Whether `value` could not be a new name: padded, or not in Unicode's NFC form."""
    return padded(value) or not unicodedata.is_normalized("NFC", value)


def refusal(what: str, value: str) -> str:
    """Why `value` cannot be a new name (`what`: its role), and what would do."""
    if not padded(value):
        composed = unicodedata.normalize("NFC", value)
        wanted, given = escaped(composed, '"'), escaped(value, '"')
        return (f"{what} {value!r} is not in Unicode's composed form (NFC); it looks like "
                f"{composed!r}, but names are compared exactly, so it would name another "
                f"{what}: write it as {composed!r} (escaped, {wanted} rather than {given})")
    if not value.strip():
        return f"{what} {value!r} is only whitespace: give a name"
    return (f"{what} {value!r} begins or ends with whitespace; names are compared exactly, "
            f"so it would name another {what} than {value.strip()!r}: write it without "
            "the spaces")


def check_event_names(ledger: Ledger, event: DomainEvent) -> None:
    """Refuse (ValueError) a padded name, or one not in NFC, in `event` that `ledger`
    does not hold already."""
    for role in _ROLES:
        value = getattr(event, role, None)
        if value is None or not inexact(value) or _known(ledger, event, role, value):
            continue
        raise ValueError(refusal(role, value))


def check_event_id(event_id: str) -> None:
    """Refuse (ValueError) a padded event id, or one not in NFC, for a new decision."""
    if inexact(event_id):
        raise ValueError(refusal("event id", event_id))


def _known(ledger: Ledger, event: DomainEvent, role: str, value: str) -> bool:
    if role == "account":
        return value in ledger.accounts
    if role == "job":
        return value in ledger.jobs
    if role == "pool":
        account = ledger.accounts.get(getattr(event, "account", ""))
        if account is None:
            return False
        book = account.book
        return value in book.heaps or value in book.active or value in book.debt
    return False  # users are not indexed: a new one is as likely as an old one
