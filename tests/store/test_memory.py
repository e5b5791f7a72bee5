"""The memory reference engine: the conformance suite, then what only it does (names, URLs)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from tachograph.errors import StoreNotFound
from tachograph.store import MemoryStore, Store, open_store, verify_stored
from tachograph.testing import build_run
from tachograph.testing.conformance import StoreConformance

_names = itertools.count()


class TestMemoryStore(StoreConformance):
    """Named by the test's directory, so that a store made again from it sees the same runs."""

    @pytest.fixture(autouse=True)
    def _discard(self) -> Iterator[None]:
        self.made: list[str] = []
        yield
        for name in self.made:
            MemoryStore.discard(name)

    def make_store(self, tmp_path: Path) -> Store:
        name = f"conformance:{tmp_path}"
        if name not in self.made:
            self.made.append(name)
        return open_store(f"memory://{name}")


class TestPrivateMemoryStore(StoreConformance):
    """``memory://``: a new, empty store each time."""

    persistent = False
    stream_events = 20_000

    def make_store(self, tmp_path: Path) -> Store:
        return open_store("memory://")


@pytest.fixture
def name() -> Iterator[str]:
    name = f"test-memory-{next(_names)}"
    yield name
    MemoryStore.discard(name)


def test_a_named_store_is_shared_within_the_process(name: str) -> None:
    events = build_run("run-a", 3)
    with open_store(f"memory://{name}") as writer, open_store(f"memory://{name}") as reader:
        assert isinstance(writer, MemoryStore)
        writer.append(events)
        assert list(reader.read("run-a")) == events
        assert reader.url == f"memory://{name}"
    with open_store(f"memory://{name}", create=False) as again:
        assert verify_stored(again, "run-a").ok
    MemoryStore.discard(name)
    with pytest.raises(StoreNotFound):
        open_store(f"memory://{name}", create=False)


def test_private_stores_share_nothing() -> None:
    with open_store("memory://") as one, open_store("memory://") as two:
        one.append(build_run("run-a", 2))
        assert two.count_events() == 0
        assert one.url == "memory://"
    with pytest.raises(StoreNotFound, match="memory://NAME"):
        open_store("memory://", create=False)
