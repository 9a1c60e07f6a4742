"""Alembic environment and versions: the only way the journal's schema changes.

`eventstore.migrate` runs them programmatically (no alembic.ini needed, works from
an installed package). For Alembic's own command line, `migrations/alembic.ini`
points here: `alembic -c migrations/alembic.ini -x url=sqlite:///x.db upgrade head`.
"""
