"""Times in the service's bodies and query strings: the limits every time has."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tools.service.times import parse_event_time


@pytest.mark.parametrize("value", [2**53, -(2**53), "9007199254740992", 2**63])
def test_a_time_beyond_the_limit_of_every_time_is_refused(value: object) -> None:
    with pytest.raises(ValueError, match="9007199254740991"):
        parse_event_time(value)


def test_a_query_time_beyond_the_limit_is_422(client: TestClient) -> None:
    assert client.post("/v1/accounts", json={"account": "a"}).status_code == 201
    for at in (2**53 - 1, -(2**53 - 1)):
        assert client.get("/v1/accounts/a/balance", params={"at": at}).status_code == 200
    for at in (2**53, 2**63 - 1):
        refused = client.get("/v1/accounts/a/balance", params={"at": at})
        assert refused.status_code == 422, refused.text
        assert "9007199254740991" in refused.json()["detail"]


@pytest.mark.parametrize("as_known_at", ["2999-01-01T00:00:00", "2999-01-01"])
def test_an_as_known_at_time_without_an_offset_is_422(client: TestClient,
                                                      as_known_at: str) -> None:
    """As every other time of the service: a server has no local time a client could mean,
    so a recorded-at time without its offset is refused rather than taken as UTC."""
    assert client.post("/v1/accounts", json={"account": "a"}).status_code == 201
    for path in ("/v1/accounts/a/balance", "/v1/accounts/a/statement"):
        assert client.get(path, params={"as_known_at": "2999-01-01T00:00:00Z"}
                          ).status_code == 200
        refused = client.get(path, params={"as_known_at": as_known_at})
        assert refused.status_code == 422, refused.text
        assert refused.headers["content-type"].startswith("application/problem+json")
        assert "offset" in refused.json()["detail"]
