"""Request keys: a request's idempotency key bound to the answer it got.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-04

A request that appends several events under one idempotency key (the service's
`POST /v1/events`) records nothing of the key in `events` when every event carries its
own id. A row here binds the key to a digest of the request and to the answer it got,
written in the same transaction as its events, so that after a restart the same request
is answered as it was and another request under the key is refused. The span of
positions the request named is kept too: erasing a record's private part drops the
bindings whose span holds it (their digest was made from the request, private fields and
all). Outside the hash chain: nothing in `events` changes, and every chain and anchor
stays valid.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "request_keys",
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("fingerprint", sa.Text(), nullable=False),
        sa.Column("answer", sa.Text(), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("recorded_at", sa.BigInteger(), nullable=False),
        sa.Column("first_position", sa.BigInteger(), nullable=True),
        sa.Column("last_position", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("key", name="pk_request_keys"),
    )


def downgrade() -> None:
    # Without the table a batch's key binds only in the memory of the process that
    # answered it, as before this revision; the events stay as they are.
    op.drop_table("request_keys")
