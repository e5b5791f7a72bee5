"""``tacho demo``: the whole idea in one command, in a few seconds, with no network.

Records the bundled billing agent, verifies the run, prints its timeline, replays it
(reproduced), replays a changed version (the divergence at the exact step), and shows
``verify`` catching an edited event in an exported copy. The user's store is never tampered
with: the edit happens in a temporary file.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import click
import orjson

from ..capture.agent import record_run
from ..record.event import EventType
from ..record.jsonl import export_run, verify_jsonl
from ..replay.api import replay
from ..store import verify_stored
from .app import EXIT_FAILED, emit_json, open_store
from .commands_inspect import (
    render_with_seal,
    run_header,
    seal_verdicts_of,
    show_timeline,
    with_seal,
)
from .commands_replay import print_report
from .render import Output

__all__ = ["register"]

TASK = "Order A-4471 arrived damaged. Please refund it."
AGENT = "tachograph.demo.agent:billing_agent"
AGENT_V2 = "tachograph.demo.agent:billing_agent_v2"


def _tamper(path: Path) -> tuple[int, int, int]:
    """Lower the refund amount in the exported copy; returns (seq, before, after)."""
    lines = path.read_bytes().splitlines()
    for i, raw in enumerate(lines):
        line = orjson.loads(raw)
        payload = line.get("payload") or {}
        if line["type"] == EventType.TOOL_REQUESTED.value and payload.get("tool") == "issue_refund":
            before = int(payload["args"]["amount_cents"])
            after = before * 10
            payload["args"]["amount_cents"] = after
            lines[i] = orjson.dumps(line)
            path.write_bytes(b"\n".join(lines) + b"\n")
            return int(line["seq"]), before, after
    raise RuntimeError("the demo run has no issue_refund call to edit")  # pragma: no cover


@click.command("demo", short_help="Record, verify, replay and tamper-check a demo agent.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome of each step as JSON.")
def demo_cmd(as_json: bool) -> None:
    """Record, verify, show, replay and tamper-check the bundled billing agent.

    Uses the store in force (--store, TACHOGRAPH_STORE or ./.tachograph/tachograph.db) and a
    fresh run id. Exits 0 when every step shows what it should.
    """
    from ..demo import agent as demo_agent

    out = Output()
    quiet = as_json
    store = open_store(create=True)
    with store:
        calls_before = demo_agent.PAYMENTS.calls
        if not quiet:
            out.heading("1. Record the billing agent (scripted model, refund tool, no network)")
            out.line(f"task: {TASK}")
        result = record_run(
            demo_agent.billing_agent, TASK, store=store, labels={"tachograph.demo": "true"}
        )
        run_id = result.run_id
        refunds = demo_agent.PAYMENTS.calls - calls_before
        verify = verify_stored(store, run_id)
        # the same verdict `tacho verify` gives: the chain, then the run's seals
        seal = seal_verdicts_of(store, [verify]).get((verify.tenant, verify.run_id))
        events = store.events(run_id)
        same = replay(store, run_id, demo_agent.billing_agent)
        refunds_after_replay = demo_agent.PAYMENTS.calls - calls_before
        changed = replay(store, run_id, demo_agent.billing_agent_v2)
        with tempfile.TemporaryDirectory(prefix="tacho-demo-") as tmp:
            copy = Path(tmp) / f"{run_id}.jsonl"
            with copy.open("wb") as handle:
                export_run(store, run_id, handle)
            seq, before, after = _tamper(copy)
            tampered = verify_jsonl(copy)[0]
        first = changed.first
        ok = (
            verify.ok
            and (seal is None or seal.ok)
            and same.reproduced
            and not changed.reproduced
            and not tampered.ok
            and refunds_after_replay == refunds
        )
        if as_json:
            emit_json(
                {
                    "ok": ok,
                    "store": store.url,
                    "run_id": run_id,
                    "output": result.output,
                    "verify": with_seal(verify, seal),
                    "replay": same.to_dict(),
                    "replay_v2": changed.to_dict(),
                    "tamper": {"seq": seq, "before": before, "after": after, **tampered.to_dict()},
                    "refunds_issued": refunds,
                    "refunds_after_replay": refunds_after_replay,
                }
            )
            if not ok:
                sys.exit(EXIT_FAILED)
            return
        out.line(f"recorded {run_id} in {store.url}", style="bold")
        out.line(f"agent answered: {result.output}")
        out.line(f"payments API calls: {refunds} (one real refund)")
        out.line()
        out.heading("2. Verify the hash chain and the run's seals")
        out.line(
            render_with_seal(verify, seal),
            style="green" if verify.ok and (seal is None or seal.ok) else "bold red",
        )
        out.line()
        out.heading("3. The timeline (tacho show)")
        run_header(out, store.run_info(run_id), events[0])
        out.line()
        show_timeline(out, events)
        out.line()
        out.heading("4. Replay the same agent: every answer served from the record")
        print_report(out, same)
        out.line(
            f"payments API calls after replay: {refunds_after_replay} "
            "(the refund was served from the record, not made again)"
        )
        out.line()
        out.heading("5. Replay a changed agent (v2 caps refunds at half the price)")
        print_report(out, changed)
        if first is not None:
            out.line(
                f"-> caught at seq {first.seq}, the refund call itself; the replay paid nothing",
                style="bold",
            )
        out.line()
        out.heading("6. Edit one event in an exported copy, then verify it")
        out.line(
            f"exported to a temporary file; changed amount_cents at seq {seq}: {before} -> {after}"
        )
        out.line(
            tampered.render(),
            style="bold red" if not tampered.ok else "green",
        )
        out.line("(your store was not touched: the edit was made in the temporary copy)")
        out.line()
        out.heading("What to run next")
        for command in (
            "tacho runs",
            f"tacho show {run_id}",
            f"tacho state {run_id} --at 9",
            f"tacho replay {run_id} --agent {AGENT_V2}",
            f"tacho fork {run_id} --at 7 --agent {AGENT_V2}",
            f"tacho export {run_id} -o run.jsonl && tacho verify run.jsonl",
            "tacho --help",
        ):
            out.line(f"  {command}", style="cyan")
        if not ok:
            out.line("the demo did not go as expected (see above)", style="bold red")
            sys.exit(EXIT_FAILED)


def register(group: click.Group) -> None:
    """Add ``demo`` to ``group``."""
    group.add_command(demo_cmd)
