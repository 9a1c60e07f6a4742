"""Checkpoints are data: drop every saved checkpoint written in the old pickled format.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

Snapshots are caches of a fold, never truth, so dropping them loses nothing: the next
`gpu-credits replay` saves new ones in the documented format (projections/checkpoint.py).
Rows written before this revision can only be pickles, which the code no longer loads.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(sa.text("DELETE FROM snapshots"))


def downgrade() -> None:
    # Nothing to restore: the dropped rows were caches.
    pass
