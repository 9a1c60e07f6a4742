"""Times in the service's bodies and query strings: the limits every time has."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tools.service.times import parse_event_time, parse_query_time


@pytest.mark.parametrize("value", [2**53, -(2**53), 2**63])
def test_a_time_beyond_the_limit_of_every_time_is_refused(value: int) -> None:
    with pytest.raises(ValueError, match="9007199254740991"):
        parse_event_time(value)
    with pytest.raises(ValueError, match="9007199254740991"):
        parse_query_time(str(value))


@pytest.mark.parametrize("time", ["00017", " 5", "5 ", "-0", "1793577600"])
def test_digits_in_a_string_are_no_time_in_a_body(client: TestClient, time: str) -> None:
    """A body's time is a JSON integer or ISO 8601 text with its offset, as the contract
    says: digits in a string are neither (a query string's `at=17` is text, and fine)."""
    assert client.post("/v1/accounts", json={"account": "a"}).status_code == 201
    head = client.get("/v1/journal/head").json()["position"]
    for path, body in (("/v1/accounts/a/usage", {"amount": 1, "time": time}),
                       ("/v1/events", {"events": [{"type": "consume", "account": "a",
                                                   "amount": 1, "time": time}]})):
        refused = client.post(path, json=body)
        assert refused.status_code == 422, refused.text
        assert repr(time) in refused.json()["detail"]
    assert client.get("/v1/journal/head").json()["position"] == head
    assert client.get("/v1/accounts/a/balance", params={"at": "17"}).status_code == 200


def test_a_date_without_an_offset_is_told_the_spelling_that_is_taken(
        client: TestClient) -> None:
    assert client.post("/v1/accounts", json={"account": "a"}).status_code == 201
    for name in ("at", "as_known_at"):
        told = client.get("/v1/accounts/a/balance", params={name: "2099-12-05"})
        assert told.status_code == 422 and "2099-12-05T00:00:00Z" in told.json()["detail"]
        taken = client.get("/v1/accounts/a/balance", params={name: "2099-12-05T00:00:00Z"})
        assert taken.status_code in (200, 422), taken.text  # past the head is 422
        assert "no offset" not in taken.text and "not an ISO" not in taken.text


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


def test_a_query_time_whose_offset_plus_was_not_percent_encoded_is_read_as_written(
        client: TestClient) -> None:
    """`?at=...T01:00:00+01:00` typed as is: form decoding turns the `+` into a space;
    the time is still the one the client wrote, in every query time."""
    assert client.post("/v1/accounts/a/grants",
                       json={"amount": 5, "time": 100, "expiry": 3600}).status_code == 201
    base = "/v1/accounts/a"
    plain = client.get(f"{base}/balance?at=1970-01-01T01:59:59+01:00")
    assert plain.status_code == 200, plain.text
    assert plain.json() == client.get(f"{base}/balance", params={"at": 3599}).json()
    assert plain.json()["balance"] == 5
    assert client.get(f"{base}/balance?at=1970-01-01T02:00:00+01:00").json()["balance"] == 0
    statement = client.get(f"{base}/statement?from=1970-01-01T01:00:00+01:00"
                           "&to=1970-01-01T01:30:00%2B01:00")
    assert statement.status_code == 200, statement.text
    assert (statement.json()["from"], statement.json()["to"]) == (0, 1800)
    known = client.get(f"{base}/balance?as_known_at=2999-01-01T00:00:00+00:00")
    assert known.status_code == 200, known.text
    assert client.get(f"{base}/balance?at=1970-01-01T00:00:00 01:00:00").status_code == 422
