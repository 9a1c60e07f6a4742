"""The command line leans on Typer's public names only, so a Typer that moves its
private modules (as 0.29 did with its own copy of click) cannot break it."""

from __future__ import annotations

import ast
from pathlib import Path

import tools

TOOLS = Path(tools.__file__).parent


def _private_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
    return [n for n in names if any(part.startswith("_") for part in n.split(".")[1:])
            and n.split(".")[0] in {"typer", "click"}]


def test_no_module_of_tools_imports_a_private_typer_or_click_module() -> None:
    found = {str(p.relative_to(TOOLS)): _private_imports(p) for p in TOOLS.rglob("*.py")}
    assert {p: names for p, names in found.items() if names} == {}


def test_a_private_import_is_found(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("import typer\nfrom typer._click.exceptions import UsageError\n"
                     "import click._compat\nfrom typer.core import TyperGroup\n")
    assert _private_imports(probe) == ["typer._click.exceptions", "click._compat"]
