"""Ways out of a replay that no patched call sees, each refused and reported: a process
multiprocessing starts by "spawn" (``_posixsubprocess.fork_exec``, no audit event), a
pseudo-terminal's child (``pty.fork``), a connect on the socket module's own ``_socket``
type, and a datagram sent with ``sendmsg``. The world is real: the child writes a file, the
listeners on 127.0.0.1 count what reaches them."""

from __future__ import annotations

import _socket
import _thread
import multiprocessing
import os
import pty
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import tachograph as tg
from tachograph.replay.report import DivergenceKind


@pytest.fixture
def listeners() -> Iterator[tuple[int, int, list[str]]]:
    """A TCP and a UDP listener on 127.0.0.1: their ports, and what reached them."""
    reached: list[str] = []
    tcp = socket.create_server(("127.0.0.1", 0))
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        tcp.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = tcp.accept()
                conn.close()
                reached.append("tcp")
            except OSError:
                pass
            try:
                udp.recv(64)
                reached.append("udp")
            except OSError:
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield tcp.getsockname()[1], udp.getsockname()[1], reached
    finally:
        stop.set()
        thread.join(5)
        tcp.close()
        udp.close()


def _spawned(marker: Path) -> None:
    process = multiprocessing.get_context("spawn").Process(target=Path.touch, args=(marker,))
    process.start()
    process.join(60)


def _pty_child(marker: Path) -> None:
    pid, fd = pty.fork()
    if pid == 0:  # the child: leave a mark and go, with no cleanup of the parent's
        marker.touch()
        os._exit(0)
    os.waitpid(pid, 0)
    os.close(fd)


def _raw_connect(port: int) -> None:
    sock = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    try:
        sock.connect(("127.0.0.1", port))
    finally:
        sock.close()


def _sendmsg(port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.sendmsg([b"x"], [], 0, ("127.0.0.1", port))


def _replays_refuse(
    tmp_path: Path, escape: Callable[[], None], reached: Callable[[], int], kind: str
) -> None:
    @tg.tool(effect="read")
    def lookup(order: str) -> dict[str, Any]:
        return {"order": order}

    def agent(task: Any) -> Any:
        found = lookup(order="A-1")
        escape()  # undecorated: the record does not know of it
        return found

    store = tg.open_store(tmp_path / "runs.db")
    tg.record_run(agent, None, store=store, run_id="out-1")
    assert reached() == 1  # recording is not guarded: the world was reached
    report = tg.replay(store, "out-1", agent)
    assert reached() == 1, "the replay reached the world"
    assert not report.reproduced
    first = report.first
    assert first is not None
    assert first.actual is not None
    assert first.kind is DivergenceKind.UNRECORDED_CALL
    assert first.actual["type"] == kind
    store.close()


def _arrivals(reached: list[str], kind: str) -> Callable[[], int]:
    """How many ``kind`` arrivals the listeners saw, once their loop has come round."""

    def count() -> int:
        threading.Event().wait(0.5)
        return reached.count(kind)

    return count


def test_a_process_started_by_spawn_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "spawned"
    count = lambda: int(marker.exists())  # noqa: E731
    _replays_refuse(tmp_path, lambda: _spawned(marker), count, "process.spawn")


def test_a_pty_fork_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "forked"
    count = lambda: int(marker.exists())  # noqa: E731
    _replays_refuse(tmp_path, lambda: _pty_child(marker), count, "process.spawn")


def test_a_connect_of_the_raw_socket_type_is_refused(
    tmp_path: Path, listeners: tuple[int, int, list[str]]
) -> None:
    tcp, _udp, reached = listeners
    count = _arrivals(reached, "tcp")
    _replays_refuse(tmp_path, lambda: _raw_connect(tcp), count, "network.connect")


def test_a_datagram_sent_with_sendmsg_is_refused(
    tmp_path: Path, listeners: tuple[int, int, list[str]]
) -> None:
    _tcp, udp, reached = listeners
    count = _arrivals(reached, "udp")
    _replays_refuse(tmp_path, lambda: _sendmsg(udp), count, "network.connect")


def _raw_thread(port: int) -> None:
    done = threading.Event()

    def reach() -> None:
        try:
            _raw_connect(port)
        except ConnectionError:
            pass  # the refusal (an UnrecordedCall is a ConnectionRefusedError)
        finally:
            done.set()

    _thread.start_new_thread(reach, ())
    done.wait(10)


def test_a_thread_started_with_the_low_level_module_is_followed(
    tmp_path: Path, listeners: tuple[int, int, list[str]]
) -> None:
    tcp, _udp, reached = listeners
    count = _arrivals(reached, "tcp")
    _replays_refuse(tmp_path, lambda: _raw_thread(tcp), count, "network.connect")
