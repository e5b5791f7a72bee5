"""The import contract of docs/architecture.md, checked on the source (an AST walk, no imports).

A module imports only its own package or the layers below it; nothing imports the CLI; no name
beginning with ``_`` is imported from another module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "tachograph"

# package -> the packages it may import (its own always allowed). Top-level modules
# (``errors``, ``_version``) are named as packages of their own.
ALLOWED: dict[str, set[str]] = {
    "_version": set(),
    "errors": set(),
    "record": {"errors", "_version"},
    "store": {"errors", "_version", "record"},
    # providers is pure wire-shape knowledge (it imports only record): capture derives prompt
    # hashes with it and replay compares requests in its provider-neutral form.
    # privacy (redaction) is pure processing over record's values: capture runs it by default
    # in every recording, replay pins it to a recording's key.
    "capture": {"errors", "_version", "record", "store", "providers", "privacy"},
    "sealing": {"errors", "_version", "record", "store", "capture"},
    # lifecycle names an erased data subject in the audit by its keyed token (privacy.keys)
    "lifecycle": {"errors", "_version", "record", "store", "capture", "privacy"},
    "privacy": {"errors", "_version", "record"},
    # replay reads a stored run for a purpose (lifecycle.purpose), as every payload read does,
    # and holds it against its seals (sealing), as ``tacho verify RUN`` does
    "replay": {
        "errors",
        "_version",
        "record",
        "store",
        "capture",
        "providers",
        "privacy",
        "lifecycle",
        "sealing",
    },
    "providers": {"errors", "_version", "record"},
}
_BELOW_TOP = {
    "errors",
    "_version",
    "record",
    "store",
    "capture",
    "sealing",
    "lifecycle",
    "privacy",
    "replay",
    "providers",
}
for upper in ("integrations", "otel", "regression", "views", "testing", "demo"):
    ALLOWED[upper] = _BELOW_TOP | {"integrations", "otel", "regression", "views", "testing"}
# The store doctor checks what every feature keeps (chains, seals, blobs): it sits above them.
ALLOWED["doctor"] = set(_BELOW_TOP)
# Example agents are written as users write them: against the facade.
FACADE_USERS = {"demo"}
# The top: the facade, the CLI, the pytest plugin, a server; nothing imports them.
TOP = {"__init__", "cli", "server", "pytest_plugin", "__main__"}


def _package_of(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".py") if rel.parts else "__init__"


def _imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """``(line, absolute module, names)`` for every import inside tachograph."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    rel = path.relative_to(SRC).with_suffix("")
    parts = ["tachograph", *rel.parts]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    package = parts if path.name == "__init__.py" else parts[:-1]
    out = []
    # Imports under ``if TYPE_CHECKING:`` are for annotations only and never run.
    typing_only = {
        id(child)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for stmt in node.body
        for child in ast.walk(stmt)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            if module.split(".")[0] == "tachograph":
                out.append((node.lineno, module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "tachograph":
                    out.append((node.lineno, alias.name, []))
    return out


def _files() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py"))


def test_the_source_tree_is_where_the_contract_expects_it() -> None:
    packages = {_package_of(p) for p in _files()}
    assert {"record", "store", "capture", "replay", "cli"} <= packages


@pytest.mark.parametrize("path", _files(), ids=lambda p: str(p.relative_to(SRC)))
def test_imports_respect_the_layers(path: Path) -> None:
    here = _package_of(path)
    problems = []
    for line, module, _names in _imports(path):
        parts = module.split(".")
        target = parts[1] if len(parts) > 1 else "__init__"
        if target in TOP - {"__init__"} and here != target:
            problems.append(f"line {line}: imports {module} (nothing imports the top layer)")
            continue
        if here in TOP or target == here:
            continue
        if target == "__init__":
            if here not in FACADE_USERS:
                problems.append(f"line {line}: imports the tachograph facade")
            continue
        allowed = ALLOWED.get(here)
        if allowed is None:
            problems.append(f"package {here!r} is not in the layer table of this test")
            break
        if target not in allowed:
            problems.append(f"line {line}: {here} imports {module} (a layer above it)")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", _files(), ids=lambda p: str(p.relative_to(SRC)))
def test_no_private_name_is_imported_from_another_module(path: Path) -> None:
    problems = []
    for line, module, names in _imports(path):
        for name in names:
            if name.startswith("_") and not name.startswith("__"):
                problems.append(f"line {line}: from {module} import {name}")
        last = module.rsplit(".", 1)[-1]
        if last.startswith("_") and not last.startswith("__") and last != "_version":
            problems.append(f"line {line}: imports the private module {module}")
    assert not problems, "\n".join(problems)
