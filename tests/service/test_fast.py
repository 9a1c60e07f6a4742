"""The fast path of the hot routes answers exactly what the FastAPI routes answer: the
same requests, sent to a service with it and to one without it (each on its own journal,
with the same clock), get the same statuses, headers that matter and bodies, byte for
byte, and leave the same journal."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.service.conftest import TOKENS, Clock, bearer
from tools.service import create_app
from tools.service.auth import Token
from tools.service.fast import FastRoutes

Request = tuple[str, str, Any, dict[str, str]]


def _pair(tmp_path: Path, clock: Clock, tokens: list[Token]) -> Iterator[
        tuple[TestClient, TestClient]]:
    fast = create_app(f"sqlite:///{tmp_path / 'fast.db'}", clock=clock, tokens=tokens,
                      mount_web=False)
    slow = create_app(f"sqlite:///{tmp_path / 'slow.db'}", clock=clock, tokens=tokens,
                      mount_web=False, fast_routes=False)
    with TestClient(fast) as f, TestClient(slow) as s:
        yield f, s


@pytest.fixture
def pair(tmp_path: Path, clock: Clock) -> Iterator[tuple[TestClient, TestClient]]:
    yield from _pair(tmp_path, clock, [])


@pytest.fixture
def secured_pair(tmp_path: Path, clock: Clock) -> Iterator[tuple[TestClient, TestClient]]:
    yield from _pair(tmp_path, clock,
                     [Token(role, secret.encode()) for role, secret in TOKENS.items()])


def _send(client: TestClient, request: Request) -> Any:
    method, path, body, headers = request
    if isinstance(body, bytes):
        return client.request(method, path, content=body, headers=headers)
    if body is None:
        return client.request(method, path, headers=headers)
    return client.request(method, path, json=body, headers=headers)


def same(pair: tuple[TestClient, TestClient], *requests: Request) -> None:
    fast, slow = pair
    for request in requests:
        a, b = _send(fast, request), _send(slow, request)
        assert (a.status_code, _fresh_ids(a.content)) == (b.status_code,
                                                          _fresh_ids(b.content)), request
        for header in ("content-type", "www-authenticate", "allow"):
            assert a.headers.get(header) == b.headers.get(header), (request, header)
    journals = [c.get("/v1/journal", headers=bearer("auditor")).json()["events"]
                for c in pair]
    for events in journals:
        for event in events:
            event.pop("recorded_at")
    assert _fresh_ids(json.dumps(journals[0]).encode()) == _fresh_ids(
        json.dumps(journals[1]).encode())


def _fresh_ids(text: bytes) -> bytes:
    """Ids the service made up for requests without a key differ between services."""
    return re.sub(rb"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])", b"ID", text)


JSON = {"Content-Type": "application/json"}


def _open(account: str, amount: int = 100) -> list[Request]:
    return [("POST", f"/v1/accounts/{account}/grants", {"amount": amount, "time": 0},
             {"Idempotency-Key": f"grant-{account.encode().hex()}"})]


def test_usage_and_balance_answers_are_the_routes(pair: tuple[TestClient, TestClient]) -> None:
    same(pair, *_open("a"), *_open("équipe-ß"),
         ("POST", "/v1/accounts/a/usage", {"amount": 30}, {"Idempotency-Key": "u-1"}),
         ("POST", "/v1/accounts/a/usage", {"amount": 30}, {"Idempotency-Key": "u-1"}),
         ("POST", "/v1/accounts/a/usage", {"amount": 31}, {"Idempotency-Key": "u-1"}),
         ("POST", "/v1/accounts/a/usage", {"amount": 90, "pool": "h100", "memo": "ü",
                                           "user": "ana", "time": 5}, {}),
         ("POST", "/v1/accounts/%C3%A9quipe-%C3%9F/usage", {"amount": 1}, {}),
         ("GET", "/v1/accounts/a/balance", None, {}),
         ("GET", "/v1/accounts/%C3%A9quipe-%C3%9F/balance", None, {}),
         ("GET", "/v1/accounts/a/balance?at=3", None, {}))


@pytest.mark.parametrize("request_", [
    ("POST", "/v1/accounts/nobody/usage", {"amount": 1}, {}),
    ("POST", "/v1/accounts/a/usage", {"amount": 0}, {}),
    ("POST", "/v1/accounts/a/usage", {"amount": "5"}, {}),
    ("POST", "/v1/accounts/a/usage", {"amount": 5, "extra": 1}, {}),
    ("POST", "/v1/accounts/a/usage", b'{"amount": 5, "amount": 6}', JSON),
    ("POST", "/v1/accounts/a/usage", b'{"amount": NaN}', JSON),
    ("POST", "/v1/accounts/a/usage", b"not json", JSON),
    ("POST", "/v1/accounts/a/usage", b"", JSON),
    ("POST", "/v1/accounts/a/usage", b'{"amount": 5}', {"Content-Type": "text/plain"}),
    ("POST", "/v1/accounts/a/usage", b'{"amount": 5}', {}),
    ("POST", "/v1/accounts/a/usage", {"amount": 5, "time": 10**15}, {}),
    ("POST", "/v1/accounts/a/usage", {"amount": 5}, {"Idempotency-Key": " spaced "}),
    ("POST", "/v1/accounts/a/usage", {"amount": 5}, {"Idempotency-Key": "k" * 201}),
    ("POST", "/v1/accounts/a/usage", {"amount": 5}, {"Idempotency-Key": ""}),
    ("POST", "/v1/accounts/a/usage", {"amount": 10**9}, {}),
    ("GET", "/v1/accounts/nobody/balance", None, {}),
    ("GET", "/v1/accounts/a/balance/", None, {}),
    ("PUT", "/v1/accounts/a/usage", {"amount": 5}, {}),
], ids=lambda r: f"{r[0]} {r[1]} {r[2]!r:.40} {r[3]!r:.40}")
def test_refusals_are_the_routes(pair: tuple[TestClient, TestClient],
                                 request_: Request) -> None:
    same(pair, *_open("a"), request_)


@pytest.mark.parametrize("role", ["worker", "finance", "auditor", "nobody", None])
def test_tokens_are_checked_as_the_routes_check_them(
        secured_pair: tuple[TestClient, TestClient], role: str | None) -> None:
    headers = {} if role is None else (
        {"Authorization": "Bearer not-a-token-0123456789"} if role == "nobody"
        else bearer(role))
    same(secured_pair,
         ("POST", "/v1/accounts/a/grants", {"amount": 10, "time": 0}, bearer("finance")),
         ("POST", "/v1/accounts/a/usage", {"amount": 1}, headers),
         ("GET", "/v1/accounts/a/balance", None, headers),
         ("POST", "/v1/accounts/a/usage", {"amount": 1}, {"Authorization": "Basic x"}))


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.dictionaries(
    st.sampled_from(["amount", "pool", "time", "memo", "user", "other"]),
    st.one_of(st.integers(-5, 2**64), st.text(max_size=5), st.none(), st.booleans(),
              st.floats(allow_nan=False, allow_infinity=False)),
    max_size=4),
    key=st.one_of(st.none(), st.text(min_size=0, max_size=3)))
def test_any_usage_body_is_answered_as_the_route_answers_it(
        pair: tuple[TestClient, TestClient], body: dict[str, Any], key: str | None) -> None:
    headers = {} if key is None or not key.isascii() else {"Idempotency-Key": key}
    same(pair, *_open("a", 10**6), ("POST", "/v1/accounts/a/usage", body, headers))


def _routes_reached(fast: TestClient) -> list[str]:
    """The paths of the requests that go past the fast path to the FastAPI routes from
    now on, as they arrive."""
    reached: list[str] = []
    middleware: Any = fast.app
    while not isinstance(middleware, FastRoutes):
        middleware = middleware.middleware_stack if hasattr(
            middleware, "middleware_stack") and middleware.middleware_stack else middleware.app
    inner = middleware.app

    async def route(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope["path"])
        await inner(scope, receive, send)

    middleware.app = route
    return reached


def test_the_plain_case_never_reaches_the_routes(pair: tuple[TestClient, TestClient]) -> None:
    fast = pair[0]
    same(pair, *_open("a"))
    reached = _routes_reached(fast)
    assert fast.post("/v1/accounts/a/usage", json={"amount": 1},
                     headers={"Idempotency-Key": "plain"}).status_code == 201
    assert fast.get("/v1/accounts/a/balance").status_code == 200
    assert reached == []
    assert fast.post("/v1/accounts/a/usage", json={"amount": 0}).status_code == 422
    assert reached == ["/v1/accounts/a/usage"]


_GRANT = {"type": "grant", "account": "a", "amount": 50, "time": 1, "expiry": 90}
_USE = {"type": "consume", "account": "a", "amount": 70, "time": 3, "memo": "ü", "user": "ana"}


def test_event_batches_are_answered_as_the_route_answers_them(
        pair: tuple[TestClient, TestClient]) -> None:
    same(pair, *_open("a"),
         ("POST", "/v1/events", {"events": [_GRANT, _USE]}, {"Idempotency-Key": "b-1"}),
         ("POST", "/v1/events", {"events": [_GRANT, _USE]}, {"Idempotency-Key": "b-1"}),
         ("POST", "/v1/events", {"events": [_USE]}, {"Idempotency-Key": "b-1"}),
         ("POST", "/v1/events", {"events": [_USE, {**_GRANT, "id": "g-9"}]}, {}),
         ("POST", "/v1/events", {"events": [_USE, {**_GRANT, "id": "g-9"}]}, {}),
         # (A conflict on an event without personal fields: their seal is salted.)
         ("POST", "/v1/events", {"events": [{**_GRANT, "id": "g-9", "amount": 1}]}, {}),
         ("POST", "/v1/events", {"events": [
             {"type": "submit", "account": "a", "job": "j", "cost": 5, "priority": 1,
              "time": "1970-01-01T00:00:04Z"},
             {"type": "start", "job": "j", "time": 5},
             {"type": "complete", "job": "j", "success": False, "time": 6,
              "refund_fraction": 0.5},
             {"type": "void", "grant": "grant-61", "time": 7, "reason": "r"}]},
          {"Idempotency-Key": "jobs"}),
         # Late: before events already recorded, it revises them.
         ("POST", "/v1/events", {"events": [{**_USE, "time": 0, "amount": 500}]}, {}),
         ("GET", "/v1/accounts/a/balance", None, {}))


@pytest.mark.parametrize("body", [
    {"events": []},
    {"events": [{"type": "grant", "account": "a", "amount": 0, "time": 1}]},
    {"events": [_GRANT, {"type": "nope"}, {"type": "consume", "time": 2}]},
    {"events": [_GRANT, {**_GRANT, "amount": 51}]},
    {"events": [{**_GRANT, "time": 10**15}]},
    {"events": [{"type": "void", "grant": "missing", "time": 2}]},
    {"events": [_GRANT], "more": 1},
    {"events": _GRANT},
    b'{"events": [{"type": "grant", "type": "consume"}]}',
    b'{"events": [NaN]}',
    b"[]",
    b"",
], ids=lambda b: f"{b!r:.60}")
def test_event_batch_refusals_are_the_routes(pair: tuple[TestClient, TestClient],
                                             body: Any) -> None:
    same(pair, *_open("a"), ("POST", "/v1/events", body, JSON if isinstance(body, bytes)
                             else {}))


@pytest.mark.parametrize("role", ["worker", "finance", "nobody", None])
def test_event_batch_tokens_are_checked_as_the_route_checks_them(
        secured_pair: tuple[TestClient, TestClient], role: str | None) -> None:
    headers = {} if role is None else (
        {"Authorization": "Bearer not-a-token-0123456789"} if role == "nobody"
        else bearer(role))
    same(secured_pair, ("POST", "/v1/events", {"events": [_GRANT]}, headers),
         ("POST", "/v1/events", {"events": [_GRANT]},
          {**bearer("finance"), "Content-Type": "text/plain"}))


def test_a_plain_event_batch_never_reaches_the_route(
        pair: tuple[TestClient, TestClient]) -> None:
    fast = pair[0]
    reached = _routes_reached(fast)
    assert fast.post("/v1/events", json={"events": [_GRANT]}).status_code == 200
    assert reached == []
    assert fast.post("/v1/events", content=b'{"events": 1}', headers=JSON).status_code == 422
    assert reached == ["/v1/events"]


_TEXT = st.text(st.characters(codec="utf-8"), max_size=20)
_INTS = st.integers(min_value=-(2**70), max_value=2**70)
_VALUES = st.one_of(_TEXT, _INTS, st.booleans(), st.none(), st.floats(allow_nan=False))


def _encoded(encode: Any, answer: dict[str, Any]) -> bytes | str:
    try:
        return bytes(encode(answer))
    except Exception as exc:  # the same refusal, whichever way it was made
        return type(exc).__name__


@settings(max_examples=150, deadline=None)
@given(st.fixed_dictionaries(
    {"id": _TEXT, "debt": _INTS, "account": _TEXT, "amount": _INTS, "pool": _TEXT,
     "time": _INTS, "position": _INTS}), st.dictionaries(
    st.sampled_from(["id", "debt", "pool", "position", "extra"]), _VALUES, max_size=2),
    st.sets(st.sampled_from(["id", "amount", "time"]), max_size=1), st.randoms())
def test_usage_answers_encode_as_the_model_encodes_them(
        answer: dict[str, Any], changed: dict[str, Any], dropped: set[str],
        random: Any) -> None:
    """The usage answer's encoding without the model gives the model's bytes for any
    answer (keys in any order, odd values, big ints, any text), or its refusal."""
    from tools.service.fast import _USAGE_ANSWER, _json, _usage_json

    answer = {**answer, **changed}
    for name in dropped:
        answer.pop(name, None)
    items = list(answer.items())
    random.shuffle(items)
    shuffled = dict(items)
    assert _encoded(_usage_json, shuffled) == _encoded(
        lambda a: _json(_USAGE_ANSWER, a), shuffled)


@settings(max_examples=100, deadline=None)
@given(st.fixed_dictionaries({"appended": _VALUES, "already_present": _INTS,
                              "positions": st.lists(st.one_of(_INTS, _VALUES), max_size=5)}),
       st.dictionaries(st.sampled_from(["positions", "extra"]), _VALUES, max_size=1))
def test_event_answers_encode_as_the_model_encodes_them(
        answer: dict[str, Any], changed: dict[str, Any]) -> None:
    """The same for the answer to a batch of events."""
    from tools.service.fast import _EVENTS_ANSWER, _events_json, _json

    answer = {**answer, **changed}
    assert _encoded(_events_json, answer) == _encoded(
        lambda a: _json(_EVENTS_ANSWER, a), answer)


_MEMBER = st.sampled_from(["type", "account", "amount", "time", "id", "a:b", "é"])
_LEAF = st.one_of(_TEXT, _INTS, st.booleans(), st.none(), st.floats(allow_nan=False))
_EVENT = st.lists(st.tuples(_MEMBER, st.recursive(
    _LEAF, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_MEMBER, inner,
                                                                      max_size=3),
    max_leaves=4)), max_size=5)


def _object(members: list[tuple[str, Any]]) -> str:
    """A JSON object with these members in this order, a repeated key repeated."""
    return "{" + ",".join(f"{json.dumps(k)}:{json.dumps(v)}" for k, v in members) + "}"


@settings(max_examples=150, deadline=None)
@given(st.lists(_EVENT, max_size=4), st.sampled_from(["events", "event", "a:b"]),
       st.sampled_from(["", " ", "\n"]))
def test_a_batch_body_is_read_as_the_strict_reader_and_the_model_read_it(
        events: list[list[tuple[str, Any]]], name: str, space: str) -> None:
    """The quick read of a batch's body gives what `loads_strict` and `EventsBody` give,
    or nothing (then those read it): repeated keys, colons inside strings, floats, ints
    past 64 bits, nested values, an empty or misnamed list."""
    from projections.validation import loads_strict
    from tools.service.fast import _plain_events
    from tools.service.models import EventsBody

    text = f'{space}{{"{name}":{space}[{",".join(_object(e) for e in events)}]}}{space}'
    quick = _plain_events(text.encode())
    if quick is None:
        return
    assert quick == EventsBody.model_validate(loads_strict(text)).events


def test_a_repeated_key_or_a_wide_int_is_left_to_the_strict_reader() -> None:
    from tools.service.fast import _plain_events

    assert _plain_events(b'{"events":[{"type":"grant","type":"consume"}]}') is None
    assert _plain_events(b'{"events":[{"amount":123456789012345678901}]}') is None
    assert _plain_events(b'{"events":[{"time":"1970-01-01T00:00:04Z"}]}') is None
    assert _plain_events(b'{"events":[{"type":"grant","amount":5}]}') == [
        {"type": "grant", "amount": 5}]
