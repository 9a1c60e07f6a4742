"""The service's answers for an account with a refill are a plain fold's: live decisions
(the debt a usage report leaves, whether a job is accepted) and balances at the latest
event time, as the service's clock moves on between events, late events arrive and the
refill is turned on, changed or off; and again from a service restarted on a checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore import Journal
from projections.figures import Figures
from projections.replay import fold_canonical, replay
from tests.replay.test_known_at_differential import _reported_in
from tools.service import create_app

STEPS = st.tuples(
    st.sampled_from(["open", "usage", "usage", "grant", "job", "start", "complete", "late"]),
    st.integers(0, 30), st.integers(1, 12), st.sampled_from([None, "h100"]), st.booleans())


def _assert_balances_are_the_folds(client: TestClient, url: str) -> None:
    journal = Journal(url)
    folded = fold_canonical(journal)
    if "a" not in folded.accounts:
        return
    latest = journal.max_time()
    for at in (None, *range(0, latest + 5, 4)):
        got = client.get("/v1/accounts/a/balance", params={} if at is None else {"at": at})
        when = latest if at is None else at
        want = Figures.of(fold_canonical(journal, to_time=when).accounts.get("a"), when)
        answer = got.json()
        assert (answer["balance"], answer["reserved"], answer["pools"]) == (
            want.balance, want.reserved, want.pools), (at, answer, want)


@settings(max_examples=12, deadline=None)
@given(steps=st.lists(STEPS, min_size=1, max_size=14))
def test_refill_answers_of_the_service_are_the_folds(tmp_path_factory: Any,
                                                     steps: list[Any]) -> None:
    url = f"sqlite:///{Path(tmp_path_factory.mktemp('refill')) / 'service.db'}"
    now = [0]
    jobs: list[str] = []
    with TestClient(create_app(url, clock=lambda: now[0], mount_web=False)) as client:
        for i, (kind, gap, amount, pool, flag) in enumerate(steps):
            now[0] += gap
            if kind in ("open", "late"):
                event = {"type": "account", "account": "a", "time": now[0]} | (
                    {"refill_rate": 900 * amount, "refill_cap": amount} if flag else {})
                if kind == "late":
                    event = {"type": "consume", "account": "a", "amount": amount,
                             "time": max(0, now[0] - 20)}
                assert client.post("/v1/events", json={"events": [event]}).status_code == 200
            elif kind == "usage":
                got = client.post("/v1/accounts/a/usage",
                                  json={"amount": amount} | ({"pool": pool} if pool else {}))
                if got.status_code == 201:
                    journal = Journal(url)
                    assert got.json()["debt"] == \
                        _reported_in(journal)[journal.head()]["debt_after"]
            elif kind == "grant":
                client.post("/v1/accounts/a/grants", json={"amount": amount})
            elif kind == "job":
                got = client.post("/v1/jobs", json={"job": f"j{i}", "account": "a",
                                                    "cost": amount, "priority": 1})
                if got.status_code == 201:
                    jobs.append(f"j{i}")
                    journal = Journal(url)
                    assert got.json()["accepted"] == \
                        _reported_in(journal)[journal.head()]["ok"]
            elif kind == "start":
                client.post("/v1/jobs/start-next", json={})
            elif kind == "complete" and jobs:
                client.post(f"/v1/jobs/{jobs.pop(0)}/complete",
                            json={"success": flag, "refund_fraction": 0.5})
            got = client.get("/v1/accounts/a/balance")
            if got.status_code == 200:
                journal = Journal(url)
                latest = journal.max_time()
                want = Figures.of(fold_canonical(journal).accounts.get("a"), latest)
                answer = got.json()
                assert (answer["balance"], answer["reserved"], answer["pools"]) == (
                    want.balance, want.reserved, want.pools), (answer, want)
        _assert_balances_are_the_folds(client, url)
    replay(Journal(url), checkpoint=True, checkpoint_every=3)
    with TestClient(create_app(url, clock=lambda: now[0], mount_web=False)) as client:
        _assert_balances_are_the_folds(client, url)
