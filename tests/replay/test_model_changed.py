"""Model ids compared on every model call, and a fingerprint of what the agent declared.

The matrix: a model declared before recording, declared only after recording, or never
declared; the same model called, or another one. Each replay is labelled right: a
reproduction, a simulation (the declaration drifted), or a ``model_changed`` divergence at the
call's seq. Other ``@model`` functions imported into the process change nothing. Outside git
and without a declared version, the code version is a digest of the agent's source files."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

import tachograph as tg
from fakes.llm_server import FakeLLMServer
from tachograph.integrations.openai import instrument
from tachograph.replay.report import DivergenceKind


def make_model(model_id: str) -> Callable[..., Any]:
    @tg.model(model_id)
    def call(messages: list[Any]) -> dict[str, Any]:
        text = f"answer to {messages[-1]['content']}"
        return {"model": model_id, "choices": [{"message": {"content": text}}]}

    return call


M1 = make_model("acme-small-2026-01-01")
M2 = make_model("acme-large-2026-02-01")


def agent_calling(model: Callable[..., Any], *, models: tuple[Any, ...] = ()) -> tg.Agent:
    def agent(task: str) -> list[str]:
        out = []
        for step in ("plan", "act"):
            answer = model([{"role": "user", "content": f"{step}: {task}"}])
            out.append(answer["choices"][0]["message"]["content"])
        return out

    return tg.Agent(fn=agent, name="matrix", models=models, code_version="matrix-1")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "runs.db"


def record(db: Path, agent: tg.Agent, run_id: str) -> list[tg.Event]:
    tg.record_run(agent, "refund A-1", store=db, run_id=run_id)
    with tg.open_store(db) as store:
        return store.events(run_id)


def label(report: tg.ReplayReport) -> str:
    """reproduction, simulation, or the first divergence's kind."""
    if report.first is not None:
        return report.first.kind.value
    assert report.reproduced, report.render()
    return "simulation" if report.simulation else "reproduction"


def first_request(events: list[tg.Event]) -> int:
    return next(e.seq for e in events if e.type == "model.request")


def test_declared_before_recording(db: Path) -> None:
    events = record(db, agent_calling(M1, models=(M1,)), "before")
    assert events[0].payload["env"]["models"] == ["acme-small-2026-01-01"]
    assert label(tg.replay(db, "before", agent_calling(M1, models=(M1,)))) == "reproduction"
    # the declaration changed, and the agent calls the new model: both are said
    report = tg.replay(db, "before", agent_calling(M2, models=(M2,)))
    assert label(report) == "model_changed"
    assert report.first is not None
    assert report.first.seq == first_request(events)
    assert report.simulation
    assert [d.field for d in report.drift] == ["models"]
    # the declaration changed but the calls did not: a simulation
    both = tg.replay(db, "before", agent_calling(M1, models=(M1, M2)))
    assert label(both) == "simulation"
    # declared before, not declared now, same calls: the run's calls are within the record's
    assert label(tg.replay(db, "before", agent_calling(M1))) == "reproduction"


def test_declared_after_recording(db: Path) -> None:
    events = record(db, agent_calling(M1), "after")
    assert events[0].payload["env"]["models"] == []  # never everything imported
    # declaring the model the run used, after the fact, is no drift
    assert label(tg.replay(db, "after", agent_calling(M1, models=(M1,)))) == "reproduction"
    # declaring a model the run never used while it calls another is
    assert label(tg.replay(db, "after", agent_calling(M1, models=(M2,)))) == "simulation"
    report = tg.replay(db, "after", agent_calling(M2, models=(M2,)))
    assert label(report) == "model_changed"


def test_never_declared(db: Path) -> None:
    events = record(db, agent_calling(M1), "never")
    assert events[0].payload["env"]["models"] == []
    make_model("imported-later-2026-03-01")  # another @model appears in the process
    assert label(tg.replay(db, "never", agent_calling(M1))) == "reproduction"
    report = tg.replay(db, "never", agent_calling(M2), collect=True)
    assert [(d.kind, d.seq) for d in report.divergences] == [
        (DivergenceKind.MODEL_CHANGED, first_request(events)),
        (DivergenceKind.MODEL_CHANGED, first_request(events) + 2),
    ]
    first = report.first
    assert first is not None
    assert first.expected is not None
    assert first.actual is not None
    assert first.expected["model"] == "acme-small-2026-01-01"
    assert first.actual["model"] == "acme-large-2026-02-01"
    assert first.changes[0].path == "$.model"
    assert not report.simulation
    text = report.render()
    assert "model_changed" in text
    assert "'acme-large-2026-02-01'" in text
    assert report.to_dict()["first_divergence"]["kind"] == "model_changed"


