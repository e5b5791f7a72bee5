"""The documentation is kept in step with the program.

Every command registered at test time (including command groups plugged in by other
modules) must have help and a section in docs/cli.md that names each of its options; the
README's commands must be the ones CI runs; the docs' links must resolve.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from tachograph.cli.app import EXIT_OK, cli

ROOT = Path(__file__).resolve().parents[2]
CLI_MD = ROOT / "docs" / "cli.md"
README = ROOT / "README.md"
CI_RUN = ROOT / ".ci" / "run"

# Commands whose output is the data itself (JSON Lines), so --json would mean nothing.
DATA_COMMANDS = ("export",)


def _commands(group: click.Group, prefix: str = "") -> Iterator[tuple[str, click.Command]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        path = f"{prefix}{name}"
        if isinstance(command, click.Group):
            yield path, command
            yield from _commands(command, path + " ")
        else:
            yield path, command


COMMANDS = dict(_commands(cli))
# A group needs its own section only if it has options of its own; its subcommands always do.
DOCUMENTED = sorted(
    path
    for path, command in COMMANDS.items()
    if not isinstance(command, click.Group)
    or any(isinstance(p, click.Option) and p.name != "help" for p in command.params)
)


def _sections() -> dict[str, str]:
    """``### `tacho NAME` `` sections of docs/cli.md, by command path."""
    text = CLI_MD.read_text()
    found: dict[str, str] = {}
    parts = re.split(r"^### `tacho ([a-z][a-z -]*)`\s*$", text, flags=re.MULTILINE)
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        found[name.strip()] = re.split(r"^#{1,3} ", body, maxsplit=1, flags=re.MULTILINE)[0]
    return found


def _long_options(command: click.Command) -> list[str]:
    names = []
    for param in command.params:
        if isinstance(param, click.Option):
            names.extend(o for o in param.opts if o.startswith("--") and o != "--help")
    return names


def test_every_command_has_a_section_in_the_cli_reference() -> None:
    sections = _sections()
    missing = sorted(set(DOCUMENTED) - set(sections))
    assert not missing, f"commands missing from docs/cli.md: {', '.join(missing)}"
    stale = sorted(set(sections) - set(COMMANDS))
    assert not stale, f"docs/cli.md documents commands that do not exist: {', '.join(stale)}"


@pytest.mark.parametrize("path", DOCUMENTED)
def test_every_option_is_documented(path: str) -> None:
    section = _sections().get(path)
    if section is None:
        pytest.fail(f"no section for `tacho {path}` in docs/cli.md")
    undocumented = [o for o in _long_options(COMMANDS[path]) if f"`{o}" not in section]
    assert not undocumented, f"tacho {path}: options not in docs/cli.md: {undocumented}"


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_every_command_has_help(path: str) -> None:
    command = COMMANDS[path]
    assert (command.help or "").strip(), f"tacho {path} has no help text"
    assert command.get_short_help_str(limit=80).strip()
    result = CliRunner().invoke(cli, [*path.split(), "--help"])
    assert result.exit_code == EXIT_OK
    assert result.stdout.startswith(f"Usage: cli {path}") or result.stdout.startswith(
        f"Usage: tacho {path}"
    )


LEAVES = sorted(p for p, c in COMMANDS.items() if not isinstance(c, click.Group))


@pytest.mark.parametrize("path", LEAVES)
def test_every_command_but_data_output_has_json(path: str) -> None:
    if path in DATA_COMMANDS:
        assert "--json" not in _long_options(COMMANDS[path])
    else:
        assert "--json" in _long_options(COMMANDS[path]), f"tacho {path} has no --json"


def test_the_exit_codes_are_documented() -> None:
    text = CLI_MD.read_text()
    for line in (
        "| 0 | `EXIT_OK` |",
        "| 1 | `EXIT_FAILED` |",
        "| 2 | `EXIT_USAGE` |",
        "| 3 | `EXIT_STORE` |",
    ):
        assert line in text


def _readme_command(marker: str) -> str:
    lines = [x for x in README.read_text().splitlines() if marker in x and "python3 -m venv" in x]
    assert len(lines) == 1, f"the README should have one install line with {marker!r}"
    return lines[0].strip()


def test_ci_runs_the_readme_test_command() -> None:
    line = _readme_command("pytest")
    prefix = "python3 -m venv .venv && . .venv/bin/activate && "
    assert line.startswith(prefix)
    command = line.removeprefix(prefix)
    assert command == "pip install -e '.[dev]' && python -m pytest -q -p no:cacheprovider"
    # CI may quieten pip (-q changes only what pip prints); otherwise the line is the same.
    ci = [
        x.strip().replace("pip install -q ", "pip install ")
        for x in CI_RUN.read_text().splitlines()
    ]
    assert command in ci


def test_the_readme_demo_command() -> None:
    line = _readme_command("tacho demo")
    assert line == "python3 -m venv .venv && . .venv/bin/activate && pip install . && tacho demo"


@pytest.mark.parametrize(
    "doc",
    [README, *sorted((ROOT / "docs").glob("*.md"))],
    ids=lambda p: p.name,
)
def test_local_links_resolve(doc: Path) -> None:
    text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.DOTALL)
    text = re.sub(r"`[^`\n]*`", "", text)
    for target in re.findall(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)", text):
        assert (doc.parent / target).exists(), f"{doc.name} links to missing {target}"


def test_the_docs_index_links_every_page() -> None:
    index = (ROOT / "docs" / "index.md").read_text()
    pages = sorted(p.name for p in (ROOT / "docs").iterdir() if p.suffix in (".md", ".txt"))
    unlinked = [name for name in pages if name != "index.md" and f"]({name})" not in index]
    assert not unlinked, f"docs/index.md does not link to: {', '.join(unlinked)}"


def test_the_docs_pages_exist_and_the_tour_was_recorded() -> None:
    for name in ("index", "concepts", "format", "recording", "replay", "cli"):
        assert (ROOT / "docs" / f"{name}.md").is_file()
    tour = (ROOT / "docs" / "tour.txt").read_text()
    for expected in (
        "$ tacho demo",
        "DIVERGED",
        "check 5 (payload digest)",
        "$ tacho runs",
        "$ tacho show",
        "$ tacho replay",
        "$ tacho fork",
        "$ tacho verify",
    ):
        assert expected in tour
    assert "~/tour" in tour  # the session's directory, not the recording machine's paths


def test_the_readme_python_example_records_and_replays(
    tmp_path: Path, python: str, child_env: dict[str, str]
) -> None:
    stub = "    ...  # call your model; return its whole response as JSON"
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    (block,) = [b for b in blocks if stub in b]  # the recording example (others need an SDK)
    source = block.replace(
        stub, "    return {'city': request['messages'][-1]['content'].split()[-1]}"
    )
    (tmp_path / "weather_agent.py").write_text(source)
    proc = subprocess.run(
        [python, "weather_agent.py"],
        cwd=tmp_path,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "reproduced"
    assert (tmp_path / ".tachograph" / "tachograph.db").is_file()
