"""A PostgreSQL store across ``os.fork``: the child inherits the connection, a session's
socket shared with the parent. A child that used it interleaved its messages with the
parent's, and both sessions failed ("prepared statement "_pg3_0" does not exist" in the
child, "the last operation didn't produce records (command status: BEGIN)" in the parent).
Now the child's copy refuses, the child may open the store again, and the parent's session
goes on. Real processes, a real server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tachograph.store.postgres import PostgresStore

pytestmark = pytest.mark.skipif(
    not hasattr(os, "fork") or sys.platform == "darwin", reason="os.fork"
)

SCRIPT = textwrap.dedent(
    """
    import json, os, sys, warnings
    warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork of a threaded process
    import tachograph
    from tachograph.store.postgres import PostgresStore

    @tachograph.tool(effect="read", name="look")
    def look(i):
        return {"i": i}

    url, out_path = sys.argv[1], sys.argv[2]
    store = PostgresStore(url)
    with tachograph.record(store, actor="parent") as first:
        look(1)
    ids = [first.run_id]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the inherited copy refuses; a store of its own works
        os.close(read)
        result = {}
        try:
            for _ in range(50):
                store.runs()
        except tachograph.StoreUnavailable as exc:
            result["refused"] = str(exc)
        except BaseException as exc:
            result["other"] = f"{type(exc).__name__}: {exc}"
        store.close()  # the parent's connection: closing the child's copy does nothing
        own = PostgresStore(url)
        with tachograph.record(own, actor="child") as child_run:
            look(2)
        own.close()
        result["run_id"] = child_run.run_id
        os.write(write, json.dumps(result).encode())
        os._exit(0)
    os.close(write)
    errors = []
    for _ in range(200):  # the parent's session, while the child runs
        try:
            assert first.run_id in [r.run_id for r in store.runs()]
        except BaseException as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
    with os.fdopen(read) as pipe:
        child = json.loads(pipe.read())
    _, status = os.waitpid(pid, 0)
    with tachograph.record(store, actor="parent") as second:
        look(3)
    store.close()
    with open(out_path, "w") as f:
        json.dump({"child": child, "status": os.waitstatus_to_exitcode(status),
                   "errors": errors, "first": first.run_id, "second": second.run_id}, f)
    """
)


def test_a_forked_child_is_refused_the_parents_session_and_opens_its_own(
    pg_url: str, tmp_path: Path
) -> None:
    script = tmp_path / "agent.py"
    script.write_text(SCRIPT)
    out_path = tmp_path / "out.json"
    done = subprocess.run(
        [sys.executable, str(script), pg_url, str(out_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(out_path.read_text())
    assert out["status"] == 0
    assert out["errors"] == []  # the parent's session never saw the child's messages
    child = out["child"]
    assert "other" not in child, child
    assert "a PostgreSQL session must not cross a fork" in child["refused"]
    assert "PostgresStore(url)" in child["refused"]
    assert "password" not in child["refused"].lower()
    store = PostgresStore(pg_url)
    try:
        for run_id, actor in (
            (out["first"], "parent"),
            (child["run_id"], "child"),
            (out["second"], "parent"),
        ):
            assert store.verify(run_id).ok
            assert store.run_info(run_id).actor == actor
    finally:
        store.close()
