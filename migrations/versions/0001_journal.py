"""The journal: events, journal_head, snapshots.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Written out here, not imported from eventstore.schema: a migration must keep
# meaning what it meant when it was written, whatever the models become.
_int64_key = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("position", _int64_key, primary_key=True, autoincrement=False),
        sa.Column("event_id", sa.Text(), nullable=False),
        sa.Column("stream", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("event_time", sa.BigInteger(), nullable=False),
        sa.Column("recorded_at", sa.BigInteger(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("hash", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("position", name="pk_events"),
        sa.UniqueConstraint("event_id", name="uq_events_event_id"),
        sa.UniqueConstraint("stream", "version", name="uq_events_stream_version"),
    )
    op.create_index("ix_events_event_time_position", "events", ["event_time", "position"])

    head = op.create_table(
        "journal_head",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("hash", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_journal_head"),
        sa.CheckConstraint("id = 1", name="ck_journal_head_one_row"),
    )
    # The head of an empty journal: position 0, the genesis hash.
    op.bulk_insert(head, [{"id": 1, "position": 0, "hash": "0" * 64}])

    op.create_table(
        "snapshots",
        sa.Column("id", _int64_key, primary_key=True, autoincrement=True),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("event_time", sa.BigInteger(), nullable=False),
        sa.Column("digest", sa.Text(), nullable=False),
        sa.Column("state", sa.LargeBinary(), nullable=False),
        sa.Column("recorded_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_snapshots"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_snapshots_name_event_time", "snapshots", ["name", "event_time"])


def downgrade() -> None:
    op.drop_index("ix_snapshots_name_event_time", table_name="snapshots")
    op.drop_table("snapshots")
    op.drop_table("journal_head")
    op.drop_index("ix_events_event_time_position", table_name="events")
    op.drop_table("events")