def test_a_changed_model_over_the_openai_sdk(db: Path) -> None:
    with FakeLLMServer() as srv:
        client = instrument(openai.OpenAI(base_url=srv.openai_base_url, api_key="sk-test"))

        def agent_for(model: str) -> tg.Agent:
            def agent(task: str) -> str:
                done = client.chat.completions.create(
                    model=model, messages=[{"role": "user", "content": task}]
                )
                return str(done.choices[0].message.content)

            return tg.Agent(fn=agent, name="sdk", code_version="sdk-1")

        tg.record_run(agent_for("gpt-5.6"), "hello", store=db, run_id="sdk")
        assert label(tg.replay(db, "sdk", agent_for("gpt-5.6"))) == "reproduction"
        report = tg.replay(db, "sdk", agent_for("gpt-5.7"))
    assert label(report) == "model_changed"
    assert report.first is not None
    assert report.first.seq == 1
    paths = [c.path for c in report.first.changes]
    assert paths[0] == "$.model"
    assert "$.payload.request.model" in paths


# -- code_version outside git ------------------------------------------------------------------

AGENT_SOURCE = """
import tachograph as tg
from . import helper


@tg.tool(effect="pure")
def double(x: int) -> int:
    return helper.twice(x)


def agent(task):
    return double(x=task)
"""


@pytest.fixture
def package(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    name = f"agentpkg_{tmp_path.name.replace('-', '_')}"
    root = tmp_path / "src" / name
    root.mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "agent.py").write_text(AGENT_SOURCE)
    (root / "helper.py").write_text("def twice(x):\n    return 2 * x\n")
    sys.path.insert(0, str(tmp_path / "src"))
    try:
        yield root, name
    finally:
        sys.path.remove(str(tmp_path / "src"))
        for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[mod]


def test_outside_git_the_code_version_is_a_digest_of_the_agents_source(
    db: Path, package: tuple[Path, str]
) -> None:
    root, name = package
    module = importlib.import_module(f"{name}.agent")
    version = tg.Agent(fn=module.agent, name="pkg").fingerprint()["code_version"]
    assert isinstance(version, str)
    assert version.startswith("src:")
    tg.record_run(tg.Agent(fn=module.agent, name="pkg"), 21, store=db, run_id="pkg")
    same = tg.replay(db, "pkg", tg.Agent(fn=module.agent, name="pkg"))
    assert label(same) == "reproduction"
    # a change in another file of the agent's package changes the version
    (root / "helper.py").write_text("def twice(x):\n    return x + x\n")
    changed = tg.replay(db, "pkg", tg.Agent(fn=module.agent, name="pkg"))
    assert label(changed) == "simulation"
    assert [d.field for d in changed.drift] == ["code_version"]
    assert changed.drift[0].recorded == version
    assert str(changed.drift[0].current).startswith("src:")
    assert changed.drift[0].current != version


def test_a_local_module_under_an_installed_package_name_is_versioned_by_its_source(
    tmp_path: Path,
) -> None:
    # A module whose top-level name an installed distribution also provides (a local
    # ``agents.py`` beside openai-agents) was recorded with that distribution's version,
    # and its edits never showed as drift. Only a file the distribution installed is.
    import importlib.metadata
    import importlib.util

    import httpx

    from tachograph.capture.agent import code_version_of

    provided = importlib.metadata.packages_distributions()
    top = next(
        name
        for name in ("agents", *sorted(provided))
        if name in provided and name.isidentifier() and name not in sys.modules
    )

    def version_of(path: Path) -> str | None:
        spec = importlib.util.spec_from_file_location(top, path)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[top] = module
        try:
            spec.loader.exec_module(module)
            return code_version_of(module.agent)
        finally:
            del sys.modules[top]

    local = tmp_path / f"{top}.py"
    local.write_text("def agent(task):\n    return task\n")
    first = version_of(local)
    assert first is not None
    assert first.startswith("src:"), (top, first)
    local.write_text("def agent(task):\n    return [task]\n")
    assert version_of(local) not in (first, None)  # an edit is drift
    installed = code_version_of(httpx.Client.send)
    assert installed == f"httpx-{importlib.metadata.version('httpx')}"
