"""A policy the fold can run under instead of the one the journal's events carry.

The journal records what happened; a `Policy` changes only the rules the fold applies to
it, so `whatif` can ask what the same events would have given under other rules. With
no policy (or the default one) the fold is exactly the recorded one.

- `grant_order`: "priority" (the default: lower grant priority first, then earliest
  expiry) or "expiry" (every grant at the default priority: earliest expiry first).
- `refund_fraction`: for every failed job, instead of the fraction its completion carries.
- `max_running`: per account, a cap on running jobs instead of the one its account event set.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from projections.events import DEFAULT_GRANT_PRIORITY, require_fraction, require_positive_int
from projections.validation import require_name, show

GRANT_ORDERS = ("priority", "expiry")
POLICY_KEYS = ("grant_order", "refund_fraction", "max_running")


@dataclass(frozen=True, slots=True)
class Policy:
    """Rules for the fold; None everywhere means the journal's own."""

    grant_order: str = "priority"
    refund_fraction: float | None = None
    max_running: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Validation lives with the value: a policy made in Python is held to what a
        # policy file is, so whatif never folds under a refund of 2 or a cap of 0.
        if self.grant_order not in GRANT_ORDERS:
            raise ValueError(f"grant_order must be one of {', '.join(GRANT_ORDERS)}, "
                             f"got {self.grant_order!r}")
        if self.refund_fraction is not None:
            object.__setattr__(self, "refund_fraction",
                               require_fraction("refund_fraction", self.refund_fraction))
        caps = self.max_running
        if not isinstance(caps, Mapping):
            raise ValueError("max_running must be an object of account to cap, got "
                             f"{show(caps)}")
        for account, cap in caps.items():
            # A name no account can have (empty, a control character) is no typo to warn
            # about but a policy that could never apply.
            require_name("an account of max_running", account)
            require_positive_int(f"max_running[{account!r}]", cap)
        object.__setattr__(self, "max_running", dict(caps))  # the caller's may change

    def grant_priority(self, priority: int) -> int:
        """The priority a grant is drawn with."""
        return DEFAULT_GRANT_PRIORITY if self.grant_order == "expiry" else priority

    def refund(self, recorded: float) -> float:
        """The refund fraction of a failed job whose completion carries `recorded`."""
        return recorded if self.refund_fraction is None else self.refund_fraction

    def cap(self, account: str, recorded: int | None) -> int | None:
        """An account's cap on running jobs."""
        return self.max_running.get(account, recorded)

    @property
    def caps(self) -> dict[str, int]:
        """The caps on running jobs, by account name."""
        return dict(sorted(self.max_running.items()))

    # As its JSON file would spell it, every key (`projections.queries.answers.to_dict`).
    json_keys: ClassVar[tuple[str, ...]] = ("grant_order", "refund_fraction",
                                            "max_running=caps")

    @classmethod
    def from_json(cls, data: object) -> Policy:
        """A policy from a parsed JSON object; ValueError naming what is wrong and what
        would be valid."""
        if not isinstance(data, dict):
            raise ValueError(f"a policy is a JSON object with the keys "
                             f"{', '.join(POLICY_KEYS)} (all optional), got "
                             f"{type(data).__name__}")
        unknown = sorted(set(data) - set(POLICY_KEYS))
        if unknown:
            raise ValueError(f"unknown policy key(s) {', '.join(map(repr, unknown))}; "
                             f"expected {', '.join(POLICY_KEYS)}")
        # A key given as null is the key left out, as `import` reads an optional field.
        order = data.get("grant_order")
        caps = data.get("max_running")
        # The checks are the constructor's (`__post_init__`).
        return cls("priority" if order is None else order, data.get("refund_fraction"),
                   {} if caps is None else caps)
