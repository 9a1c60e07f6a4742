"""The command line when the connection to PostgreSQL is lost mid-command."""

from __future__ import annotations

import re

import pytest
from contract.kit import cli_runner

from eventstore import Journal
from eventstore.testing import open_journal
from tests.service.db_proxy import APPEND, proxied

pytestmark = pytest.mark.postgres


@pytest.mark.parametrize("command", [
    ["grant", "acme", "5", "--at", "100"],
    ["consume", "acme", "5", "--at", "100"],
])
def test_a_command_whose_commit_answer_was_lost_can_be_retried_without_recording_twice(
    pg_fresh_url: str, command: list[str],
) -> None:
    open_journal(pg_fresh_url).close()
    with proxied(pg_fresh_url) as (proxy, url):
        run = cli_runner(url)
        proxy.lose_commit_after = APPEND
        lost = run(*command)
        assert proxy.cuts == 1 and lost.exit_code == 2
        (line,) = lost.stderr.splitlines()
        assert "may or may not have committed" in line
        # Without --id the command chose the event id itself: the error must name it, or
        # the retry it advises records the decision a second time.
        found = re.search(r"run it again with --id (\S+)", line)
        assert found is not None, line
        again = run(*command, "--id", found[1].rstrip(",;:"))
        assert again.exit_code == 0, again.stderr
    with Journal(pg_fresh_url) as journal:
        assert journal.head() == 1 and journal.verify() is None


@pytest.mark.parametrize("command", [["verify"], ["replay"], ["balance", "acme"]])
def test_a_read_whose_connection_is_lost_says_nothing_was_written(
    pg_fresh_url: str, command: list[str],
) -> None:
    run = cli_runner(pg_fresh_url)
    assert run("grant", "acme", "5", "--at", "100").exit_code == 0
    with proxied(pg_fresh_url) as (proxy, url):
        proxy.cut_on = b"FROM events"
        lost = cli_runner(url)(*command)
        assert proxy.cuts == 1 and lost.exit_code == 2
        (line,) = lost.stderr.splitlines()
        # Not "it may or may not have committed: retry with the same event ids": a read
        # commits nothing, and has no event ids.
        assert "while reading" in line and "nothing was written" in line, line
        assert cli_runner(url)(*command).exit_code == 0
