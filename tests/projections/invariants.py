"""The ledger's invariants as an assertion for property tests.

The rules themselves live in the product (`projections.invariants`), where `verify` and
the simulator run them too; this module only turns their findings into a test failure.
"""

from __future__ import annotations

from projections.invariants import violations
from projections.ledger import Ledger


def assert_invariants(ledger: Ledger, *, scheduler_only: bool = False) -> None:
    """Fail with every violation `ledger` has.

    `scheduler_only=True` adds `balance >= reserved` for every opened account, which holds
    when its credits are spent only through jobs (a tracker `consume` may create debt while
    credits are held for jobs, and then `balance < reserved`).
    """
    found = violations(ledger, strict_reserve=scheduler_only)
    assert not found, "invariants broken:\n" + "\n".join(str(v) for v in found)
