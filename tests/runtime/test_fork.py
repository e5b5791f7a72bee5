"""A process forked while it records: the child inherits the run's recorder but not the
writer thread, and must not add to the parent's chain. It had: a durable call in the child
appended the child's events (and the queue it inherited) under the seqs the parent was
about to use, so the parent's next commit was refused as a conflict and its run was left
incomplete; and a child that left the run's block waited for a writer thread that was
never there. Real processes (``os.fork``, a ``multiprocessing`` pool), real SQLite files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    not hasattr(os, "fork") or sys.platform == "darwin", reason="os.fork"
)

PRELUDE = textwrap.dedent(
    """
    import contextlib, contextvars, json, os, sys, threading, warnings
    warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork of a threaded process
    import tachograph
    from tachograph.store.sqlite import SQLiteStore

    @tachograph.tool(effect="read", name="look")
    def look(i):
        return {"i": i}

    @tachograph.tool(effect="write", name="send")
    def send(i):
        with open(sys.argv[1] + ".sent", "a") as f:  # the effect
            f.write(f"{i}\\n")
        return {"sent": i}

    store = SQLiteStore(sys.argv[1])
    out = {}

    def in_child(fn):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                result = fn()
            except BaseException as exc:
                result = {"error": type(exc).__name__, "message": str(exc)}
            os.write(w, json.dumps(result).encode())
            os._exit(0)
        os.close(w)
        data = b""
        while chunk := os.read(r, 65536):
            data += chunk
        os.waitpid(pid, 0)
        return json.loads(data)

    @contextlib.contextmanager
    def two_threads_calling(tool):
        # two threads of the agent calling ``tool`` with numbers of their own until the
        # block ends
        stop = threading.Event()

        def busy(base):
            i = base
            while not stop.is_set():
                tool(i)
                i += 1

        threads = [threading.Thread(target=busy, args=(k * 10**6,)) for k in (1, 2)]
        for t in threads:
            t.start()
        try:
            yield
        finally:
            stop.set()
            for t in threads:
                t.join()

    def own_run():
        # in a child: a run of its own, in a store it opens, from a new context (as in a
        # process started by "spawn"), so with a writer of its own

        def record_it():
            own = SQLiteStore(sys.argv[1] + ".child")
            with tachograph.record(own, actor="child") as child_run:
                look(7)
            own.close()
            return {"run_id": child_run.run_id}

        return contextvars.Context().run(record_it)
    """
)


def _run(tmp_path: Path, body: str) -> dict[str, object]:
    script = tmp_path / "agent.py"
    script.write_text(PRELUDE + textwrap.dedent(body) + "\nprint(json.dumps(out))\n")
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "runs.db")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _tools_of(tmp_path: Path, run_id: str, db: str = "runs.db") -> list[tuple[str, object]]:
    """The tool requests of a run that verifies, in the store file ``db``."""
    from tachograph.store.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / db)
    try:
        assert store.verify(run_id).ok
        return [
            (e.type, e.payload.get("args"))
            for e in store.read(run_id)
            if e.type == "tool.requested"
        ]
    finally:
        store.close()


def test_a_forked_child_cannot_add_to_the_parents_run_and_the_parent_goes_on(
    tmp_path: Path,
) -> None:
    out = _run(
        tmp_path,
        """
        with tachograph.record(store, actor="t") as run:
            look(1)
            out["read"] = in_child(lambda: look(2))
            out["write"] = in_child(lambda: send(3))
            look(4)
            send(5)
        out["run_id"] = run.run_id
        """,
    )
    for call in ("read", "write"):
        child = out[call]
        assert isinstance(child, dict)
        assert child["error"] == "WriteFailed", child
        assert "is not process" in child["message"]
        assert "was forked from it" in child["message"]
        assert "one writer" in child["message"]
    # the child's write never took effect: its intent was refused before the body ran
    assert (tmp_path / "runs.db.sent").read_text().split() == ["5"]
    # the parent's run holds its own calls only, in order, and verifies
    assert _tools_of(tmp_path, str(out["run_id"])) == [
        ("tool.requested", {"i": 1}),
        ("tool.requested", {"i": 4}),
        ("tool.requested", {"i": 5}),
    ]


def test_a_child_that_leaves_the_runs_block_is_told_instead_of_waiting(tmp_path: Path) -> None:
    """The child's flush waited for a writer thread it never had (here, within the
    subprocess's timeout: it hung)."""
    out = _run(
        tmp_path,
        """
        def leave():
            # the child finishes the run's block it inherited: run.finished is refused
            run.__exit__(None, None, None)
            return {"left": True}

        run = tachograph.record(store, actor="t")
        run.__enter__()
        look(1)
        out["child"] = in_child(leave)
        look(2)
        run.__exit__(None, None, None)
        out["run_id"] = run.run_id
        """,
    )
    child = out["child"]
    assert isinstance(child, dict)
    assert child.get("error") == "WriteFailed", child
    assert _tools_of(tmp_path, str(out["run_id"])) == [
        ("tool.requested", {"i": 1}),
        ("tool.requested", {"i": 2}),
    ]


