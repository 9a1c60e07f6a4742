"""Anchors and signed anchors: their syntax, their checks, and refusing what was edited."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from eventstore import Anchor, MemoryJournal
from eventstore.hashing import GENESIS_HASH
from projections import GPUCreditTracker
from projections.anchors import (
    AnchorError,
    check_anchor,
    hash_at,
    head_anchor,
    parse_anchor,
    report_dict,
)
from projections.signing import (
    dump_statement,
    fingerprint,
    load_private_key,
    load_public_key,
    read_statement,
    sign_anchor,
)

HASH = "ab" * 32


# A position runs to 19 digits: a 20th is no anchor, not one past the end of every journal.
ANCHORS = [f"12:{HASH}", f" 12:{HASH.upper()} ", f"0:{GENESIS_HASH}", f"{'9' * 19}:{HASH}"]
NOT_ANCHORS = ["", "12", f"12:{HASH[:-1]}", f"-1:{HASH}", f"x:{HASH}", f"12:{HASH}g",
               f"12;{HASH}", f"1_2:{HASH}", f"\u0661:{HASH}", f"12:{HASH}:3",
               f"{'1' * 20}:{HASH}"]


@pytest.mark.parametrize("text", ANCHORS)
def test_anchor_syntax(text: str) -> None:
    anchor = parse_anchor(text)
    assert str(anchor) == text.strip().lower()


@pytest.mark.parametrize("text", NOT_ANCHORS)
def test_bad_anchor_syntax(text: str) -> None:
    with pytest.raises(AnchorError, match="anchor"):
        parse_anchor(text)


@pytest.mark.parametrize("text", [f"0:{HASH}", f"000:{GENESIS_HASH[:-1]}1"])
def test_an_anchor_at_position_0_is_the_empty_journal(text: str) -> None:
    """Well formed, but no journal has another hash at position 0 than the genesis hash:
    refused as mistyped (the schema's pattern, which only documents the form, admits it)."""
    with pytest.raises(AnchorError, match=f"position 0 is the empty journal, whose hash is "
                                          f"{GENESIS_HASH}"):
        parse_anchor(text)


def test_the_service_schema_publishes_the_form_parse_anchor_reads() -> None:
    """`POST /v1/journal/verify` documents the anchor's form as a pattern and checks it
    with `parse_anchor`: a client validating against the schema must accept and refuse
    exactly what the service does."""
    from tools.service.models import VerifyBody

    extra = VerifyBody.model_fields["anchor"].json_schema_extra
    assert isinstance(extra, dict)
    pattern = re.compile(str(extra["pattern"]))
    for text in ANCHORS:
        assert pattern.fullmatch(text), text
    for text in NOT_ANCHORS:
        assert not pattern.fullmatch(text), text


def _journal() -> MemoryJournal:
    journal = MemoryJournal()
    tracker = GPUCreditTracker(journal, account="a")
    tracker.grant(10, 0, 100)
    tracker.consume(3, 1)
    return journal


def test_head_anchor_is_the_last_record() -> None:
    journal = _journal()
    last = list(journal.read(order="position"))[-1]
    assert head_anchor(journal) == Anchor(2, last.hash)
    assert head_anchor(MemoryJournal()) == Anchor(0, GENESIS_HASH)


class _ReadOnly:
    """A journal seen only through `read` (no `stored_hash`), as a view of one is."""

    def __init__(self, journal: MemoryJournal) -> None:
        self.read = journal.read


@pytest.mark.parametrize("view", [False, True])
def test_hash_at_is_the_stored_hash_there(view: bool) -> None:
    journal = _journal()
    hashes = [r.hash for r in journal.read(order="position")]
    seen: Any = _ReadOnly(journal) if view else journal
    assert [hash_at(seen, p) for p in (0, 1, 2)] == [GENESIS_HASH, *hashes]
    with pytest.raises(KeyError, match="no record at position 3"):
        hash_at(seen, 3)


def test_hash_at_an_edited_record_is_its_stored_hash() -> None:
    """As stored, not checked: a verified point at an edited record still names the state
    folded before the edit (whatever reads the record refuses it)."""
    journal = _journal()
    row = journal._stored[1]
    journal._stored[1] = (*row[:7], row[7].replace("3", "4"), row[8])
    assert hash_at(journal, 2) == row[8]


def test_check_anchor() -> None:
    journal = _journal()
    anchor = head_anchor(journal)
    assert check_anchor(journal, anchor).ok
    assert check_anchor(journal, Anchor(0, GENESIS_HASH)).ok
    wrong = check_anchor(journal, Anchor(2, HASH))
    assert (wrong.ok, wrong.first_bad_position) == (False, 2)
    assert "rewritten" in str(wrong.problem)
    beyond = check_anchor(journal, Anchor(5, HASH))
    assert (beyond.ok, beyond.first_bad_position) == (False, 3)
    assert report_dict(beyond)["first_bad_position"] == 3
    assert report_dict(check_anchor(journal, anchor), anchor) == {
        "ok": True, "events": 2, "anchor": str(anchor)}
    # Position 0 is the empty journal, whose hash no journal can differ from: such an
    # anchor is mistyped (as a failed check it named position 0, which reads as false).
    with pytest.raises(ValueError, match="position 0 is the empty journal"):
        check_anchor(journal, Anchor(0, HASH))
    with pytest.raises(ValueError, match="position 0 is the empty journal"):
        journal.verify(anchor=(0, HASH))


# -- signed anchors -----------------------------------------------------------------------

_KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
_OTHER = Ed25519PrivateKey.from_private_bytes(bytes(range(1, 33)))
_WHEN = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _pem_public(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo)


def _statement() -> bytes:
    return dump_statement(sign_anchor(Anchor(7, HASH), _KEY, now=lambda: _WHEN)).encode()


def test_a_signed_statement_checks_out() -> None:
    data = _statement()
    anchor, statement = read_statement(data, load_public_key(_pem_public(_KEY)))
    assert anchor == Anchor(7, HASH)
    assert statement["time"] == "2026-11-30T12:00:00Z"
    assert statement["signer"] == fingerprint(_KEY.public_key())
    assert statement["format"] == "gpu-credits-anchor/1"


def test_keys_load_from_pem_and_openssh() -> None:
    pem = _KEY.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())
    ssh = _KEY.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                             serialization.NoEncryption())
    ssh_pub = _KEY.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                             serialization.PublicFormat.OpenSSH)
    for data in (pem, ssh):
        assert fingerprint(load_private_key(data).public_key()) == fingerprint(
            _KEY.public_key())
    assert fingerprint(load_public_key(ssh_pub)) == fingerprint(_KEY.public_key())
    for bad in (b"", b"not a key", _pem_public(_KEY)):
        with pytest.raises(AnchorError):
            load_private_key(bad)


OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def _fingerprint_commands() -> dict[str, str]:
    """The commands docs/operations.md gives to compute a signer's fingerprint, by the
    format of signer.pub they read ("PEM", "OpenSSH")."""
    text = OPERATIONS.read_text()
    start = text.index("compare it with `signer`")
    block = text[text.index("```sh\n", start) + 6:]
    lines = block[:block.index("```")].splitlines()
    return {("PEM" if "PEM" in comment else "OpenSSH"): command
            for comment, command in zip(lines[::2], lines[1::2], strict=True)}


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
def test_the_documented_commands_compute_the_signer_fingerprint(tmp_path: Path) -> None:
    public = _KEY.public_key()
    encodings = {
        "PEM": _pem_public(_KEY),
        "OpenSSH": public.public_bytes(serialization.Encoding.OpenSSH,
                                       serialization.PublicFormat.OpenSSH) + b" me@host\n",
    }
    commands = _fingerprint_commands()
    assert commands.keys() == encodings.keys()
    for kind, command in commands.items():
        (tmp_path / "signer.pub").write_bytes(encodings[kind])
        done = subprocess.run(["sh", "-c", command], cwd=tmp_path, capture_output=True,
                              text=True, check=True)
        assert f"SHA256:{done.stdout.strip()}" == fingerprint(public), kind


def test_keys_of_another_kind_are_refused_as_not_ed25519() -> None:
    other = ec.generate_private_key(ec.SECP256R1())
    private = other.private_bytes(serialization.Encoding.PEM,
                                  serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption())
    public = other.public_key().public_bytes(serialization.Encoding.PEM,
                                             serialization.PublicFormat.SubjectPublicKeyInfo)
    with pytest.raises(AnchorError, match="signing key must be Ed25519, got ECPrivateKey"):
        load_private_key(private)
    with pytest.raises(AnchorError, match="must be Ed25519, got ECPublicKey"):
        load_public_key(public)


@pytest.mark.parametrize(("field", "value", "says"), [
    ("format", "gpu-credits-anchor/2", "not a signed anchor statement"),
    ("position", True, "signed anchor statement: "),
    ("hash", "xyz", "signed anchor statement: "),
])
def test_a_statement_is_refused_for_what_is_wrong_before_its_signature(
        field: str, value: object, says: str) -> None:
    """A field that makes no anchor or another format is named, not reported as a
    signature mismatch."""
    statement = json.loads(_statement())
    statement[field] = value
    with pytest.raises(AnchorError, match=says) as caught:
        read_statement(json.dumps(statement).encode(), load_public_key(_pem_public(_KEY)))
    assert "signature does not match" not in str(caught.value)


def test_a_statement_checked_with_another_key_is_refused() -> None:
    with pytest.raises(AnchorError, match="signed by"):
        read_statement(_statement(), load_public_key(_pem_public(_OTHER)))


@pytest.mark.parametrize(("field", "value"), [
    ("position", 8), ("hash", "cd" * 32), ("time", "2027-01-01T00:00:00Z"),
    ("signature", "AAAA"), ("format", "gpu-credits-anchor/2"), ("position", True),
])
def test_an_edited_statement_is_refused(field: str, value: object) -> None:
    statement = json.loads(_statement())
    statement[field] = value
    with pytest.raises(AnchorError):
        read_statement(json.dumps(statement).encode(), load_public_key(_pem_public(_KEY)))


def test_a_statement_re_signed_by_another_key_names_the_other_signer() -> None:
    statement = json.loads(_statement())
    forged = sign_anchor(Anchor(8, "cd" * 32), _OTHER, now=lambda: _WHEN)
    statement.update(forged)
    with pytest.raises(AnchorError, match="not by the given public key"):
        read_statement(json.dumps(statement).encode(), load_public_key(_pem_public(_KEY)))


@pytest.mark.parametrize("data", [b"", b"[]", b"{", b"\xff", b'{"format": "x"}',
                                  b'{"format": "gpu-credits-anchor/1"}'])
def test_what_is_not_a_statement_is_refused(data: bytes) -> None:
    with pytest.raises(AnchorError):
        read_statement(data, load_public_key(_pem_public(_KEY)))
