"""The Python examples in docs/*.md run, so the docs cannot drift from the code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def _blocks() -> list[tuple[str, int, str]]:
    found = []
    for path in sorted(DOCS.glob("*.md")):
        for i, match in enumerate(BLOCK.finditer(path.read_text())):
            found.append((path.name, i, match.group(1)))
    return found


@pytest.mark.parametrize(("doc", "index", "code"), _blocks(),
                         ids=[f"{d}-{i}" for d, i, _ in _blocks()])
def test_doc_example_runs(doc: str, index: int, code: str) -> None:
    exec(compile(code, f"{doc}[{index}]", "exec"), {})
