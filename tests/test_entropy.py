"""Salts and ULID randomness come from a per-process buffer of os.urandom: never repeated,
and never shared with a forked child."""

from __future__ import annotations

import os
import threading

import pytest

from tachograph.record.entropy import POOL_BYTES, pool, random_bytes
from tachograph.record.event import new_event


def test_draws_are_distinct_across_many_refills() -> None:
    draws = [random_bytes(16) for _ in range(POOL_BYTES // 16 * 5)]
    assert all(len(d) == 16 for d in draws)
    assert len(set(draws)) == len(draws)


def test_threads_never_receive_the_same_bytes() -> None:
    out: list[list[bytes]] = [[] for _ in range(4)]

    def draw(i: int) -> None:
        out[i].extend(random_bytes(10) for _ in range(3000))

    threads = [threading.Thread(target=draw, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [d for chunk in out for d in chunk]
    assert len(set(every)) == len(every) == 12_000


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_does_not_reuse_the_parents_buffer() -> None:
    random_bytes(16)  # the buffer is filled and partly used
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        os.write(write, b"".join(random_bytes(16) for _ in range(64)))
        os._exit(0)
    os.close(write)
    child = b""
    while chunk := os.read(read, 4096):
        child += chunk
    os.close(read)
    os.waitpid(pid, 0)
    parent = b"".join(random_bytes(16) for _ in range(64))
    assert len(child) == len(parent) == 1024
    child_draws = {child[i : i + 16] for i in range(0, 1024, 16)}
    parent_draws = {parent[i : i + 16] for i in range(0, 1024, 16)}
    assert child_draws.isdisjoint(parent_draws)


def test_events_get_distinct_salts_and_ids() -> None:
    events = [
        new_event(run_id=f"r{i}", seq=0, type="run.started", actor="a", payload={}, prev_hash=None)
        for i in range(2000)
    ]
    assert len({e.salt for e in events}) == 2000
    assert len({e.event_id for e in events}) == 2000
    assert all(len(bytes.fromhex(e.salt)) == 16 for e in events)


def test_the_pool_is_the_one_random_bytes_draws_from() -> None:
    """A draw taken from ``pool(n)`` directly (new events take their salt so) is never handed
    out again by ``random_bytes(n)``."""
    ready = pool(16)
    assert pool(16) is ready
    first = random_bytes(16)  # fills the pool if it was empty
    assert ready, "a refill leaves the rest of its draws in the pool"
    taken = ready.popleft()
    rest = [random_bytes(16) for _ in range(2 * POOL_BYTES // 16)]
    assert taken not in rest
    assert first not in rest
    assert len(set(rest)) == len(rest)
