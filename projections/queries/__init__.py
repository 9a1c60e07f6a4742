"""The questions people ask of a journal, answered by folding it: read-only, no appends.

One module per question:

- `balance`: an account's figures at an event time, as known at a position; every
  account's figures.
- `statement`: every change to an account with a running balance, expiries included.
- `explain`: which grants paid what (lineage), what expired unused, why a job was
  rejected or has not started.
- `revisions`: what late events changed, with the times of both events.
- `audit`: journal-wide totals for a summary.
- `reports`: every account's figures, credits expiring soon, the job list.
- `reconcile`: an external charges file compared with the ledger.
- `imported`: what an import did beyond appending (late events, revisions, anomalies).
- `whatif`: the same journal folded under another policy, and what differs.
- `common`: the latest time, `--as-known-at` positions, errors for unknown names;
  `walk`: one account followed through a fold (shared by statement and explain).
- `effects`: what an event did to an account, as values; `answers`: `to_dict`, the one
  way an answer becomes JSON.

Every answer is a fold of the journal in canonical order `(event_time, position)`, so it
is the same on every backend and after every replay. Every answer is a dataclass of
values (figures, lineage, codes): `to_dict(answer)` is its JSON-ready form, integers for
times and amounts; the sentences people read are made from those values by the caller
(`tools.wording`). Unknown names raise `UnknownAccount` / `UnknownJob` with the names
that would be valid.
"""

from projections.figures import Figures
from projections.queries.answers import Words, to_dict
from projections.queries.audit import Audit, audit
from projections.queries.balance import BalanceReport, account_figures, balance
from projections.queries.common import (
    NothingRecorded,
    fold_as_known,
    json_time,
    known_position,
    latest_time,
    recorded_position,
    recorded_text,
    unknown_account,
)
from projections.queries.effects import Effect
from projections.queries.explain import (
    AccountExplanation,
    GrantLineage,
    JobEvent,
    JobExplanation,
    Rejection,
    Spend,
    Use,
    Waiting,
    explain_account,
    explain_job,
    waiting_reason,
)
from projections.queries.imported import ImportEffects, import_effects
from projections.queries.reconcile import (
    FileCharge,
    Finding,
    Note,
    ReconcileFileError,
    Reconciliation,
    parse_charges,
    reconcile,
)
from projections.queries.reports import (
    DEFAULT_WITHIN,
    AccountRow,
    AccountsReport,
    ExpiringCredits,
    ExpiringReport,
    JobRow,
    JobsReport,
    accounts,
    check_state,
    expiring,
    jobs,
    parse_duration,
)
from projections.queries.revisions import RevisionRow, revision_rows
from projections.queries.statement import (
    Mismatch,
    Statement,
    StatementLine,
    Subtotals,
    statement,
)
from projections.queries.whatif import AccountChange, JobChange, WhatIf, whatif

__all__ = [
    "DEFAULT_WITHIN",
    "AccountChange",
    "AccountExplanation",
    "AccountRow",
    "AccountsReport",
    "Audit",
    "BalanceReport",
    "Effect",
    "ExpiringCredits",
    "ExpiringReport",
    "Figures",
    "FileCharge",
    "Finding",
    "GrantLineage",
    "ImportEffects",
    "JobChange",
    "JobEvent",
    "JobExplanation",
    "JobRow",
    "JobsReport",
    "Mismatch",
    "Note",
    "NothingRecorded",
    "ReconcileFileError",
    "Reconciliation",
    "Rejection",
    "RevisionRow",
    "Spend",
    "Statement",
    "StatementLine",
    "Subtotals",
    "Use",
    "Waiting",
    "WhatIf",
    "Words",
    "account_figures",
    "accounts",
    "audit",
    "balance",
    "check_state",
    "expiring",
    "explain_account",
    "explain_job",
    "fold_as_known",
    "import_effects",
    "jobs",
    "json_time",
    "known_position",
    "latest_time",
    "parse_charges",
    "parse_duration",
    "reconcile",
    "recorded_position",
    "recorded_text",
    "revision_rows",
    "statement",
    "to_dict",
    "unknown_account",
    "waiting_reason",
    "whatif",
]
