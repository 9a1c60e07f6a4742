"""Bearer tokens and roles: who may do what, and what happens without a token."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.service.conftest import TOKENS, bearer
from tools.cli_serve import is_loopback
from tools.service.auth import Authority, load_tokens, parse_tokens
from tools.service.problems import ServiceProblem

GRANT = ("/v1/accounts/a/grants", {"amount": 5, "time": 1})
USAGE = ("/v1/accounts/a/usage", {"amount": 1, "time": 2})
SUBMIT = ("/v1/jobs", {"job": "j", "account": "a", "cost": 1, "priority": 1, "time": 2})
EVENTS = ("/v1/events", {"events": [{"type": "grant", "account": "a", "amount": 1,
                                     "time": 1}]})


def test_reads_need_a_token_of_any_role(secured: TestClient) -> None:
    assert secured.get("/v1/accounts").status_code == 401
    assert secured.get("/v1/accounts").headers["www-authenticate"].startswith("Bearer")
    bad = secured.get("/v1/accounts", headers={"Authorization": "Bearer not-a-known-token"})
    assert bad.status_code == 401
    basic = secured.get("/v1/accounts", headers={"Authorization": "Basic abc"})
    assert basic.status_code == 401
    for role in TOKENS:
        assert secured.get("/v1/accounts", headers=bearer(role)).status_code == 200
    for path in ("/healthz", "/readyz", "/openapi.json", "/docs"):
        assert secured.get(path).status_code == 200


@pytest.mark.parametrize(("role", "allowed"), [
    ("finance", {GRANT[0], EVENTS[0]}),
    ("worker", {USAGE[0], SUBMIT[0]}),
    ("auditor", set()),
])
def test_roles(secured: TestClient, role: str, allowed: set[str]) -> None:
    assert secured.post(*GRANT[:1], json=GRANT[1], headers=bearer("finance")).status_code == 201
    for path, body in (GRANT, USAGE, SUBMIT, EVENTS):
        status = secured.post(path, json=body, headers=bearer(role)).status_code
        if path in allowed:
            assert status in (200, 201), (role, path, status)
        else:
            assert status == 403, (role, path, status)
    assert secured.post("/v1/journal/verify", headers=bearer("auditor")).status_code == 200


def test_token_files() -> None:
    tokens = parse_tokens("# comment\nworker:aaaaaaaaaaaaaaaa\nfinance: bbbbbbbbbbbbbbbb\n",
                          "f")
    assert [t.role for t in tokens] == ["worker", "finance"]
    assert "aaaa" not in repr(tokens[0])
    with pytest.raises(ValueError, match="ROLE:TOKEN"):
        parse_tokens("admin:aaaaaaaaaaaaaaaa", "f")
    with pytest.raises(ValueError, match="at least"):
        parse_tokens("worker:short", "f")
    env = {"GPU_CREDITS_TOKENS": "auditor:cccccccccccccccc,worker:dddddddddddddddd"}
    assert [t.role for t in load_tokens(None, env)] == ["auditor", "worker"]
    authority = Authority(tokens)
    assert authority.role_of("bbbbbbbbbbbbbbbb") == "finance"
    assert authority.role_of("bbbbbbbbbbbbbbbc") is None
    assert authority.role_of("") is None


@pytest.mark.parametrize("header", [
    "Bearer \xa0aaaaaaaaaaaaaaaa", "Bearer aaaaaaaaaaaaaaaa\x85", "Bearer \taaaaaaaaaaaaaaaa",
    "Bearer aaaaaaaaaaaaaaaa\x0b", "Bearer \x1caaaaaaaaaaaaaaaa", "Bearer aaaaaaaaaaaaaaaa\u3000",
])
def test_only_spaces_and_tabs_are_blanks_around_a_token(header: str) -> None:
    """Blanks around the token are spaces (and tabs after it), as RFC 6750 and 9110
    write them: a header's other bytes (read as Latin-1: a no-break space, NEL) are
    part of what was sent, which is then not the token."""
    authority = Authority(parse_tokens("auditor:aaaaaaaaaaaaaaaa", "f"))
    assert authority.identify("Bearer  aaaaaaaaaaaaaaaa \t") == "auditor"
    with pytest.raises(ServiceProblem) as refused:
        authority.identify(header)
    assert refused.value.status == 401


def test_a_tokens_file_saved_with_a_byte_order_mark_is_read(tmp_path: Any) -> None:
    """Editors on Windows save UTF-8 with a byte order mark: its first role was read as
    '\ufeffworker', an unknown role."""
    path = tmp_path / "tokens"
    path.write_bytes(b"\xef\xbb\xbfworker:aaaaaaaaaaaaaaaa\r\nfinance:bbbbbbbbbbbbbbbb\r\n")
    assert [t.role for t in load_tokens(str(path), {})] == ["worker", "finance"]


def test_a_tokens_file_without_tokens_is_refused(tmp_path: Any) -> None:
    """Given a file, the operator meant tokens: none is an error, not a service that
    answers everyone."""
    empty = tmp_path / "tokens"
    empty.write_text("# worker:to be filled in\n\n")
    with pytest.raises(ValueError, match="holds no tokens"):
        load_tokens(str(empty), {})


@pytest.mark.parametrize("value", [" ", ",", " , ,", "# worker:to be filled in"])
def test_a_tokens_variable_set_without_tokens_is_refused(value: str) -> None:
    """Set to something, the variable was meant to hold tokens: a typo that leaves none
    must not start a service that answers everyone. Empty, it is as if unset."""
    with pytest.raises(ValueError, match=r"\$GPU_CREDITS_TOKENS holds no tokens"):
        load_tokens(None, {"GPU_CREDITS_TOKENS": value})
    assert load_tokens(None, {"GPU_CREDITS_TOKENS": ""}) == []


SECRET = "the-same-secret-0123"


@pytest.mark.parametrize("text", [
    f"worker:{SECRET}\nfinance:{SECRET}\n",
    f"# ops\nworker:{SECRET}\n\nfinance:{SECRET}\n",
])
def test_one_token_under_two_roles_is_refused(text: str) -> None:
    """It would act only as the first role: refused, naming both lines, not the secret."""
    with pytest.raises(ValueError, match="same token") as refused:
        parse_tokens(text, "f")
    lines = [n for n, line in enumerate(text.split("\n"), 1) if SECRET in line]
    assert f"line {lines[0]} (worker)" in str(refused.value)
    assert f"line {lines[1]} (finance)" in str(refused.value)
    assert SECRET not in str(refused.value)


def test_one_token_under_two_roles_across_file_and_variable(tmp_path: Any) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"worker:{SECRET}\n")
    with pytest.raises(ValueError, match="same token") as refused:
        load_tokens(str(tokens), {"GPU_CREDITS_TOKENS": f"finance:{SECRET}"})
    assert f"{tokens}: line 1 (worker)" in str(refused.value)
    assert "$GPU_CREDITS_TOKENS: line 1 (finance)" in str(refused.value)
    assert SECRET not in str(refused.value)
    with pytest.raises(ValueError, match="same token"):
        load_tokens(None, {"GPU_CREDITS_TOKENS": f"worker:{SECRET},auditor:{SECRET}"})


def test_the_same_token_twice_under_one_role_means_what_it_says() -> None:
    tokens = parse_tokens(f"worker:{SECRET}\nworker:{SECRET}\n", "f")
    assert Authority(tokens).role_of(SECRET) == "worker"


def test_a_hash_inside_a_token_is_part_of_it() -> None:
    """Only a line starting with `#` is a comment: a `#` cutting a token short would let
    its prefix in."""
    (token,) = parse_tokens("  # a comment\nauditor:abcdefghijklmnopqrs#tuvwxyz\n", "f")
    authority = Authority([token])
    assert authority.role_of("abcdefghijklmnopqrs#tuvwxyz") == "auditor"
    assert authority.role_of("abcdefghijklmnopqrs") is None
    env = {"GPU_CREDITS_TOKENS": "worker:dddddddddddddddd#1,auditor:cccccccccccccccc"}
    assert [t.secret for t in load_tokens(None, env)] == [b"dddddddddddddddd#1",
                                                          b"cccccccccccccccc"]
    # A comment after a token is not dropped: it is a space in the token, refused.
    with pytest.raises(ValueError, match=r"line 2 .*without spaces"):
        parse_tokens("\nworker:dddddddddddddddd # the CI runner\n", "f")


@pytest.mark.parametrize("secret", ["t\u00f6k\u00e9n-secret-token-123", "token-with-\x7f-0123456"])
def test_a_token_beyond_printable_ascii_is_refused(secret: str) -> None:
    """A header is read as Latin-1: such a token could never match what a client sends."""
    with pytest.raises(ValueError, match="printable ASCII") as refused:
        parse_tokens(f"worker:aaaaaaaaaaaaaaaa\nauditor:{secret}\n", "f")
    assert "line 2 (auditor)" in str(refused.value)
    with pytest.raises(ValueError, match="printable ASCII"):
        load_tokens(None, {"GPU_CREDITS_TOKENS": f"auditor:{secret}"})


def test_a_token_too_long_to_send_is_refused() -> None:
    """A request's line and headers together hold at most 64 KiB (`connections.MAX_HEAD`):
    a token of 70,000 characters was accepted, and every request bearing it was `431`."""
    with pytest.raises(ValueError, match="at most") as refused:
        parse_tokens(f"worker:aaaaaaaaaaaaaaaa\nauditor:{'a' * 70_000}\n", "f")
    assert "line 2 (auditor)" in str(refused.value)
    assert "aaaaaaaaaaaaaaaaa" not in str(refused.value)
    from tools.service.auth import MAX_TOKEN_LENGTH

    assert parse_tokens(f"worker:{'w' * MAX_TOKEN_LENGTH}\n", "f")
    with pytest.raises(ValueError, match=f"at most {MAX_TOKEN_LENGTH:,}"):
        load_tokens(None, {"GPU_CREDITS_TOKENS": f"worker:{'w' * (MAX_TOKEN_LENGTH + 1)}"})


def test_an_entry_without_a_role_does_not_show_the_token() -> None:
    with pytest.raises(ValueError, match="got no role") as refused:
        parse_tokens("w0rker-secret-token-1\n", "f")
    assert "w0rker" not in str(refused.value)


@pytest.mark.parametrize("entry", ["s3cr:et-token-value-0123", "pass:w0rd-0123456789ab",
                                   "Xq9-z:w0rd-0123456789ab"])
def test_an_entry_whose_token_holds_a_colon_does_not_show_its_start(entry: str) -> None:
    """Without its role, what stands before a token's own colon is the token's start: not
    shown, however short."""
    with pytest.raises(ValueError, match="ROLE one of worker, finance, auditor") as refused:
        parse_tokens(entry + "\n", "f")
    assert entry.split(":")[0] not in str(refused.value)


@pytest.mark.parametrize(("entry", "role", "meant"), [
    ("wroker:worker-token-0123456789", "wroker", "worker"),
    ("Finance:finance-token-0123456789", "Finance", "finance"),
    ("auditors:auditor-token-0123456789", "auditors", "auditor"),
])
def test_a_misspelt_role_is_named_with_the_one_meant(entry: str, role: str,
                                                      meant: str) -> None:
    with pytest.raises(ValueError) as refused:
        parse_tokens(entry, "f")
    assert f"got role {role!r}" in str(refused.value)
    assert f"did you mean {meant!r}?" in str(refused.value)


@pytest.mark.parametrize(("entry", "why"), [
    ("worker:worker-token-0123456789  # the CI runner", "holds a space"),
    ("worker:worker-token", "12 characters"),
    ("worker:worker-token-\x7f0123456789", "character 14 is not printable ASCII"),
    ("worker:worker-token-\u00e90123456789", "character 14 is not printable ASCII"),
])
def test_a_malformed_token_is_refused_saying_what_is_wrong(entry: str, why: str) -> None:
    """Which rule the token breaks, never the token: "at least 16 characters" of a
    30-character token holding a space (a comment after it) sent the reader looking
    for the wrong thing."""
    with pytest.raises(ValueError, match="without spaces or commas") as refused:
        parse_tokens(entry, "f")
    assert why in str(refused.value)
    assert "token-0123" not in str(refused.value) and "CI runner" not in str(refused.value)


@pytest.mark.parametrize(("content", "says"), [
    (f"worker:{SECRET}\nfinance:{SECRET}\n".encode(), "line 1 (worker) and "),
    ("auditor:t\u00f6k\u00e9n-secret-token-123\n".encode(), "printable ASCII"),
])
def test_serve_refuses_such_token_files(tmp_path: Any, content: bytes, says: str,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from tools.cli import app

    def started(*_: Any, **__: Any) -> None:
        raise AssertionError("the service started")

    monkeypatch.setattr("uvicorn.Server.run", started)
    tokens = tmp_path / "tokens"
    tokens.write_bytes(content)
    result = CliRunner().invoke(app, ["--db", f"sqlite:///{tmp_path / 'x.db'}", "serve",
                                      "--tokens", str(tokens)], env={})
    assert result.exit_code == 2, result.output
    assert says in result.output
    assert SECRET not in result.output and "secret-token-123" not in result.output


def test_serve_counts_a_token_listed_twice_under_its_role_once(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from tools.cli import app

    monkeypatch.setattr("uvicorn.Server.run",
                        lambda server, **_: setattr(server, "started", True))
    tokens = tmp_path / "tokens"
    tokens.write_text(f"worker:{SECRET}\nworker:{SECRET}\nauditor:{SECRET}-auditor\n")
    result = CliRunner().invoke(app, ["--db", f"sqlite:///{tmp_path / 'x.db'}", "serve",
                                      "--tokens", str(tokens)], env={})
    assert result.exit_code == 0, result.output
    assert "2 token(s) configured (roles: auditor, worker)" in result.output

def test_serve_runs_a_service_that_owns_its_process(tmp_path: Any,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # Only `serve` keeps what its service loads out of the collector's passes: an app made
    # by `create_app` elsewhere shares its process with others' objects.
    from typer.testing import CliRunner

    from tools.cli import app

    served: list[Any] = []

    def run(server: Any, **_: Any) -> None:
        served.append(server.config.app)
        server.started = True

    monkeypatch.setattr("uvicorn.Server.run", run)
    result = CliRunner().invoke(app, ["--db", f"sqlite:///{tmp_path / 'x.db'}", "serve"],
                                env={})
    assert result.exit_code == 0, result.output
    assert [a.state.ledger.owns_process for a in served] == [True]
    from tools.service.app import create_app

    assert create_app(None).state.ledger.owns_process is False


@pytest.mark.parametrize(("mode", "says"), [
    (0o600, None), (0o640, None), (0o400, None),
    (0o644, "may be read by any user (mode 0644)"),
    (0o620, "may be written by its group (mode 0620)"),
    (0o666, "may be read by any user and written by any user and written by its group"),
])
def test_serve_warns_of_a_tokens_file_others_may_read_or_write(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch, mode: int, says: str | None) -> None:
    from typer.testing import CliRunner

    from tools.cli import app

    monkeypatch.setattr("uvicorn.Server.run",
                        lambda server, **_: setattr(server, "started", True))
    tokens = tmp_path / "tokens"
    tokens.write_text(f"worker:{SECRET}\n")
    tokens.chmod(mode)
    result = CliRunner().invoke(app, ["--db", f"sqlite:///{tmp_path / 'x.db'}", "serve",
                                      "--tokens", str(tokens)], env={})
    assert result.exit_code == 0, result.output  # a warning, not a refusal
    if says is None:
        assert "warning" not in result.output
    else:
        assert f"gpu-credits: warning: tokens file {tokens} {says}" in result.output
        assert f"chmod 600 {tokens}" in result.output
    assert SECRET not in result.output


def test_tokens_are_never_logged(secured: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="gpu_credits.access"):
        secured.get("/v1/accounts", headers=bearer("auditor"))
        secured.get("/v1/accounts", headers={"Authorization": "Bearer wrong-token-xxxxxxxx"})
    text = caplog.text
    assert '"path": "/v1/accounts"' in text and '"role": "auditor"' in text
    assert TOKENS["auditor"] not in text and "wrong-token" not in text


def test_a_forbidden_call_is_logged_with_the_role_that_tried_it(
        secured: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="gpu_credits.access"):
        refused = secured.post("/v1/accounts/a/grants", json={"amount": 5},
                               headers=bearer("worker"))
    assert refused.status_code == 403
    (line,) = [r.getMessage() for r in caplog.records if "/grants" in r.getMessage()]
    assert '"status": 403' in line and '"role": "worker"' in line


def test_loopback_hosts() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert is_loopback("127.5.0.1")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.1")
    assert not is_loopback("example.com")


def test_serve_refuses_a_public_host_without_tokens() -> None:
    from typer.testing import CliRunner

    from tools.cli import app

    result = CliRunner().invoke(app, ["serve", "--host", "0.0.0.0"], env={})
    assert result.exit_code == 2
    assert "without tokens" in result.output



# -- who may call is decided before anything reads the request ----------------------------

# Every /v1 operation, with the path filled in, and the roles that may call it.
V1 = [
    ("POST", "/v1/accounts", ("finance",)),
    ("POST", "/v1/accounts/a/grants", ("finance",)),
    ("POST", "/v1/accounts/a/usage", ("worker",)),
    ("POST", "/v1/jobs", ("worker",)),
    ("POST", "/v1/jobs/start-next", ("worker",)),
    ("POST", "/v1/jobs/j/complete", ("worker",)),
    ("POST", "/v1/jobs/j/cancel", ("worker",)),
    ("POST", "/v1/events", ("finance",)),
    ("GET", "/v1/accounts", tuple(TOKENS)),
    ("GET", "/v1/accounts/a/balance", tuple(TOKENS)),
    ("GET", "/v1/accounts/a/statement", tuple(TOKENS)),
    ("GET", "/v1/jobs/j", tuple(TOKENS)),
    ("GET", "/v1/revisions", tuple(TOKENS)),
    ("GET", "/v1/journal", tuple(TOKENS)),
    ("GET", "/v1/journal/head", tuple(TOKENS)),
    ("POST", "/v1/journal/verify", tuple(TOKENS)),
]
BROKEN = {"Content-Type": "application/json"}


def test_the_list_of_operations_is_the_documents(secured: TestClient) -> None:
    import re

    paths = secured.get("/openapi.json").json()["paths"]
    documented = {(method.upper(), template) for template, operations in paths.items()
                  if template.startswith("/v1") for method in operations}
    listed = {(method, re.sub(r"/a(?=/|$)", "/{account}", re.sub(
        r"/j(?=/|$)", "/{job}", path))) for method, path, _ in V1}
    assert listed == documented


def test_the_document_gives_refusals_as_they_are_sent(secured: TestClient) -> None:
    """A client generated from the document expects what the service sends: a problem
    in `application/problem+json` (never `application/json`), and the challenge of a
    `401` and a `403` in `WWW-Authenticate`."""
    paths = secured.get("/openapi.json").json()["paths"]
    refusals = 0
    for template, operations in paths.items():
        for operation in operations.values():
            for status, answer in operation["responses"].items():
                if status.startswith("2") or not template.startswith("/v1"):
                    continue
                assert set(answer["content"]) == {"application/problem+json"}, status
                schema = answer["content"]["application/problem+json"]["schema"]
                assert schema["$ref"].endswith("/Problem"), status
                if status in ("400", "401", "403"):
                    refusals += 1
                    assert "WWW-Authenticate" in answer["headers"], status
    assert refusals > 0


def test_without_tokens_the_document_asks_for_none(client: TestClient) -> None:
    """No scheme, no operation needing one, and none of the refusals of a token."""
    doc = client.get("/openapi.json").json()
    assert "securitySchemes" not in doc.get("components", {})
    for template, operations in doc["paths"].items():
        for method, operation in operations.items():
            assert "security" not in operation, (method, template)
            assert not {"400", "401", "403"} & set(operation["responses"]), (method, template)


def _is_problem(answer: Any, status: int, slug: str) -> None:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["type"].endswith(f"/{slug}")


@pytest.mark.parametrize(("method", "path", "roles"), V1)
def test_no_or_an_unknown_token_is_401_whatever_the_body(
        secured: TestClient, method: str, path: str, roles: tuple[str, ...]) -> None:
    for body in (b"{oops", b"[1,", b'{"a": 1, "a": 2}', b"\xff"):
        answer = secured.request(method, path, content=body, headers=BROKEN)
        _is_problem(answer, 401, "unauthorized")
        assert answer.headers["www-authenticate"] == "Bearer"
        assert "oops" not in answer.text
        unknown = secured.request(method, path, content=body, headers={
            **BROKEN, "Authorization": "Bearer not-a-known-token-xx"})
        _is_problem(unknown, 401, "unauthorized")
        assert unknown.headers["www-authenticate"] == 'Bearer error="invalid_token"'


@pytest.mark.parametrize(("method", "path", "roles"), V1)
def test_a_role_that_may_not_is_403_whatever_the_body(
        secured: TestClient, method: str, path: str, roles: tuple[str, ...]) -> None:
    for role in set(TOKENS) - set(roles):
        for body in (b"{oops", b'{"amount": NaN}'):
            answer = secured.request(method, path, content=body,
                                     headers={**BROKEN, **bearer(role)})
            _is_problem(answer, 403, "forbidden")
            assert answer.json()["detail"] == (
                f"role {role!r} may not do this; it needs {' or '.join(roles)}")
            # RFC 6750, 3: a token that does not enable access gets a challenge too.
            assert answer.headers["www-authenticate"] == 'Bearer error="insufficient_scope"'
    for role in roles:  # one that may is told what is wrong with the body
        answer = secured.request(method, path, content=b"{oops",
                                 headers={**BROKEN, **bearer(role)})
        if method == "POST":
            _is_problem(answer, 422, "invalid")


def test_a_bad_path_or_key_without_a_token_is_401(secured: TestClient) -> None:
    for path in ("/v1/accounts/%ff/balance", "/v1/accounts/%ff/usage",
                 "/v1/accounts/a%0A/balance", "/v1/jobs/%C3/cancel"):
        method = "GET" if path.endswith("balance") else "POST"
        _is_problem(secured.request(method, path, json={}), 401, "unauthorized")
    twice = secured.post("/v1/accounts/a/usage", json={"amount": 1},
                         headers=[("Idempotency-Key", "k1"), ("Idempotency-Key", "k2")])
    _is_problem(twice, 401, "unauthorized")
    # The role's right is decided before the path and the key are read too.
    _is_problem(secured.post("/v1/accounts/%ff/grants", json={"amount": 1},
                             headers=bearer("auditor")), 403, "forbidden")
    # A name with a line break: the routes' patterns (`.`) do not match one.
    _is_problem(secured.post("/v1/accounts/a%0A/grants", json={"amount": 1},
                             headers=bearer("worker")), 403, "forbidden")
    _is_problem(secured.post("/v1/jobs/j%0Ab/cancel", json={},
                             headers=bearer("finance")), 403, "forbidden")
    _is_problem(secured.post("/v1/accounts/a/grants", json={"amount": 1},
                             headers={**bearer("worker"),
                                      "Idempotency-Key": "caf\u00e9".encode()}),
                403, "forbidden")
    # An unknown query parameter too.
    _is_problem(secured.get("/v1/accounts/a/balance?as_knwon_at=1"), 401, "unauthorized")
    _is_problem(secured.post("/v1/accounts/a/grants?x=1", json={"amount": 1},
                             headers=bearer("worker")), 403, "forbidden")
    # A role that may is told what is wrong with them.
    _is_problem(secured.get("/v1/accounts/%ff/balance", headers=bearer("auditor")),
                422, "invalid")
    _is_problem(secured.get("/v1/accounts/a/balance?as_knwon_at=1", headers=bearer("auditor")),
                422, "invalid")


def test_every_v1_path_needs_a_token(secured: TestClient) -> None:
    """Even one no route answers: which paths exist is not for anonymous callers."""
    _is_problem(secured.get("/v1/no-such-thing"), 401, "unauthorized")
    _is_problem(secured.delete("/v1/accounts"), 401, "unauthorized")
    assert secured.get("/v1/no-such-thing", headers=bearer("auditor")).status_code == 404
    assert secured.delete("/v1/accounts", headers=bearer("auditor")).status_code == 405


def test_refusals_before_the_body_are_logged_with_the_role_and_no_token(
        secured: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="gpu_credits.access"):
        secured.post("/v1/accounts/a/grants", content=b"{oops",
                     headers={**BROKEN, **bearer("auditor")})
        secured.post("/v1/accounts/a/usage", content=b"{oops", headers=BROKEN)
        secured.post("/v1/events", content=b"[1,", headers={
            **BROKEN, "Authorization": "Bearer wrong-token-xxxxxxxx"})
    lines = [r.getMessage() for r in caplog.records]
    grant, usage, events = (next(line for line in lines if part in line)
                            for part in ("/grants", "/usage", "/events"))
    assert '"status": 403' in grant and '"role": "auditor"' in grant
    assert '"status": 401' in usage and '"role": null' in usage
    assert '"status": 401' in events and '"role": null' in events
    text = "\n".join(lines)
    assert TOKENS["auditor"] not in text and "wrong-token" not in text


def test_without_tokens_nothing_changes(client: TestClient) -> None:
    _is_problem(client.post("/v1/accounts/a/usage", content=b"{oops", headers=BROKEN),
                422, "invalid")
    _is_problem(client.get("/v1/accounts/%ff/balance"), 422, "invalid")
    assert client.get("/v1/no-such-thing").status_code == 404
