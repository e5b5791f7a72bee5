"""A worker that dies in the middle of sending a task's result to the calling process.

CPython's executor reads a result whole: a worker killed while it writes a large one (the
kernel's out-of-memory killer, a ``kill -9``) leaves the executor's thread waiting for the
rest of it, which never comes (the calling process holds the pipe's writing end too, so the
read never ends). The pool then never breaks and a verification with workers waited for
ever. Each scenario runs in a process of its own (a real worker, a real death), under a
timeout: a call that waits for ever fails the test instead of hanging the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    sys.platform == "win32", reason="the scenario writes to the executor's pipe by its fd"
)

HELPER = '''
"""Tasks for the scenario (a module of their own, which the spawned worker imports)."""
import multiprocessing
import os
import struct
import sys


def half_sent(source, task):
    """In a worker: write the start of a result message, a header announcing a megabyte
    and ten bytes of it, onto the executor's result pipe, then die (as a worker killed in
    the middle of sending a large result). In the calling process: the task's number."""
    if multiprocessing.parent_process() is None:
        return task
    frame = sys._getframe()
    while frame is not None and "result_queue" not in frame.f_locals:
        frame = frame.f_back
    if frame is None:  # not CPython's worker loop: no mark, the test is skipped
        os._exit(9)
    writer = frame.f_locals["result_queue"]._writer
    with open(os.environ["HALF_SENT_MARK"], "w") as mark:
        mark.write("half sent")
    os.write(writer.fileno(), struct.pack("!i", 1 << 20) + b"x" * 10)
    os._exit(9)


def quick(source, task):
    return task


def interrupts_here(source, task):
    """In the calling process (which takes the last task first): a Ctrl-C a second in,
    before the pool is found stuck."""
    import time

    time.sleep(1.0)
    raise KeyboardInterrupt
'''

SCENARIO = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
import half_sent_tasks as tasks
from tachograph.store import SQLiteStore
from tachograph.store.parallel import _Pool

store = SQLiteStore(sys.argv[2])
with _Pool(store, "sqlite:///" + sys.argv[2], int(sys.argv[3])) as pool:
    t0 = time.monotonic()
    got = pool.run([(tasks.half_sent, ())] + [(tasks.quick, ())] * 11, [1] * 12, None)
    broken, unstuck = pool.broken, pool.unstuck
print(json.dumps({"got": got, "broken": broken, "unstuck": unstuck,
                  "seconds": time.monotonic() - t0}))
"""


INTERRUPTED = """
import json, sys, threading, time
sys.path.insert(0, sys.argv[1])
import half_sent_tasks as tasks
from tachograph.store import SQLiteStore
from tachograph.store.parallel import _Pool

store = SQLiteStore(sys.argv[2])
calls = [(tasks.half_sent, ())] + [(tasks.quick, ())] * 3 + [(tasks.interrupts_here, ())]
try:
    with _Pool(store, "sqlite:///" + sys.argv[2], int(sys.argv[3])) as pool:
        pool.run(calls, [1] * len(calls), None)
except KeyboardInterrupt:
    print(json.dumps({"interrupted": True, "unstuck": pool.unstuck}), flush=True)
"""


def _run(tmp_path: Path, workers: int, scenario: str = SCENARIO) -> dict[str, object]:
    (tmp_path / "half_sent_tasks.py").write_text(textwrap.dedent(HELPER))
    store = tmp_path / "s.db"
    mark = tmp_path / "half-sent"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path]),
        "HALF_SENT_MARK": str(mark),
    }
    try:
        done = subprocess.run(
            [sys.executable, "-c", scenario, str(tmp_path), str(store), str(workers)],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the verification waited for ever on a half-sent result: {exc.stderr!r}")
    assert done.returncode == 0, done.stderr
    if not mark.exists():
        pytest.skip("the worker found no result pipe to write to (not CPython's worker loop)")
    result: dict[str, object] = json.loads(done.stdout)
    return result


@pytest.mark.parametrize("workers", [2, 3])
def test_a_worker_dying_half_way_through_a_result_breaks_the_pool(
    tmp_path: Path, workers: int
) -> None:
    """The call returns: the pool is broken, the task whose result was cut short (and any
    other a worker held) failed (``None``), and every other task ran, here or in a worker,
    with its own result."""
    result = _run(tmp_path, workers)
    assert result["broken"] is True
    assert result["unstuck"] is True  # the feeder ended the pool, as the executor could not
    seconds = result["seconds"]
    assert isinstance(seconds, float)
    assert seconds < 30  # two seconds after the death, not a timeout of some other kind
    got = result["got"]
    assert isinstance(got, list)
    assert len(got) == 12
    assert got[0] is None  # its worker died half way through sending its result
    done = [i for i, value in enumerate(got) if value is not None]
    assert all(got[i] == i for i in done)
    # the tasks a worker held when the pool broke fail (at most two a worker); the calling
    # process runs every other one
    assert len(done) >= 12 - 2 * (workers - 1)


def test_an_interrupt_while_a_result_is_half_sent_still_lets_the_process_end(
    tmp_path: Path,
) -> None:
    """Ctrl-C in the calling process before the pool is found stuck ends the pool there
    and then: ending the workers closes this process's end of the result pipe too, so the
    executor's thread, still reading the half-sent result, ends and the interpreter's exit
    (which joins that thread) does not wait for ever."""
    result = _run(tmp_path, 2, INTERRUPTED)
    assert result == {"interrupted": True, "unstuck": False}
