"""Opening stores by URL: built-in schemes, engines from entry points, and clear refusals."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from tachograph.errors import StoreError, StoreNotFound
from tachograph.store import MemoryStore, SQLiteStore, engines, open_store, registry
from tachograph.testing import build_run

ENGINE = '''
from tachograph.store.memory import MemoryStore


class EchoStore(MemoryStore):
    """A third-party engine: the memory engine under its own scheme."""

    @classmethod
    def from_url(cls, url, *, create=True):
        return cls(url.split("://", 1)[1], create=create)


NOT_A_STORE = object()
'''


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An installed distribution (on ``sys.path``) that declares three ``tachograph.stores``."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "tacho_echo_engine.py").write_text(ENGINE)
    info = site / "tacho_echo_engine-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tacho-echo-engine\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        textwrap.dedent(
            """\
            [tachograph.stores]
            echo = tacho_echo_engine:EchoStore
            broken = tacho_echo_engine_missing:Store
            notastore = tacho_echo_engine:NOT_A_STORE
            """
        )
    )
    monkeypatch.syspath_prepend(str(site))
    engines(refresh=True)
    yield site
    monkeypatch.undo()
    engines(refresh=True)
    sys.modules.pop("tacho_echo_engine", None)


def test_the_installed_metadata_declares_the_built_in_engines() -> None:
    declared = {p.name: p.value for p in entry_points(group=registry.ENTRY_POINT_GROUP)}
    assert declared["sqlite"] == "tachograph.store.sqlite:SQLiteStore"
    assert declared["memory"] == "tachograph.store.memory:MemoryStore"
    assert registry.engine("sqlite") is SQLiteStore
    assert registry.engine("memory") is MemoryStore
    assert {"sqlite", "memory"} <= set(engines())


def test_an_unknown_scheme_names_every_known_one(tmp_path: Path) -> None:
    with pytest.raises(StoreError) as info:
        open_store("nosuchdb://localhost/runs")
    message = str(info.value)
    assert "'nosuchdb'" in message
    assert "memory:// or memory://NAME" in message
    assert "sqlite:///path.db" in message
    assert "tachograph.stores" in message  # how an engine joins
    assert info.value.location == "nosuchdb://"
    with pytest.raises(StoreError, match="neither a store URL nor a file path"):
        open_store("not a scheme://x")


def test_plain_paths_and_path_objects_still_mean_sqlite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for target in ("plain.db", tmp_path / "as-path.db", str(tmp_path / "absolute.db")):
        with open_store(target) as store:
            assert isinstance(store, SQLiteStore)
            store.append(build_run("run-a", 1))
    assert (tmp_path / "plain.db").is_file()
    with pytest.raises(StoreNotFound):
        open_store(tmp_path / "missing.db", create=False)
    assert not (tmp_path / "missing.db").exists()


def test_an_engine_is_found_through_its_entry_point(plugin: Path) -> None:
    assert engines()["echo"] == "tacho_echo_engine:EchoStore"
    store = open_store("echo://shared-by-name")
    try:
        assert type(store).__name__ == "EchoStore"
        assert isinstance(store, MemoryStore)
        store.append(build_run("run-a", 2))
        with open_store("memory://shared-by-name", create=False) as same:
            assert same.count_events() == 2
    finally:
        store.close()
        MemoryStore.discard("shared-by-name")
    with pytest.raises(StoreError, match=r"known schemes: .*echo://"):
        open_store("nosuchdb://x")


def test_an_engine_that_cannot_load_is_refused_naming_it(plugin: Path) -> None:
    with pytest.raises(StoreError) as info:
        open_store("broken://x")
    assert "broken://" in str(info.value)
    assert "tacho_echo_engine_missing" in str(info.value)
    assert isinstance(info.value.__cause__, ImportError)
    with pytest.raises(StoreError, match="is not a tachograph Store class"):
        open_store("notastore://x")


def test_built_in_schemes_do_not_scan_installed_packages(tmp_path: Path) -> None:
    probe = textwrap.dedent(
        f"""
        import json
        from tachograph.store import open_store, registry
        for url in ("sqlite:///{tmp_path / "a.db"}", "memory://", "{tmp_path / "b.db"}"):
            open_store(url).close()
        print(json.dumps(registry._installed.cache_info().misses))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert json.loads(out.stdout) == 0