def test_a_fork_while_the_writer_holds_its_lock_does_not_hang_the_child(tmp_path: Path) -> None:
    """The writer's lock, held by another thread at the fork, stays held for good in the
    child: the child's call must not wait on it."""
    out = _run(
        tmp_path,
        """
        from tachograph.capture.recorder import writer_for

        with tachograph.record(store, actor="t") as run:
            look(1)
            writer = writer_for(store)
            held, release = threading.Event(), threading.Event()

            def hold():
                with writer._cond:
                    held.set()
                    release.wait()

            holder = threading.Thread(target=hold)
            holder.start()
            held.wait()
            out["child"] = in_child(lambda: send(2))
            release.set()
            holder.join()
            look(3)
        out["run_id"] = run.run_id
        """,
    )
    child = out["child"]
    assert isinstance(child, dict)
    assert child.get("error") == "WriteFailed", child
    assert _tools_of(tmp_path, str(out["run_id"])) == [
        ("tool.requested", {"i": 1}),
        ("tool.requested", {"i": 3}),
    ]


def test_a_pool_of_forked_workers_gets_the_error_and_the_child_may_record_its_own_run(
    tmp_path: Path,
) -> None:
    out = _run(
        tmp_path,
        """
        import multiprocessing

        def work(i):
            try:
                return look(i)
            except tachograph.WriteFailed as exc:
                return {"error": str(exc)[:60]}

        with tachograph.record(store, actor="t") as run:
            look(1)
            with multiprocessing.get_context("fork").Pool(2) as pool:
                out["pool"] = pool.map(work, [10, 11, 12])
            out["own"] = in_child(own_run)
            look(2)
        out["run_id"] = run.run_id
        """,
    )
    pool = out["pool"]
    assert isinstance(pool, list)
    assert all("is not process" in r["error"] for r in pool), pool
    assert _tools_of(tmp_path, str(out["run_id"])) == [
        ("tool.requested", {"i": 1}),
        ("tool.requested", {"i": 2}),
    ]
    own = out["own"]
    assert isinstance(own, dict)
    assert "run_id" in own, own
    assert _tools_of(tmp_path, str(own["run_id"]), "runs.db.child") == [
        ("tool.requested", {"i": 7})
    ]


def test_a_child_forked_while_other_threads_record_is_told_not_left_waiting(
    tmp_path: Path,
) -> None:
    """Two threads of the agent call tools while the main thread forks: the run's own lock
    may be held by one of them at the fork, and is then held for good in the child. The
    child is refused before that lock (it waited on it, 10 forks in 10)."""
    out = _run(
        tmp_path,
        """
        with tachograph.record(store, actor="t") as run, two_threads_calling(look):
            out["children"] = [in_child(lambda: look(-1)) for _ in range(8)]
        out["run_id"] = run.run_id
        """,
    )
    children = out["children"]
    assert isinstance(children, list)
    assert [c.get("error") for c in children] == ["WriteFailed"] * 8, children
    assert all(args != {"i": -1} for _, args in _tools_of(tmp_path, str(out["run_id"])))


def test_a_child_forked_while_a_key_was_being_derived_is_told_not_left_waiting(
    tmp_path: Path,
) -> None:
    """A repeated call's key is numbered under the session's key lock; a thread of the parent
    holding it at the fork left the child's next repeated call waiting on it for good (one
    run in six of the test above without the compiled helpers, where every call takes it).
    The lock is held here by the forking thread itself, which is the same to the child."""
    out = _run(
        tmp_path,
        """
        import signal
        from tachograph.capture.session import current_session

        def repeat():
            signal.alarm(20)  # a child left waiting ends, and says so
            return look(1)

        with tachograph.record(store, actor="t") as run:
            look(1)
            with current_session()._key_lock:
                out["child"] = in_child(repeat)
            look(1)
        out["run_id"] = run.run_id
        """,
    )
    assert out["child"] == {"error": "WriteFailed", "message": out["child"]["message"]}
    assert "forked" in str(out["child"]["message"])
    assert [args for _, args in _tools_of(tmp_path, str(out["run_id"]))] == [{"i": 1}] * 2


