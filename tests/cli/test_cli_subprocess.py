"""demo, import and verify as real processes on fresh SQLite files."""

from __future__ import annotations

from pathlib import Path

from cli_helpers import SMALL, cli, tamper


def test_demo_in_a_fresh_folder_uses_the_default_database(tmp_path: Path) -> None:
    done = cli("demo", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "gpu-credits.db").exists()
    assert "Audit summary" in done.stdout
    assert done.stderr == ""
    refused = cli("demo", "--seed", "1", cwd=tmp_path)
    assert refused.returncode == 2
    assert len(refused.stderr.splitlines()) == 1


def test_import_and_verify_as_processes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'p.db'}"
    (tmp_path / "small.jsonl").write_text(SMALL)
    done = cli("import", "small.jsonl", "--db", url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "appended 12 events" in done.stdout
    again = cli("import", "-", stdin=SMALL.encode(), cwd=tmp_path,
                env={"GPU_CREDITS_DB": url})
    assert again.returncode == 0
    assert "appended 0 events, 12 already present" in again.stdout

    (tmp_path / "bad.jsonl").write_text('{"type": "grant", "account": "a"}\nnope\n')
    bad = cli("import", "bad.jsonl", "--db", url, cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.splitlines() == [
        "bad.jsonl:1: grant event is missing time",
        "bad.jsonl:2: not valid JSON: Expecting value at column 1",
        "gpu-credits: error: 2 invalid line(s) in bad.jsonl; nothing appended",
    ]
    assert "Traceback" not in bad.stderr

    ok = cli("verify", "--db", url, cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    tamper(tmp_path / "p.db", 7, '"cost":8', '"cost":9')
    failed = cli("verify", "--db", url, cwd=tmp_path)
    assert failed.returncode == 1
    assert failed.stderr.splitlines() == [
        "gpu-credits: error: verification failed at position 7: hash chain broken at "
        "position 7: its stored hash is not the one its content and its predecessor give: "
        "the record or its hash was altered"]


def test_errors_are_one_line_without_traceback(tmp_path: Path) -> None:
    for argv in (["balance", "nobody"], ["balance", "a", "--at", "whenever"]):
        done = cli(*argv, "--db", f"sqlite:///{tmp_path / 'x.db'}", cwd=tmp_path)
        assert done.returncode == 2, argv
        assert len(done.stderr.splitlines()) == 1, done.stderr
        assert done.stderr.startswith("gpu-credits: error: ")
