"""Signed anchors: a statement of the journal's head (position, hash, when, who), signed
with an Ed25519 key, so an auditor can prove who attested which head and when.

`gpu-credits head --sign KEY` writes one; `verify --anchor-file F --public-key K` checks
it against the auditor's own copy of the public key, then checks the anchor it attests.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from eventstore import Anchor
from eventstore.hashing import canonical_json
from projections.anchors import AnchorError

STATEMENT_FORMAT = "gpu-credits-anchor/1"
"""The `format` of a signed anchor statement; a reader refuses any other."""

_SIGNED_FIELDS = ("format", "position", "hash", "time", "signer")

_Key = TypeVar("_Key", Ed25519PrivateKey, Ed25519PublicKey)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _load_key(data: bytes, kind: type[_Key], ssh_marker: bytes,
              from_ssh: Callable[[bytes], object], from_pem: Callable[[bytes], object],
              unreadable: str, role: str) -> _Key:
    """The key of `kind` in `data`: OpenSSH when it starts with `ssh_marker`, else PEM.

    AnchorError "`unreadable`: why" when neither reads it, "`role` must be Ed25519" when
    it holds another kind of key.
    """
    key: object
    try:
        key = from_ssh(data) if data.lstrip().startswith(ssh_marker) else from_pem(data)
    except (ValueError, TypeError) as exc:
        raise AnchorError(f"{unreadable}: {exc}") from None
    if not isinstance(key, kind):
        raise AnchorError(f"{role} must be Ed25519, got {type(key).__name__}")
    return key


def load_private_key(data: bytes) -> Ed25519PrivateKey:
    """An Ed25519 private key from PEM (PKCS#8, `openssl genpkey -algorithm ed25519`) or
    OpenSSH (`ssh-keygen -t ed25519`) bytes; AnchorError otherwise."""
    # The key classes are abstract; `_load_key` only tests instances against them.
    return _load_key(data, Ed25519PrivateKey,  # type: ignore[type-abstract]
                     b"-----BEGIN OPENSSH PRIVATE KEY-----",
                     lambda raw: serialization.load_ssh_private_key(raw, password=None),
                     lambda raw: serialization.load_pem_private_key(raw, password=None),
                     "not an unencrypted Ed25519 private key", "the signing key")


def load_public_key(data: bytes) -> Ed25519PublicKey:
    """An Ed25519 public key from PEM or an OpenSSH `ssh-ed25519 ...` line; AnchorError."""
    return _load_key(data, Ed25519PublicKey, b"ssh-",  # type: ignore[type-abstract]
                     lambda raw: serialization.load_ssh_public_key(raw.strip()),
                     serialization.load_pem_public_key,
                     "not an Ed25519 public key", "the public key")


def fingerprint(key: Ed25519PublicKey) -> str:
    """`SHA256:` and the unpadded base64 SHA-256 of the raw 32-byte public key (OpenSSH
    hashes its own encoding of the key instead: `ssh-keygen -l` shows another value)."""
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "SHA256:" + base64.b64encode(hashlib.sha256(raw).digest()).decode().rstrip("=")


def _signed_bytes(statement: Mapping[str, Any]) -> bytes:
    return canonical_json({k: statement[k] for k in _SIGNED_FIELDS}).encode("utf-8")


def sign_anchor(anchor: Anchor, key: Ed25519PrivateKey, *,
                now: Callable[[], datetime] | None = None) -> dict[str, Any]:
    """A statement attesting `anchor`, signed with `key`.

    `{"format", "position", "hash", "time", "signer", "public_key", "signature"}`: the
    signature is Ed25519 over the canonical JSON of format, position, hash, time and
    signer; `public_key` (raw, base64) is a convenience, never trusted when checking.
    """
    moment = (now or (lambda: datetime.now(UTC)))().astimezone(UTC)
    public = key.public_key()
    statement: dict[str, Any] = {
        "format": STATEMENT_FORMAT,
        "position": anchor.position,
        "hash": anchor.hash,
        "time": moment.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "signer": fingerprint(public),
    }
    statement["public_key"] = _b64(public.public_bytes(serialization.Encoding.Raw,
                                                       serialization.PublicFormat.Raw))
    statement["signature"] = _b64(key.sign(_signed_bytes(statement)))
    return statement


def dump_statement(statement: Mapping[str, Any]) -> str:
    """The statement as a file: indented JSON, one trailing newline."""
    return json.dumps(dict(statement), indent=2, sort_keys=True) + "\n"


def read_statement(data: bytes, key: Ed25519PublicKey) -> tuple[Anchor, dict[str, Any]]:
    """Check a signed statement against the auditor's own copy of the public key.

    Returns the anchor it attests and the statement; AnchorError when the file is not a
    statement, names another signer, or its signature does not match (an edited field).
    """
    try:
        statement = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise AnchorError(f"not a signed anchor statement (not JSON: {exc})") from None
    if not isinstance(statement, dict) or statement.get("format") != STATEMENT_FORMAT:
        raise AnchorError(f"not a signed anchor statement: expected a JSON object with "
                          f"\"format\": \"{STATEMENT_FORMAT}\"")
    missing = [k for k in (*_SIGNED_FIELDS, "signature") if k not in statement]
    if missing:
        raise AnchorError(f"signed anchor statement lacks {', '.join(missing)}")
    try:
        anchor = Anchor.of(statement["position"], statement["hash"])
    except ValueError as exc:
        raise AnchorError(f"signed anchor statement: {exc}") from None
    expected = fingerprint(key)
    if statement["signer"] != expected:
        raise AnchorError(f"statement was signed by {statement['signer']!r}, not by the "
                          f"given public key {expected}")
    try:
        signature = base64.b64decode(str(statement["signature"]), validate=True)
        key.verify(signature, _signed_bytes(statement))
    except (InvalidSignature, ValueError):
        raise AnchorError("the statement's signature does not match its content and the "
                          "given public key: the statement was edited or signed by "
                          "another key") from None
    return anchor, statement
