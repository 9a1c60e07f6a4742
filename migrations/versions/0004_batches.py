"""Batches: which positions were appended together.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01

A row names the first and last position of the events one transaction (or one append
outside a transaction) appended, when there were two or more: a replay places them on the
timeline together, as one step of knowledge, instead of one late event at a time.
Positions recorded before this revision are in no batch, so each stays a step of its
own: what replay did with them before, and nothing in `events` or the chain changes.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Written out here, not imported from eventstore.schema (see 0001).
_int64_key = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "batches",
        sa.Column("first_position", _int64_key, primary_key=True, autoincrement=False),
        sa.Column("last_position", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("first_position", name="pk_batches"),
        sa.CheckConstraint("last_position > first_position",
                           name="ck_batches_more_than_one"),
    )


def downgrade() -> None:
    # Without the table every position is a batch of its own again: replay reports
    # revisions event by event, and every state and digest stays the same.
    op.drop_table("batches")
