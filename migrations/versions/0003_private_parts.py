"""Private parts: fields kept beside the chain so they can be erased.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01

A record with a private part (a user, a memo) carries only the part's salted hash (its
seal) in its payload; the part itself and its salt live in `private_parts`, keyed by the
record's position, and erasing deletes that row. Records written before this revision
have no private part and keep exactly their bytes and hashes: nothing in `events`
changes, so every existing chain, and every anchor taken of it, stays valid.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Written out here, not imported from eventstore.schema (see 0001).
_int64_key = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "private_parts",
        sa.Column("position", _int64_key, primary_key=True, autoincrement=False),
        sa.Column("salt", sa.Text(), nullable=False),
        sa.Column("data", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("position", name="pk_private_parts"),
    )


def downgrade() -> None:
    # Dropping the table would drop every private part not yet erased, while the records
    # keep their seals: verify would then report them deleted outside the journal.
    op.drop_table("private_parts")
