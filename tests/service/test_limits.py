"""What a request may send: bodies bounded per request, before anything reads them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.service.conftest import TOKENS, Clock, bearer
from tools.service import create_app
from tools.service.auth import Token
from tools.service.strict_body import MAX_BODY, MAX_SMALL_BODY


@pytest.fixture
def web(db_url: str, clock: Clock) -> Iterator[TestClient]:
    """A service with tokens and the web view."""
    tokens = [Token(role, secret.encode()) for role, secret in TOKENS.items()]
    with TestClient(create_app(db_url, clock=clock, tokens=tokens)) as c:
        yield c


def _too_large(answer: Any, limit: int) -> None:
    assert answer.status_code == 413, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.headers["connection"] == "close"
    body = answer.json()
    assert set(body) == {"type", "title", "status", "detail"}
    assert body["type"].endswith("/too-large") and body["status"] == 413
    assert f"larger than {limit} bytes" in body["detail"]


def _json_of(size: int) -> bytes:
    """A JSON object of exactly `size` bytes that the strict parser refuses (a repeated
    key): a refusal that is not 413 would mean it was read."""
    head = b'{"a": 1, "a": "'
    return head + b"x" * (size - len(head) - 2) + b'"}'


# Every request but a batch of events takes at most 64 KiB, whoever sends it, whatever
# its content type: a route's body, a web form, a path no route answers, a GET. (Who
# may call a route, a page of the web view too, is decided before: 401, 403.)
SMALL = [("POST", "/v1/accounts", "finance"), ("POST", "/v1/accounts/a/usage", "worker"),
         ("POST", "/v1/jobs/start-next", "worker"), ("POST", "/v1/journal/verify", "auditor"),
         ("GET", "/v1/accounts", "auditor"), ("POST", "/journal/verify", "auditor"),
         ("POST", "/no-such-path", None), ("POST", "/healthz", None)]


@pytest.mark.parametrize(("method", "path", "role"), SMALL)
@pytest.mark.parametrize("content_type", ["application/json", "text/plain", None])
def test_a_body_over_64_kib_is_413_before_it_is_read(
        web: TestClient, method: str, path: str, role: str | None,
        content_type: str | None) -> None:
    headers = {**(bearer(role) if role else {}),
               **({"Content-Type": content_type} if content_type else {})}
    _too_large(web.request(method, path, content=_json_of(MAX_SMALL_BODY + 1),
                           headers=headers), MAX_SMALL_BODY)
    if content_type == "application/json":  # at the limit it is read, and refused
        answer = web.request(method, path, content=_json_of(MAX_SMALL_BODY), headers=headers)
        assert answer.status_code != 413


def test_a_chunked_body_is_read_only_up_to_its_limit(web: TestClient) -> None:
    sent = []

    def chunks() -> Iterator[bytes]:
        for _ in range(1000):  # 64 MiB offered, 64 KiB of it needed to refuse
            sent.append(1)
            yield b" " * (64 * 1024)

    answer = web.post("/v1/accounts/a/usage", content=chunks(),
                      headers={**bearer("worker"), "Content-Type": "application/json"})
    _too_large(answer, MAX_SMALL_BODY)
    small = web.post("/v1/accounts", content=iter([b'{"account": ', b'"a", "time": 1}']),
                     headers={**bearer("finance"), "Content-Type": "application/json"})
    assert small.status_code == 201, small.text


def test_a_batch_of_events_over_32_mib_is_413_whatever_its_content_type(
        web: TestClient) -> None:
    for content_type in ("text/plain", "application/json"):
        answer = web.post("/v1/events", content=b" " * (MAX_BODY + 1),
                          headers={**bearer("finance"), "Content-Type": content_type})
        _too_large(answer, MAX_BODY)
        assert "32 MiB" in answer.json()["detail"]
    fits = web.post("/v1/events", content=_json_of(MAX_SMALL_BODY + 1),
                    headers={**bearer("finance"), "Content-Type": "application/json"})
    assert fits.status_code == 422 and "more than once" in fits.text


def test_who_may_call_is_still_decided_before_the_size(web: TestClient) -> None:
    big = _json_of(MAX_SMALL_BODY + 1)
    assert web.post("/v1/accounts", content=big).status_code == 401
    assert web.post("/v1/accounts", content=big, headers=bearer("worker")).status_code == 403


def test_too_many_events_are_counted_without_parsing_the_batch_again(
        web: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over 1 MiB a batch is read strictly on a thread; the route's own read (FastAPI's
    JSON, in the event loop) and the fast path's strict read in the loop are never
    reached for it: they held the loop seconds for a batch of millions of small values."""
    from pydantic import ValidationError
    from starlette.requests import Request

    from tools.service import fast
    from tools.service.models import MAX_EVENTS, EventsBody
    from tools.service.strict_body import PARSE_ASIDE

    async def in_the_loop(_: Any) -> Any:
        raise AssertionError("the batch was parsed again in the event loop")

    strict_in_the_loop = []
    monkeypatch.setattr(Request, "json", in_the_loop)
    monkeypatch.setattr(fast, "loads_strict", lambda text: strict_in_the_loop.append(1))
    count = PARSE_ASIDE // 2
    many = b'{"events": [' + b",".join([b"{}"] * count) + b"]}"
    assert len(many) > PARSE_ASIDE
    answer = web.post("/v1/events", content=many,
                      headers={**bearer("finance"), "Content-Type": "application/json"})
    assert answer.status_code == 422, answer.text
    with pytest.raises(ValidationError) as refused:  # the route's own words
        EventsBody.model_validate({"events": [{}] * count})
    error = refused.value.errors()[0]
    assert answer.json()["detail"] == f"events: {error['msg']}"
    assert str(MAX_EVENTS) in answer.json()["detail"]
    assert strict_in_the_loop == []