def test_a_child_leaving_a_run_that_opened_its_store_does_not_close_the_parents(
    tmp_path: Path,
) -> None:
    """``record(path)`` opens the store and closes it when the block ends; a child leaving
    the block closed the parent's connection (SQLite's connections must not cross a fork),
    and waited on its lock when the writer thread held it at the fork."""
    out = _run(
        tmp_path,
        """
        def leave():
            rec.__exit__(None, None, None)
            return {"left": True}

        outcomes = []
        rec = tachograph.record(sys.argv[1] + ".own", actor="t")
        run = rec.__enter__()
        for i in range(20):
            look(i)
            outcomes.append(in_child(leave).get("error"))
        look(99)
        rec.__exit__(None, None, None)
        out["outcomes"] = outcomes
        out["run_id"] = run.run_id
        """,
    )
    assert out["outcomes"] == ["WriteFailed"] * 20
    calls = _tools_of(tmp_path, str(out["run_id"]), "runs.db.own")
    assert [args["i"] for _, args in calls] == [*range(20), 99]  # type: ignore[index]


def test_a_sealing_observer_seals_a_run_the_child_records_of_its_own(tmp_path: Path) -> None:
    """The child inherited the observer's sealing thread as started while it idled: the
    child's own run waited for good on its final seal."""
    out = _run(
        tmp_path,
        """
        from tachograph.capture.recorder import add_observer
        from tachograph.sealing import SealingObserver

        add_observer(SealingObserver())

        with tachograph.record(store, actor="t") as run:
            look(1)
        # the parent's final seal was just made: its sealing thread idles for a while
        out["own"] = in_child(own_run)
        out["run_id"] = run.run_id
        """,
    )
    own = out["own"]
    assert isinstance(own, dict)
    assert "run_id" in own, own


def test_a_store_opened_before_the_fork_is_refused_in_the_child_and_opened_again_works(
    tmp_path: Path,
) -> None:
    """SQLite's connections must not cross a fork: the child used the parent's (and could
    write through it into the parent's store). The child's copy of the store now refuses
    with an error that says so, and the same file opened again in the child records a run
    of the child's own; the parent's run and the child's both verify."""
    out = _run(
        tmp_path,
        """
        def refused_then_own():
            try:
                store.head("anything")
            except tachograph.StoreUnavailable as exc:
                refused = str(exc)
            else:
                refused = None
            again = SQLiteStore(sys.argv[1])
            with tachograph.record(again, actor="child") as child_run:
                look(7)
                send(8)
            again.close()
            store.close()  # the parent's copy: closing it here does nothing
            return {"run_id": child_run.run_id, "refused": refused}

        with tachograph.record(store, actor="t") as run:
            look(1)
            out["own"] = in_child(lambda: contextvars.Context().run(refused_then_own))
            look(2)
            send(3)
        out["run_id"] = run.run_id
        """,
    )
    own = out["own"]
    assert isinstance(own, dict)
    assert "run_id" in own, own
    assert "must not cross a fork" in str(own["refused"]), own
    assert _tools_of(tmp_path, str(out["run_id"])) == [
        ("tool.requested", {"i": 1}),
        ("tool.requested", {"i": 2}),
        ("tool.requested", {"i": 3}),
    ]
    assert _tools_of(tmp_path, str(own["run_id"])) == [
        ("tool.requested", {"i": 7}),
        ("tool.requested", {"i": 8}),
    ]


def test_children_open_stores_of_their_own_while_other_threads_commit(tmp_path: Path) -> None:
    """No thread of ours is inside SQLite at a fork (every store's lock is taken before it):
    a mutex SQLite held at the fork would be held for good in the child, and the child's
    first SQLite call, even on a store it opens itself, waited on it."""
    out = _run(
        tmp_path,
        """
        def own_numbered(k):
            own = SQLiteStore(f"{sys.argv[1]}.child{k}")
            with tachograph.record(own, actor="child") as child_run:
                look(k)
            ok = own.verify(child_run.run_id).ok
            own.close()
            return {"ok": ok}

        # send is durable: a commit each, so that the forks fall inside commits
        with tachograph.record(store, actor="t") as run, two_threads_calling(send):
            out["children"] = [
                in_child(lambda k=k: contextvars.Context().run(own_numbered, k))
                for k in range(16)
            ]
        out["run_id"] = run.run_id
        """,
    )
    assert out["children"] == [{"ok": True}] * 16, out["children"]
    _tools_of(tmp_path, str(out["run_id"]))  # the parent's run verifies
