"""The Python examples in docs/*.md run, so the docs cannot drift from the code."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import re
from pathlib import Path
from typing import Any

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


ROOT = DOCS.parent
ARCHITECTURE = DOCS / "architecture.md"
# Each package, and the heading in docs/architecture.md whose first table describes it.
PACKAGES = {
    "eventstore": "### Inside `eventstore`",
    "projections": "### Inside `projections`\n",
    "projections/queries": "### Inside `projections.queries`",
    "tools": "### Inside `tools`\n",
    "tools/service": "## The HTTP service",
    "tools/web": "### Inside `tools.web`",
    "tools/sim": "### Inside `tools.sim`",
    "tools/bench": "### Inside `tools.bench`",
}
MODULE = re.compile(r"`([\w/]+\.(?:py|c))`")


def _first_table(text: str, heading: str) -> list[str]:
    """The rows of the first table after `heading`."""
    start = text.index(heading)
    rows: list[str] = []
    for line in text[start:].splitlines()[1:]:
        if line.startswith("|"):
            rows.append(line)
        elif rows:
            break
    return rows


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_table_lists_every_module_and_only_those(package: str) -> None:
    text = ARCHITECTURE.read_text()
    listed = {f"{package}/{name}" for row in _first_table(text, PACKAGES[package])
              for name in MODULE.findall(row.split("|")[1])}
    here = ROOT / package
    # The C accelerators too: a module of a package whichever language it is written in.
    modules = {str(p.relative_to(ROOT)) for pattern in ("*.py", "*.c") for p in here.rglob(pattern)
               if p.parent == here or not (p.parent / "__init__.py").exists()
               or str(p.parent.relative_to(ROOT)) not in PACKAGES}
    modules = {m for m in modules if "__pycache__" not in m}
    required = {m for m in modules if not m.endswith("/__init__.py")}
    assert required - listed == set(), "modules no table describes"
    assert listed - modules == set(), "modules described that do not exist"


OPERATIONS = DOCS / "operations.md"
VARIABLE = re.compile(r"\bGPU_CREDITS_[A-Z][A-Z_]*\b")


def test_every_environment_variable_the_code_reads_has_its_row_and_only_those() -> None:
    """docs/operations.md, "Environment variables": what an operator may set is where
    they look, and no row names a variable nothing reads any more."""
    sources = [ROOT / "setup.py", ROOT / "Makefile"]
    for package in ("eventstore", "projections", "tools", "migrations", "tests"):
        sources += (ROOT / package).rglob("*.py")
    read = {name for path in sources for name in VARIABLE.findall(path.read_text())}
    rows = _first_table(OPERATIONS.read_text(), "## Environment variables")
    documented = {name for row in rows for name in VARIABLE.findall(row.split("|")[1])}
    assert read - documented == set(), "variables the code reads that no row describes"
    assert documented - read == set(), "rows naming variables nothing reads"


LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#+ (.*)$", re.MULTILINE)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def _anchors(page: Path) -> set[str]:
    """The fragments a link may name on `page`: GitHub's slug of each heading (a repeated
    one numbered), and every explicit `<a id=...>`."""
    text = page.read_text()
    found: set[str] = set(re.findall(r'<a id="([^"]+)"', text))
    seen: dict[str, int] = {}
    for heading in HEADING.findall(FENCE.sub("", text)):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


@pytest.mark.parametrize("page", [ROOT / "README.md", *sorted(DOCS.glob("*.md"))],
                         ids=lambda page: page.name)
def test_every_relative_link_names_a_file_and_a_heading_that_exist(page: Path) -> None:
    broken = []
    for target in LINK.findall(page.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, fragment = target.partition("#")
        linked = (page.parent / path) if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif fragment and linked.suffix == ".md" and fragment not in _anchors(linked):
            broken.append(f"{target}: no such heading")
    assert broken == []


def test_a_quoted_schema_refusal_names_the_revision_this_code_needs() -> None:
    """A SchemaError quoted in the docs says what an operator sees today: the revision
    the code migrates to, not the one it needed when the page was written."""
    from eventstore.migrate import HEAD_REVISION

    quoted = {(page.name, revision) for page in sorted(DOCS.glob("*.md"))
              for revision in re.findall(r"this code needs revision '(\w+)'", page.read_text())}
    assert quoted and {revision for _, revision in quoted} == {HEAD_REVISION}, quoted


def _shown_code(text: str) -> list[str]:
    """Every inline code span of a page and every line of its fenced blocks."""
    blocks = FENCE.findall(text)
    lines = [line for block in blocks for line in block.splitlines()[1:]]
    return re.findall(r"`([^`]+)`", FENCE.sub("", text)) + lines


@pytest.mark.parametrize("page", [ROOT / "README.md", *sorted(DOCS.glob("*.md"))],
                         ids=lambda page: page.name)
def test_every_command_line_the_docs_show_names_commands_and_options_it_has(
        page: Path) -> None:
    """A `gpu-credits ...` in prose (the walk-throughs run theirs; prose is not run) names
    a command there is, with options that command takes: a renamed option or command
    shows here instead of in a user's shell."""
    import typer.main

    from tools.cli import app

    root: Any = typer.main.get_command(app)

    def options(command: Any) -> set[str]:
        return {o for p in command.params for o in (*p.opts, *p.secondary_opts)}

    wrong = []
    for span in _shown_code(page.read_text()):
        for shown in re.finditer(r"(?:^|[\s/$])gpu-credits((?: [^\s`|;&)#]+)*)", span):
            words = shown[1].split()
            at = 0
            while at < len(words) and words[at].startswith("-"):
                at += 2 if words[at] == "--db" else 1
            command = root
            while at < len(words) and hasattr(command, "commands"):
                if words[at] not in command.commands:
                    wrong.append(f"{span.strip()}: no command {words[at]!r}")
                    break
                command = command.commands[words[at]]
                at += 1
            known = options(command) | options(root)
            for word in words[at:]:
                if word == "--":
                    break
                option = word.split("=")[0]
                if re.fullmatch(r"--[a-z][\w-]*", option) and option not in known:
                    wrong.append(f"{span.strip()}: {command.name} takes no {option}")
    assert wrong == []


