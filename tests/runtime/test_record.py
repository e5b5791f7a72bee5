"""Recording runs: the events written, in order, for sync and async agents; what run.started
and run.finished carry; model ids; idempotency keys; misuse."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest
import rfc8785

import tachograph as tg
from shop_agents import fanout, shop
from shop_agents.ledger import Ledger

SHOP_TYPES = [
    "run.started",
    "guardrail.tripwire",
    "clock.read",
    "random.value",
    "model.request",
    "model.response",
    "tool.requested",  # lookup_order
    "tool.completed",
    "plan.selected",
    "tool.requested",  # compute_refund
    "tool.completed",
    "tool.requested",  # post_note
    "tool.completed",
    "tool.requested",  # issue_refund
    "tool.completed",
    "random.seed",
    "decision",
    "model.request",
    "model.response",
    "output.accepted",
    "run.finished",
]


def spec_key(run_id: str, name: str, args: Any, secret: str) -> str:
    """SPEC section 5, computed independently of tachograph (rfc8785 + hmac)."""
    h = hmac.new(bytes.fromhex(secret), rfc8785.dumps(args), hashlib.sha256).hexdigest()
    return f"{run_id}:{name}:{h[:16]}"


def key_secret(store: tg.SQLiteStore, run_id: str) -> str:
    secret = store.events(run_id)[0].payload["key_secret"]
    assert isinstance(secret, str)
    assert len(secret) == 32
    return secret


def test_sync_agent_records_every_step_in_order(store: tg.SQLiteStore, ledger: Ledger) -> None:
    result = tg.record_run(shop.build(), shop.TASK, store=store, run_id="sync-1")
    events = store.events("sync-1")
    assert [e.type for e in events] == SHOP_TYPES
    assert [e.seq for e in events] == list(range(len(SHOP_TYPES)))
    assert store.verify("sync-1").ok
    tools = [e.payload["tool"] for e in events if e.type == "tool.requested"]
    assert tools == ["lookup_order", "compute_refund", "post_note", "issue_refund"]
    effects = [e.payload["effect"] for e in events if e.type == "tool.requested"]
    assert effects == ["read", "pure", "write", "irreversible"]
    # every completion follows the request with its key
    by_key = {}
    for e in events:
        if e.type in ("tool.requested", "model.request"):
            by_key[e.idempotency_key] = e.seq
        if e.type in ("tool.completed", "model.response"):
            assert by_key[e.idempotency_key] < e.seq
    # the values the agent got are what was recorded
    assert events[2].payload["value"].startswith(result.output["opened_at"][:19])
    assert events[3].payload["value"] == result.output["case_id"]
    assert events[-1].payload == {"status": "ok", "output": result.output}
    assert ledger.calls("refund") == 1
    assert ledger.calls("note") == 1


def test_async_agent_with_gather_records_each_call_once(store: tg.SQLiteStore) -> None:
    fanout.CALLS.clear()
    result = asyncio.run(tg.arecord_run(fanout.triage, fanout.TASK, store=store, run_id="fan-1"))
    assert result.status == "ok"
    events = store.events("fan-1")
    assert store.verify("fan-1").ok
    # the four lookups start together: four intents before any completion
    assert [e.type for e in events[1:5]] == ["tool.requested"] * 4
    assert [e.payload["args"]["order_id"] for e in events[1:5]] == fanout.TASK["orders"]
    # each branch, whatever the interleaving: fetch, its completion, score, its completion,
    # then the branch's decision
    for order_id in fanout.TASK["orders"]:
        branch = [e for e in events if _branch_of(e) == order_id]
        assert [e.type for e in branch] == [
            "tool.requested",
            "tool.completed",
            "tool.requested",
            "tool.completed",
            "decision",
        ]
        assert branch[0].idempotency_key == branch[1].idempotency_key
        assert branch[2].idempotency_key == branch[3].idempotency_key
        assert branch[1].payload["result"] == {
            "order_id": order_id,
            "price_cents": fanout.PRICES[order_id],
        }
    assert [e.type for e in events[-3:]] == ["model.request", "model.response", "run.finished"]
    assert len(events) == 1 + 4 * 5 + 3
    keys = [e.idempotency_key for e in events if e.type == "tool.requested"]
    assert len(set(keys)) == 8
    assert fanout.CALLS == {"fetch_order": 4, "score": 4, "model": 1}


def _branch_of(event: tg.Event) -> str | None:
    p = event.payload
    if event.type == "decision":
        return str(p["name"]).split(":")[1]
    if event.type == "tool.requested":
        args = p["args"]
        return args.get("order_id") or args["order"]["order_id"]
    if event.type == "tool.completed":
        return p["result"]["order_id"]
    return None


def test_record_as_async_with(store: tg.SQLiteStore) -> None:
    async def main() -> Any:
        async with tg.record(store, actor="triage", input=fanout.TASK, run_id="aw-1") as run:
            run.output = await fanout.triage(fanout.TASK)
        return run

    run = asyncio.run(main())
    events = store.events("aw-1")
    assert events[0].payload["input"] == fanout.TASK
    assert events[-1].payload["status"] == "ok"
    assert events[-1].payload["output"]["summary"] == "4 orders triaged"
    assert run.status == "ok"
    assert store.verify("aw-1").ok


def test_run_started_carries_input_and_fingerprint(store: tg.SQLiteStore, ledger: Ledger) -> None:
    tg.record_run(shop.build(), shop.TASK, store=store, run_id="fp-1", labels={"team": "billing"})
    started = store.events("fp-1")[0].payload
    assert started["input"] == shop.TASK
    assert started["labels"] == {"team": "billing"}
    env = started["env"]
    assert set(env) == {"code_version", "runtime", "recorder", "models", "prompts", "tools"}
    assert env["code_version"] == "shop-1"
    assert env["runtime"].startswith(("cpython-", "pypy-"))
    assert env["recorder"] == f"tachograph-{tg.__version__}"
    assert env["models"] == [shop.MODEL_ID]
    assert env["prompts"] == {
        "system": "sha256:" + hashlib.sha256(shop.SYSTEM.encode()).hexdigest()
    }
    assert set(env["tools"]) == {t.__name__ for t in shop.TOOLS}
    assert env["tools"]["lookup_order"]["version"] == "1"
    assert env["tools"]["lookup_order"]["schema"].startswith("sha256:")


def test_an_exception_finishes_the_run_as_error_and_propagates(
    store: tg.SQLiteStore, ledger: Ledger
) -> None:
    with pytest.raises(RuntimeError, match="mail server is down"):
        tg.record_run(
            shop.build(shop.Variant(fail_at_end=True)), shop.TASK, store=store, run_id="e"
        )
    last = store.events("e")[-1]
    assert last.type == "run.finished"
    assert last.payload == {
        "status": "error",
        "error": {"type": "RuntimeError", "message": "the mail server is down"},
    }
    assert store.run_info("e").status == "error"


def test_keyboard_interrupt_finishes_the_run_as_aborted(store: tg.SQLiteStore) -> None:
    with pytest.raises(KeyboardInterrupt), tg.record(store, actor="a", run_id="ki"):
        raise KeyboardInterrupt
    assert store.events("ki")[-1].payload["status"] == "aborted"


def test_a_cancelled_async_agent_finishes_its_run_as_aborted(store: tg.SQLiteStore) -> None:
    async def agent(task: int) -> int:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        tg.record_run(agent, 1, store=store, actor="a", run_id="cancelled")
    assert store.events("cancelled")[-1].payload["status"] == "aborted"
    assert store.run_info("cancelled").status == "aborted"


def test_model_response_pins_the_build_that_answered(store: tg.SQLiteStore, ledger: Ledger) -> None:
    tg.record_run(shop.build(), shop.TASK, store=store, run_id="m")
    events = store.events("m")
    requests = [e for e in events if e.type == "model.request"]
    responses = [e for e in events if e.type == "model.response"]
    assert {e.model for e in requests} == {shop.MODEL_ID}
    assert {e.model for e in responses} == {shop.MODEL_BUILD}
    assert responses[0].payload["usage"] == {"input_tokens": 20, "output_tokens": 7}
    assert requests[0].payload["prompt_hash"] == (
        "sha256:" + hashlib.sha256(shop.SYSTEM.encode()).hexdigest()
    )


@pytest.mark.parametrize("alias", ["gpt-5-latest", "latest", "claude-sonnet-4"])
def test_a_model_alias_is_flagged(alias: str) -> None:
    with pytest.warns(tg.ModelAliasWarning, match="alias"):

        @tg.model(alias)
        def ask(request: dict[str, Any]) -> dict[str, Any]:
            return {}


def test_an_exact_model_id_is_not_flagged() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")

        @tg.model("gpt-5.6-2026-09-30")
        def ask(request: dict[str, Any]) -> dict[str, Any]:
            return {}


# -- idempotency keys -------------------------------------------------------------------------

seen_keys: list[str | None] = []


@tg.tool(effect="write")
def send_mail(to: str, body: str, idempotency_key: str | None = None) -> str:
    seen_keys.append(idempotency_key)
    return "sent"


@tg.tool(effect="irreversible", key=lambda args: f"{args['order_id']}-{args['amount']}")
def pay_out(order_id: str, amount: int, idempotency_key: str | None = None) -> str:
    seen_keys.append(idempotency_key)
    return "paid"


def test_tools_receive_the_spec_idempotency_key(store: tg.SQLiteStore) -> None:
    seen_keys.clear()
    with tg.record(store, actor="mailer", run_id="keys-1"):
        send_mail("a@example.com", "hello")
        send_mail("a@example.com", "hello")  # the same call again: #1
        send_mail("a@example.com", "hello")  # #2
        send_mail(to="b@example.com", body="hello")
        pay_out("A-1", 2500)
        pay_out("A-1", 2500)
    secret = key_secret(store, "keys-1")
    base = spec_key("keys-1", "send_mail", {"to": "a@example.com", "body": "hello"}, secret)
    assert seen_keys == [
        base,
        base + "#1",
        base + "#2",
        spec_key("keys-1", "send_mail", {"to": "b@example.com", "body": "hello"}, secret),
        "keys-1:pay_out:A-1-2500",
        "keys-1:pay_out:A-1-2500#1",
    ]
    events = store.events("keys-1")
    requested = [e.idempotency_key for e in events if e.type == "tool.requested"]
    completed = [e.idempotency_key for e in events if e.type == "tool.completed"]
    assert requested == completed == seen_keys
    # the key is not part of the recorded arguments
    assert events[1].payload["args"] == {"to": "a@example.com", "body": "hello"}


def test_model_calls_are_keyed_by_their_request(store: tg.SQLiteStore, ledger: Ledger) -> None:
    tg.record_run(shop.build(), shop.TASK, store=store, run_id="mk")
    request = next(e for e in store.events("mk") if e.type == "model.request")
    secret = key_secret(store, "mk")
    expected = spec_key("mk", shop.MODEL_ID, request.payload["request"], secret)
    assert request.idempotency_key == expected
    # a plain SHA-256 of the request (the rule before key secrets) no longer gives the key
    plain = hashlib.sha256(rfc8785.dumps(request.payload["request"])).hexdigest()[:16]
    assert request.idempotency_key != f"mk:{shop.MODEL_ID}:{plain}"


# -- misuse -----------------------------------------------------------------------------------


class Money:
    def __init__(self, cents: int) -> None:
        self.cents = cents


@tg.tool(effect="read")
def quote(order: dict[str, Any]) -> Any:
    return {"total": Money(order["cents"])}


def test_a_non_json_argument_names_the_tool_and_the_path(store: tg.SQLiteStore) -> None:
    with tg.record(store, actor="a", run_id="bad-arg"), pytest.raises(tg.ProfileError) as info:
        quote({"cents": 5, "when": {1, 2}})
    assert "'quote'" in str(info.value)
    assert info.value.path == "quote.args.order.when"
    assert "quote.args.order.when" in str(info.value)
    # nothing was recorded for the refused call
    assert [e.type for e in store.events("bad-arg")] == ["run.started", "run.finished"]


def test_a_non_json_result_names_the_tool_and_the_path(store: tg.SQLiteStore) -> None:
    with tg.record(store, actor="a", run_id="bad-result"), pytest.raises(tg.ProfileError) as info:
        quote({"cents": 5})
    assert info.value.path == "quote.result.total"
    assert "tool 'quote'" in str(info.value)
    assert "quote.result.total" in str(info.value)
    assert "Money" in str(info.value)
    events = store.events("bad-result")
    # the intent is closed with a failure, so the record does not look like a crash
    assert [e.type for e in events] == [
        "run.started",
        "tool.requested",
        "tool.failed",
        "run.finished",
    ]
    assert events[2].payload["error"]["type"] == "tachograph.errors.ProfileError"
    assert events[2].idempotency_key == events[1].idempotency_key
    assert store.verify("bad-result").ok


def test_a_decorated_tool_outside_a_run_just_runs(tmp_path: Path) -> None:
    seen_keys.clear()
    assert send_mail("a@example.com", "hi") == "sent"
    assert seen_keys == [None]
    fanout.CALLS.clear()
    assert asyncio.run(fanout.score({"order_id": "X", "price_cents": 700})) == {
        "order_id": "X",
        "score": 7,
    }
    assert fanout.CALLS["score"] == 1
    assert tg.decide("x", 3) == 3
    assert not list(tmp_path.iterdir())


def test_recording_into_a_finished_run_is_refused(store: tg.SQLiteStore) -> None:
    async def main() -> None:
        started = asyncio.Event()
        release = asyncio.Event()

        async def straggler() -> None:
            started.set()
            await release.wait()
            # this task was created inside the run and outlives it
            await fanout.fetch_order("A-1")

        async with tg.record(store, actor="a", run_id="fin") as run:
            task = asyncio.create_task(straggler())
            await started.wait()
            run.output = "done"
        release.set()
        with pytest.raises(tg.RecordingError, match="has finished"):
            await task

    fanout.JITTER, saved = (lambda _: 0.0), fanout.JITTER
    try:
        asyncio.run(main())
    finally:
        fanout.JITTER = saved
    assert [e.type for e in store.events("fin")] == ["run.started", "run.finished"]


def test_a_run_id_cannot_be_recorded_twice(store: tg.SQLiteStore) -> None:
    with tg.record(store, actor="a", run_id="twice"):
        pass
    with (
        pytest.raises(tg.RecordingError, match="already exists"),
        tg.record(store, actor="a", run_id="twice"),
    ):
        pass


def test_runs_do_not_nest(store: tg.SQLiteStore) -> None:
    with (
        tg.record(store, actor="a", run_id="outer"),
        pytest.raises(tg.RecordingError, match="already active"),
        tg.record(store, actor="a", run_id="inner"),
    ):
        pass


def test_bad_modes_fail_loudly(store: tg.SQLiteStore) -> None:
    with pytest.raises(tg.RecordingError, match="'effects', 'every', 'batch'"):
        tg.record(store, actor="a", durability="sometimes")
    with pytest.raises(tg.EventError, match="'pure', 'read', 'write', 'irreversible'"):
        tg.tool(effect="harmless")


def test_threads_started_inside_the_run_carry_it(store: tg.SQLiteStore) -> None:
    """A thread, a pool's task and asyncio's executor started inside the run record their
    calls (they ran unrecorded before: a plain thread starts with an empty context); a
    thread started before the run does not carry it."""
    import concurrent.futures

    seen_keys.clear()
    idle = threading.Event()
    go = threading.Event()

    def waiting() -> None:
        idle.set()
        go.wait()
        send_mail("before@example.com", "x")

    early = threading.Thread(target=waiting)
    early.start()
    idle.wait()
    with tg.record(store, actor="a", run_id="threads"):
        thread = threading.Thread(target=send_mail, args=("plain@example.com", "x"))
        thread.start()
        thread.join()
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            pool.submit(send_mail, "pool@example.com", "x").result()

        async def in_executor() -> None:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, send_mail, "executor@example.com", "x")
            await asyncio.to_thread(send_mail, "copied@example.com", "x")

        asyncio.run(in_executor())
        go.set()
        early.join()
    args = [e.payload["args"]["to"] for e in store.events("threads") if e.type == "tool.requested"]
    assert args == [
        "plain@example.com",
        "pool@example.com",
        "executor@example.com",
        "copied@example.com",
    ]
    assert seen_keys[-1] is None  # the thread started before the run: a plain call
    # the wrapping is undone with the last run
    assert threading.Thread.start.__module__ == "threading"
    assert concurrent.futures.ThreadPoolExecutor.submit.__module__ == "concurrent.futures.thread"


@tg.model("odd-2026-10-01")
def odd_model(request: dict[str, Any]) -> Any:
    return {"choices": [{"text": "hi", "score": float("nan")}]}


def test_a_non_json_model_response_names_the_model_and_the_path(store: tg.SQLiteStore) -> None:
    with (
        tg.record(store, actor="a", run_id="bad-model"),
        pytest.raises(tg.ProfileError) as info,
    ):
        odd_model({"messages": []})
    assert info.value.path == "odd-2026-10-01.response.choices[0].score"
    assert "model 'odd-2026-10-01'" in str(info.value)
    events = store.events("bad-model")
    assert [e.type for e in events] == [
        "run.started",
        "model.request",
        "model.failed",
        "run.finished",
    ]
    assert events[2].model == "odd-2026-10-01"


def test_a_non_json_output_finishes_the_run_as_an_error(store: tg.SQLiteStore) -> None:
    with (
        pytest.raises(tg.ProfileError) as info,
        tg.record(store, actor="a", run_id="bad-output") as run,
    ):
        run.output = {"when": Money(3)}
    assert info.value.path == "output.when"
    assert "'bad-output'" in str(info.value)
    last = store.events("bad-output")[-1]
    assert last.type == "run.finished"
    assert last.payload["status"] == "error"
    assert last.payload["error"]["type"] == "tachograph.errors.ProfileError"
    assert store.run_info("bad-output").status == "error"


def test_model_without_its_model_id_is_a_clear_error() -> None:
    """``@tachograph.model`` used bare (the function where the id goes) names what it needs,
    rather than failing inside with a TypeError."""
    with pytest.raises(tg.errors.RecordingError, match="exact model id"):

        @tg.model  # type: ignore[arg-type]
        def ask(prompt: str) -> str:
            return prompt


def test_a_prompts_hash_cannot_confirm_a_secret_in_it() -> None:
    """``env.prompts`` hashes a template with its secrets redacted: the unsalted SHA-256 of
    the raw text would confirm a guessed key; a template with none hashes as it is."""
    secret = "sk-proj-" + "A1b2C3d4E5" * 4

    @tg.agent(name="ag", prompts={"system": f"Use key {secret}.", "plain": "You help."})
    def ag(task: str) -> str:
        return task

    prompts = ag.fingerprint()["prompts"]
    raw = "sha256:" + hashlib.sha256(f"Use key {secret}.".encode()).hexdigest()
    assert prompts["system"] != raw
    assert prompts["plain"] == "sha256:" + hashlib.sha256(b"You help.").hexdigest()
    # the same template hashes alike in every run, so a replay sees no drift
    assert ag.fingerprint()["prompts"] == prompts
