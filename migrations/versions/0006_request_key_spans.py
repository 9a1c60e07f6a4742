"""Request keys get their span on journals whose revision 0005 was written without it.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-05

Revision 0005 first created `request_keys` without `first_position` and `last_position`;
the columns were added to it a release later, so a journal upgraded to 0005 by that
earlier release has the table without them, and Alembic, finding it at 0005, never
changes it again: every later read or write of a binding failed there. This revision adds
the two columns where they are missing and changes nothing where they are there.

The rows such a journal holds were bound without their span, which is not recorded
anywhere else the journal can read (the positions live in the caller's answer). Each gets
the widest span it can have, 1 to the binding's `position` (the head when it was bound:
every position the request named is at or before it): erasing a record there drops the
binding, as it must when the request named that record. A binding dropped although its
request did not name the record costs only the replayed answer: a retry of that request
is then answered from the journal (its events already present), never appended twice.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


_SPAN = "UPDATE request_keys SET first_position = 1, last_position = position"

# PostgreSQL decides in the database, so the same statement serves a live upgrade and
# the SQL script `alembic upgrade --sql` writes for a DBA to run later.
_POSTGRESQL = f"""
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM information_schema.columns
                   WHERE table_schema = current_schema() AND table_name = 'request_keys'
                     AND column_name = 'first_position') THEN
        ALTER TABLE request_keys ADD COLUMN first_position BIGINT,
                                 ADD COLUMN last_position BIGINT;
        {_SPAN};
    END IF;
END $$
"""


def upgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute(sa.text(_POSTGRESQL))
        return
    if op.get_context().as_sql:
        if context.get_starting_revision_argument() in (None, "0001", "0002", "0003", "0004"):
            return  # this script runs 0005 too, which creates the columns
        raise RuntimeError(
            "revision 0006 cannot be written as a SQL script for "
            f"{op.get_context().dialect.name}: whether it changes request_keys depends on "
            "the columns the table has; upgrade the database itself (gpu-credits db upgrade)")
    columns = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("request_keys")}
    if {"first_position", "last_position"} <= columns:
        return
    # Written out here, not imported from eventstore.schema (see 0001).
    op.add_column("request_keys", sa.Column("first_position", sa.BigInteger(), nullable=True))
    op.add_column("request_keys", sa.Column("last_position", sa.BigInteger(), nullable=True))
    op.execute(sa.text(_SPAN))


def downgrade() -> None:
    # 0005 as it stands creates the columns: a journal downgraded to it keeps them.
    pass
