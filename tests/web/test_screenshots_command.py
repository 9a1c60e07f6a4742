"""`python -m tools.web.screenshots` reads its arguments as a command does."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.web.screenshots import main


@pytest.mark.parametrize(("argv", "code"), [(["--help"], 0), (["-x"], 2),
                                            (["a", "b"], 2)])
def test_an_option_is_not_taken_for_the_folder(argv: list[str], code: int, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == code
    assert list(tmp_path.iterdir()) == []  # no folder, no screenshot
    said = capsys.readouterr()
    assert "usage: python -m tools.web.screenshots" in (said.out + said.err)