@pytest.mark.parametrize("page", [ROOT / "README.md", *sorted(DOCS.glob("*.md"))],
                         ids=lambda page: page.name)
def test_every_repository_path_the_docs_name_exists(page: Path) -> None:
    """A file or folder named in code (`tests/...`, `tools/...`) is where a reader will
    look: one renamed or deleted since must not send them nowhere. Build products (the
    compiled modules and their record) exist only once built."""
    from projections import native

    built = ("*.so", f"*/{native.BUILD_RECORD}")
    missing = []
    for named in re.findall(r"`([^`\s]+)`", page.read_text()):
        named = named.rstrip("/.,:")
        if (re.fullmatch(r"(eventstore|projections|tools|tests|migrations|docs)/[\w./*-]+",
                         named) and not any(Path(named).match(b) for b in built)
                and not list(ROOT.glob(named))):
            missing.append(named)
    assert missing == []


# The modules run as `python -m ...` whose command line is not an argparse parser: the
# `gpu-credits` app (typer; the test above checks it as `python -m tools.cli` too) and
# the simulator's writer, a worker process `tools.sim` starts with one URL.
NOT_ARGPARSE = {"tools.cli", "tools.sim.writer"}


class _Parsed(Exception):
    """Raised in place of parsing: carries the parser a module's `main` built."""


def _parser_of(module: str, monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    """The parser `python -m module` reads its command line with, caught as it parses."""
    def caught(parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        raise _Parsed(parser)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", caught)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", caught)
    spec = importlib.util.find_spec(module)
    assert spec is not None, f"no module {module}"
    runs = f"{module}.__main__" if spec.submodule_search_locations else module
    with pytest.raises(_Parsed) as parsed:
        importlib.import_module(runs).main([])
    parser: argparse.ArgumentParser = parsed.value.args[0]
    return parser


def _python_m_lines() -> dict[str, list[tuple[str, list[str]]]]:
    """Every `python -m tools...` the pages show: module -> (page, words after it)."""
    shown: dict[str, list[tuple[str, list[str]]]] = {}
    for page in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        for span in _shown_code(page.read_text().replace("\\\n", " ")):
            for line in re.finditer(r"python -m (tools(?:\.\w+)*)((?: [^\s`|;&)#]+)*)", span):
                shown.setdefault(line[1], []).append((page.name, line[2].split()))
    return shown


@pytest.mark.parametrize("module", sorted(_python_m_lines()))
def test_every_python_m_line_the_docs_show_names_a_module_and_options_it_has(
        module: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A benchmark or the simulator as the docs give it is what a reader pastes: a module
    renamed, or an option dropped, shows here instead of in their shell. Its `--help`
    names it as it is run and says whole sentences."""
    if module in NOT_ARGPARSE:
        assert importlib.util.find_spec(module) is not None
        return
    parser = _parser_of(module, monkeypatch)
    actions = {option: action for action in parser._actions for option in action.option_strings}
    wrong = []
    for page, words in _python_m_lines()[module]:
        choices: Any = None  # the values the option before takes, if it names them
        for word in words:
            option = word.split("=")[0]
            if re.fullmatch(r"--?[a-z][\w-]*", option):
                if option not in actions:
                    wrong.append(f"{page}: python -m {module} takes no {option}")
                choices = actions[option].choices if option in actions else None
            elif (choices is not None and re.fullmatch(r"[a-z][\w-]*", word)
                  and word not in choices):
                # A scenario or part renamed: `--only replay` would be refused by argparse.
                wrong.append(f"{page}: python -m {module}: {word!r} is none of "
                             f"{sorted(choices)}")
    assert wrong == []
    assert parser.prog == f"python -m {module}"
    description = (parser.description or "").strip()
    assert not description or description.endswith("."), description


MAKE_LINE = re.compile(r"(?:^|[\s`$])make ([a-z][\w-]*)((?: [A-Z_]+=\S+)*)")


def test_every_make_line_the_docs_show_names_a_target_and_variables_it_reads() -> None:
    """`make sim SEEDS=50` with a target or variable the Makefile no longer has would run
    something else without a word (make ignores a variable nothing reads)."""
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][\w-]*):", makefile, re.MULTILINE))
    read = set(re.findall(r"\$\(([A-Z_]+)\)|\$\((?:if|or|filter) \$\(([A-Z_]+)\)", makefile))
    variables = {name for pair in read for name in pair if name}
    wrong = []
    for page in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        for span in _shown_code(page.read_text()):
            for line in MAKE_LINE.finditer(span):
                if line[1] not in targets:
                    wrong.append(f"{page.name}: {line[0].strip()}: no target {line[1]!r}")
                for name in re.findall(r"([A-Z_]+)=", line[2]):
                    if name not in variables:
                        wrong.append(f"{page.name}: {line[0].strip()}: {name} is not read")
    assert wrong == []
