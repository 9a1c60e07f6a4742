"""The questions people ask of a journal, answered by folding it: read-only, no appends.

One module per question:

- `balance`: an account's figures at an event time, as known at a position; every
  account's figures.
- `statement`: every change to an account with a running balance, expiries included.
- `explain`: which grants paid what (lineage), what expired unused, why a job was
  rejected or has not started.
- `revisions`: what late events changed, with the times of both events.
- `audit`: journal-wide totals for a summary.
- `common`: the latest time, `--as-known-at` positions, errors for unknown names;
  `walk`: one account followed through a fold (shared by statement and explain).

Every answer is a fold of the journal in canonical order `(event_time, position)`, so it
is the same on every backend and after every replay. Every answer is a dataclass with
`as_dict()`: the JSON-ready form, integers for times and amounts. Unknown names raise
`UnknownAccount` / `UnknownJob` with the names that would be valid.
"""

from projections.figures import Figures
from projections.queries.audit import Audit, audit
from projections.queries.balance import BalanceReport, account_figures, balance
from projections.queries.common import (
    describe_lineage,
    known_position,
    latest_time,
    unknown_account,
)
from projections.queries.explain import (
    AccountExplanation,
    GrantLineage,
    JobEvent,
    JobExplanation,
    Rejection,
    Spend,
    Use,
    explain_account,
    explain_job,
)
from projections.queries.revisions import RevisionRow, describe_reported, revision_rows
from projections.queries.statement import Statement, StatementLine, statement

__all__ = [
    "AccountExplanation",
    "Audit",
    "BalanceReport",
    "Figures",
    "GrantLineage",
    "JobEvent",
    "JobExplanation",
    "Rejection",
    "RevisionRow",
    "Spend",
    "Statement",
    "StatementLine",
    "Use",
    "account_figures",
    "audit",
    "balance",
    "describe_lineage",
    "describe_reported",
    "explain_account",
    "explain_job",
    "known_position",
    "latest_time",
    "revision_rows",
    "statement",
    "unknown_account",
]
