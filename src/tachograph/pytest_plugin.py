"""The pytest plugin: every run of a corpus of saved runs becomes one test.

From the command line, next to a project's own tests::

    pytest --tacho-corpus corpus/demo --tacho-agent tachograph.demo.agent:billing_agent

or inside a test module, with the ``tacho_corpus`` marker and the ``tacho_result`` fixture
(one test per run; the fixture replays the run and returns its
:class:`~tachograph.regression.CaseResult`)::

    @pytest.mark.tacho_corpus("corpus/demo", agent="tachograph.demo.agent:billing_agent")
    def test_demo_corpus(tacho_result):
        assert tacho_result.passed, tacho_result.render()

A failing run's failure text is its divergence report (or why it could not be replayed).

The plugin is registered as the ``tachograph`` entry point of ``pytest11`` and so loads in
every pytest session of whoever installs tachograph: importing it imports pytest and the
standard library only; the replay machinery is imported when a corpus is asked for.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from _pytest._code.code import TerminalRepr, TracebackStyle

    from .regression.runner import CaseResult, CorpusRun

__all__ = ["TachoCorpus", "TachoRunItem"]

_AGENTS: dict[str, Any] = {}


def _agent(target: str) -> Any:
    """The agent for ``module:attr``, imported once per process."""
    agent = _AGENTS.get(target)
    if agent is None:
        from .capture.loader import load_agent

        agent = _AGENTS[target] = load_agent(target)
    return agent


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--tacho-corpus DIR`` (repeatable), ``--tacho-agent MODULE:ATTR``, ``--tacho-match``."""
    group = parser.getgroup("tachograph", "tachograph: replay a corpus of saved runs")
    group.addoption(
        "--tacho-corpus",
        action="append",
        default=[],
        metavar="DIR",
        help="Add one test per saved run under DIR (repeatable); needs --tacho-agent.",
    )
    group.addoption(
        "--tacho-agent",
        default=None,
        metavar="MODULE:ATTR",
        help="The agent the corpus is replayed against, e.g. tachograph.demo.agent:billing_agent.",
    )
    group.addoption(
        "--tacho-match",
        default="strict",
        choices=("strict", "key"),
        help="Replay matching: strict (recorded order, default) or key (idempotency keys).",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker; refuse a corpus without an agent."""
    config.addinivalue_line(
        "markers",
        "tacho_corpus(dir, agent=None, match='strict'): parametrize the test's tacho_result "
        "fixture with every saved run under dir (relative to the rootdir), replayed against "
        "agent (module:attr; default --tacho-agent).",
    )
    for verdict in ("good", "bad"):
        config.addinivalue_line(
            "markers",
            f"tacho_{verdict}: a saved run of a tacho corpus whose verdict is {verdict} "
            "(added by the plugin; select with -m).",
        )
    if config.getoption("tacho_corpus") and not config.getoption("tacho_agent"):
        raise pytest.UsageError("--tacho-corpus needs --tacho-agent MODULE:ATTR")


class TachoRunFailed(Exception):
    """Raised by a corpus test whose run did not pass; carries the result."""

    def __init__(self, result: CaseResult) -> None:
        super().__init__(result.reason)
        self.result = result


class TachoRunItem(pytest.Item):
    """One saved run, replayed against the agent when the test runs."""

    def __init__(self, *, entry: CorpusRun, agent: str, match: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.entry = entry
        self.agent = agent
        self.match = match

    def runtest(self) -> None:
        """Replay the run; fail with its report unless it is reproduced or fixed."""
        from .regression.runner import check_run

        result = check_run(self.entry, _agent(self.agent), match=self.match)
        self.user_properties.append(("tacho_outcome", result.outcome.value))
        if result.seq is not None:
            self.user_properties.append(("tacho_seq", result.seq))
        if not result.passed:
            raise TachoRunFailed(result)

    def repr_failure(
        self,
        excinfo: pytest.ExceptionInfo[BaseException],
        style: TracebackStyle | None = None,
    ) -> str | TerminalRepr:
        """The divergence report, not a traceback into the replay engine."""
        if isinstance(excinfo.value, TachoRunFailed):
            return excinfo.value.result.render()
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        """Where the run lives, for the report header."""
        return self.path, None, f"tacho corpus run {self.name}"


class TachoCorpus(pytest.Collector):
    """A corpus folder; collects one :class:`TachoRunItem` per saved run."""

    def __init__(self, *, agent: str, match: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.agent = agent
        self.match = match

    def collect(self) -> list[TachoRunItem]:
        """One item per saved run, in corpus order, marked ``tacho_corpus`` and by its
        verdict (``tacho_good``, ``tacho_bad``), for ``-m``."""
        from .regression.runner import load_corpus

        items = []
        for entry in load_corpus(self.path):
            item = TachoRunItem.from_parent(
                self,
                name=entry.name,
                path=entry.path,
                nodeid=f"{self.nodeid}::{entry.name}",
                entry=entry,
                agent=self.agent,
                match=self.match,
            )
            for mark in _marks(entry):
                item.add_marker(mark)
            items.append(item)
        return items


def _marks(entry: CorpusRun) -> list[pytest.MarkDecorator]:
    """``tacho_corpus`` and the verdict's mark (none for a verdict its sidecar cannot say)."""
    marks = [pytest.mark.tacho_corpus]
    if entry.verdict is not None:
        marks.append(getattr(pytest.mark, f"tacho_{entry.verdict.value}"))
    return marks


def _no_runs(what: str, path: Path) -> pytest.UsageError:
    return pytest.UsageError(
        f"{what}: no saved runs in {path} (an empty corpus tests nothing: a wrong path, or "
        "files not checked out?); save runs into it with: tacho save RUN --to DIR --verdict good"
    )


def _node_path(config: pytest.Config, path: Path) -> str:
    try:
        return path.relative_to(config.rootpath).as_posix()
    except ValueError:
        return path.as_posix()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Add the corpus runs before selection (``-k``, ``-m``) and reporting see the items."""
    folders: list[str] = config.getoption("tacho_corpus")
    if not folders:
        return
    from .errors import TachographError

    target: str = config.getoption("tacho_agent")
    try:
        _agent(target)
    except TachographError as exc:
        raise pytest.UsageError(f"--tacho-agent: {exc}") from exc
    for folder in folders:
        path = (config.invocation_params.dir / folder).resolve()
        if not path.is_dir():
            raise pytest.UsageError(f"--tacho-corpus: no such directory: {folder}")
        corpus = TachoCorpus.from_parent(
            session,
            name=folder,
            path=path,
            nodeid=_node_path(config, path),
            agent=target,
            match=config.getoption("tacho_match"),
        )
        found = corpus.collect()
        if not found:
            raise _no_runs(f"--tacho-corpus {folder}", path)
        # Reported like a collected file, so "collected N items" counts the runs too.
        config.hook.pytest_collectreport(
            report=pytest.CollectReport(corpus.nodeid, "passed", None, list(found))
        )
        items.extend(found)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize ``tacho_result`` of a test marked ``tacho_corpus`` with the corpus runs."""
    marker = metafunc.definition.get_closest_marker("tacho_corpus")
    if marker is None or "tacho_result" not in metafunc.fixturenames:
        return
    from .regression.runner import CorpusError, load_corpus

    folder = marker.args[0] if marker.args else marker.kwargs.get("dir")
    if not folder:
        raise pytest.UsageError("@pytest.mark.tacho_corpus needs the corpus directory")
    where = f"@pytest.mark.tacho_corpus({str(folder)!r}) on {metafunc.definition.nodeid}"
    if not (marker.kwargs.get("agent") or metafunc.config.getoption("tacho_agent")):
        raise pytest.UsageError(f"{where}: give agent='module:attr' or --tacho-agent")
    path = metafunc.config.rootpath / str(folder)
    try:
        entries = load_corpus(path)
    except CorpusError as exc:
        raise pytest.UsageError(
            f"{where}: {exc} (the directory is relative to the rootdir, {metafunc.config.rootpath})"
        ) from None
    if not entries:
        raise _no_runs(where, path)
    params = [pytest.param(e, marks=_marks(e)[1:], id=e.name) for e in entries]
    metafunc.parametrize("tacho_result", params, indirect=True)


@pytest.fixture
def tacho_result(request: pytest.FixtureRequest) -> CaseResult:
    """The replay of one saved run (parametrized by the ``tacho_corpus`` marker)."""
    from .regression.runner import CorpusRun, check_run

    entry = getattr(request, "param", None)
    if not isinstance(entry, CorpusRun):
        raise pytest.UsageError(
            "the tacho_result fixture needs @pytest.mark.tacho_corpus('DIR', agent=...) on the test"
        )
    marker = request.node.get_closest_marker("tacho_corpus")
    kwargs = marker.kwargs if marker is not None else {}
    target = kwargs.get("agent") or request.config.getoption("tacho_agent")
    if not target:
        raise pytest.UsageError("tacho_corpus: give agent='module:attr' or --tacho-agent")
    return check_run(entry, _agent(str(target)), match=str(kwargs.get("match", "strict")))
