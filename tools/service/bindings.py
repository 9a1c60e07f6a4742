"""Idempotency-Keys the journal binds in `request_keys` rather than in an event's id: a
batch of events (its records may all carry ids of their own), a start-next that found
nothing to start and a cancel of a job cancelled before (neither records an event). A
single write sent under such a key is answered from the binding: its own request's
retry gets the bound answer, anything else is `409`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from eventstore import RequestKey
from projections.ledger import Ledger
from tools.service.groupcommit import Command
from tools.service.problems import ServiceProblem

REQUEST_LOCK = "request-key:"
"""Prefix of the lock key every request under an Idempotency-Key holds while its key is
looked up and recorded or bound in the journal: two writers given one key take turns."""

START_NEXT = "start-next:"
"""How a start-next's fingerprint begins (a batch's is a SHA-256 in hex: never this)."""


CANCEL = "cancel:"
"""How the fingerprint of a cancel that recorded nothing begins."""


def start_next_fingerprint(time: int | None) -> str:
    """The digest of a start-next's body: its time, or none (the service's clock)."""
    return START_NEXT + ("" if time is None else str(time))


def cancel_fingerprint(job: str, time: int | None) -> str:
    """The digest of a cancel's request: its job and its time, or none."""
    return CANCEL + json.dumps([job, time], ensure_ascii=False)


def records_nothing(binding: RequestKey) -> bool:
    """Whether the request bound to the key recorded no event (a start-next or a cancel)."""
    return binding.fingerprint.startswith((START_NEXT, CANCEL))


def named_by(binding: RequestKey, position: int) -> bool:
    """Whether the request bound to the key recorded or named the event at `position`
    (a batch's answer lists its records' positions; a start that found nothing, none)."""
    if records_nothing(binding):
        return False
    answer = json.loads(binding.answer)
    return isinstance(answer, dict) and position in answer.get("positions", ())


def batch_key_conflict(key: str | None) -> ServiceProblem:
    """The 409 for an Idempotency-Key sent with another batch of events than its own
    (found in the answers a process remembers)."""
    return ServiceProblem(409, f"Idempotency-Key {key!r} was used for another batch of "
                          "events", slug="idempotency-conflict")


def key_in_use(key: str | None, binding: RequestKey) -> ServiceProblem:
    """The 409 for a request sent under a key bound to another request."""
    if binding.fingerprint.startswith(START_NEXT):
        named = "a start-next that found no job to start"
    elif binding.fingerprint.startswith(CANCEL):
        job = json.loads(binding.fingerprint[len(CANCEL):])[0]
        named = f"a cancel of job {job!r}, which was cancelled already"
    else:
        named = "another batch of events (POST /v1/events)"
    return ServiceProblem(409, f"Idempotency-Key {key!r} was used for {named}: use a new "
                          "key for a new request", slug="idempotency-conflict")


@dataclass(frozen=True, slots=True)
class Bound:
    """A single write whose key the journal binds to a request: answered from the
    binding (`command.replay(binding)` where the command has it), else `409`; nothing
    appended either way."""

    command: Command
    binding: RequestKey

    @property
    def key(self) -> str | None:
        return self.command.key

    def locks(self, ledger: Ledger) -> list[str]:
        return self.command.locks(ledger)

    def run(self, service: Any) -> Any:
        return answer_from_binding(self.command, self.binding)


def answer_from_binding(command: Command, binding: RequestKey) -> Any:
    """What `command` answers under a key bound to a request: `command.replay(binding)`
    where the command has it, else `409` naming what the key was used for."""
    replay = getattr(command, "replay", None)
    if replay is None:
        raise key_in_use(command.key, binding)
    return replay(binding)
