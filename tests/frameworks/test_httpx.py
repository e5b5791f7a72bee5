"""Plain httpx and httpx2 clients recorded in one line and replayed with the server gone.

A GET is an ``external.read``, a POST a ``write`` tool; replay serves both from the record,
the shop's request counter does not move, and a changed body diverges at the POST's seq. A
GET made ``pure`` by a rule is sent again by ``rerun_pure=True``: a changed answer from the
shop diverges at its seq. A POST the agent times out is recorded cancelled and replayed
waiting for it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import openai
import pytest

import tachograph
from tachograph.capture import boundary
from tachograph.integrations.httpx import instrument, is_instrumented, uninstrument

from .http_server import Shop

LIBS = [httpx, httpx2]


@pytest.fixture
def shop() -> Iterator[Shop]:
    server = Shop()
    yield server
    server.stop()


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "runs.db")


def _agent(client: Any, base: str, amount: float = 19.99) -> Callable[[str], Any]:
    def refund_agent(order_id: str) -> dict[str, Any]:
        order = client.get(f"{base}/orders/{order_id}").json()
        refund = client.post(f"{base}/refunds", json={"order_id": order_id, "amount": amount})
        return {"order": order, "refund": refund.json(), "status": refund.status_code}

    return refund_agent


def _async_agent(lib: Any, base: str) -> Callable[[str], Any]:
    async def refund_agent(order_id: str) -> dict[str, Any]:
        # a client per run: its connection pool belongs to the event loop of the run
        async with instrument(lib.AsyncClient()) as client:
            order = (await client.get(f"{base}/orders/{order_id}")).json()
            body = {"order_id": order_id, "amount": 5}
            refund = await client.post(f"{base}/refunds", json=body)
        return {"order": order, "refund": refund.json()}

    return refund_agent


def _plain(fn: Callable[..., Any]) -> tachograph.Agent:
    return tachograph.Agent(fn=fn, name="refund_agent", code_version="test-1")


@pytest.mark.parametrize("lib", LIBS, ids=lambda m: m.__name__)
def test_get_is_an_external_read_post_a_write_tool_and_replay_sends_nothing(
    lib: Any, shop: Shop, db: str
) -> None:
    client = instrument(lib.Client())
    assert is_instrumented(client)
    agent = _plain(_agent(client, shop.url))

    result = tachograph.record_run(agent, "B-2002", store=db)

    assert result.status == "ok"
    assert result.output["refund"]["refund_id"] == "rf_1"
    recorded = tachograph.open_store(db).events(result.run_id)
    assert tachograph.verify_events(recorded).ok
    assert [e.type for e in recorded] == [
        "run.started",
        "external.read",
        "tool.requested",
        "tool.completed",
        "run.finished",
    ]
    read = recorded[1].payload
    assert read["source"] == "http"
    assert read["key"] == f"GET {shop.url}/orders/B-2002"
    assert read["value"]["status"] == 200
    assert read["value"]["body"]["total"] == 19.99
    assert "set-cookie" not in read["value"]["headers"]
    requested = recorded[2].payload
    assert requested["tool"] == "http.post"
    assert requested["effect"] == "write"
    assert requested["args"] == {
        "method": "POST",
        "url": f"{shop.url}/refunds",
        "body": {"order_id": "B-2002", "amount": 19.99},
    }
    assert recorded[3].payload["result"]["status"] == 201
    assert recorded[3].idempotency_key == recorded[2].idempotency_key
    assert len(shop.requests) == 2

    count = shop.stop()
    report = tachograph.replay(db, result.run_id, agent)

    assert report.reproduced, report.render()
    assert report.output == result.output
    assert len(shop.requests) == count == 2
    assert len(shop.refunds) == 1

    # A one-field change of the POST body diverges exactly at the tool.requested.
    changed = _plain(_agent(client, shop.url, amount=25.0))
    diverged = tachograph.replay(db, result.run_id, changed)
    assert not diverged.reproduced
    assert diverged.first is not None
    assert diverged.first.seq == recorded[2].seq == 2
    paths = {c.path: (c.old, c.new) for c in diverged.first.changes}
    assert paths["$.payload.args.body.amount"] == (19.99, 25.0)
    assert len(shop.requests) == 2


@pytest.mark.parametrize("lib", LIBS, ids=lambda m: m.__name__)
def test_a_changed_answer_to_a_pure_get_is_caught_at_its_seq(lib: Any, shop: Shop, db: str) -> None:
    """A changed answer from the server, caught when the read is re-sent.

    A default ``GET`` is an ``external.read``: replay serves it and never asks the server, so
    a changed answer cannot be seen (that is the closed world). A rule making the lookup a
    ``pure`` tool lets ``rerun_pure=True`` send it again (the shop allowed through the network
    guard) and compare the fresh answer with the recorded one; the refund POST is still
    served from the record.
    """
    client = instrument(lib.Client(), rules={("GET", "*/orders/*"): "pure"})
    agent = _plain(_agent(client, shop.url))
    result = tachograph.record_run(agent, "B-2002", store=db)
    assert result.status == "ok", result
    recorded = tachograph.open_store(db).events(result.run_id)
    assert [e.type for e in recorded] == [
        "run.started",
        "tool.requested",
        "tool.completed",  # the lookup
        "tool.requested",
        "tool.completed",  # the refund
        "run.finished",
    ]
    assert (recorded[1].payload["tool"], recorded[1].payload["effect"]) == ("http.get", "pure")
    assert recorded[2].payload["result"]["body"]["total"] == 19.99
    # The server's clock is not part of its answer: with it, every re-run a second later
    # would diverge although the shop answered the same.
    assert "date" not in recorded[2].payload["result"]["headers"]
    allow = [shop.url.removeprefix("http://")]

    same = tachograph.replay(db, result.run_id, agent, rerun_pure=True, allow_network=allow)
    assert same.reproduced, same.render()
    shop.total = 25.0  # the shop now answers another total
    report = tachograph.replay(db, result.run_id, agent, rerun_pure=True, allow_network=allow)

    assert not report.reproduced
    assert report.first is not None
    assert report.first.kind is tachograph.DivergenceKind.TOOL_IMPLEMENTATION_CHANGED
    assert report.first.seq == recorded[2].seq == 2
    paths = {c.path: (c.old, c.new) for c in report.first.changes}
    assert paths == {"$.payload.result.body.total": (19.99, 25.0)}
    assert "seq 2" in report.render()
    lookup = ("GET", "/orders/B-2002")
    assert shop.requests == [lookup, ("POST", "/refunds"), lookup, lookup]
    assert len(shop.refunds) == 1  # the refund was served in both replays, not sent


@pytest.mark.parametrize("lib", LIBS, ids=lambda m: m.__name__)
def test_an_async_client_records_and_replays_offline(lib: Any, shop: Shop, db: str) -> None:
    agent = _plain(_async_agent(lib, shop.url))

    result = tachograph.record_run(agent, "C-3003", store=db)
    assert result.status == "ok", result
    count = shop.stop()
    report = tachograph.replay(db, result.run_id, agent)

    assert report.reproduced, report.render()
    assert (
        report.output
        == result.output
        == {
            "order": {"order_id": "C-3003", "status": "delivered", "total": 19.99},
            "refund": {"refund_id": "rf_1", "order_id": "C-3003", "amount": 5},
        }
    )
    assert count == len(shop.requests) == 2


def test_rules_classify_requests_by_method_and_url_pattern(shop: Shop, db: str) -> None:
    rules = {
        ("GET", "*/orders/*"): "read",
        ("POST", "*/refunds"): "irreversible",
    }
    client = instrument(httpx2.Client(), rules=rules)
    result = tachograph.record_run(_plain(_agent(client, shop.url)), "B-2002", store=db)
    recorded = tachograph.open_store(db).events(result.run_id)
    requested = [e.payload for e in recorded if e.type == "tool.requested"]
    tools = [(p["tool"], p["effect"]) for p in requested]
    assert tools == [("http.get", "read"), ("http.post", "irreversible")]

    # A callable rule: "external" turns a POST (a search endpoint, say) into a read.
    def rule(method: str, url: str) -> str | None:
        return "external" if url.endswith("/refunds") else None

    other = instrument(httpx.Client(), rules=rule)
    again = tachograph.record_run(_plain(_agent(other, shop.url)), "B-2002", store=db)
    types = [e.type for e in tachograph.open_store(db).events(again.run_id)]
    assert types == ["run.started", "external.read", "external.read", "run.finished"]


def test_outside_a_run_nothing_changes_and_uninstrument_restores(shop: Shop) -> None:
    client = instrument(httpx.Client())
    assert client.get(f"{shop.url}/orders/A-1").json()["order_id"] == "A-1"
    assert len(shop.requests) == 1
    uninstrument(client)
    assert not is_instrumented(client)
    assert type(client._transport) is httpx.HTTPTransport


def test_a_refused_write_is_recorded_as_failed_and_replayed_as_the_same_error(db: str) -> None:
    shop = Shop()
    base = shop.url
    shop.stop()
    client = instrument(httpx2.Client())

    def agent(_: Any) -> str:
        try:
            client.post(f"{base}/refunds", json={"order_id": "X-1"})
        except httpx2.ConnectError as exc:
            return f"failed: {type(exc).__name__}"
        return "sent"

    result = tachograph.record_run(_plain(agent), None, store=db)
    assert result.output == "failed: ConnectError"
    recorded = tachograph.open_store(db).events(result.run_id)
    assert [e.type for e in recorded][1:3] == ["tool.requested", "tool.failed"]
    assert recorded[2].payload["error"]["type"] == "httpx2.ConnectError"
    report = tachograph.replay(db, result.run_id, _plain(agent))
    assert report.reproduced, report.render()
    assert report.output == "failed: ConnectError"


def test_an_sdk_client_or_another_object_is_refused_with_a_hint() -> None:
    with pytest.raises(TypeError, match=r"integrations\.openai"):
        instrument(openai.OpenAI(api_key="sk-x"))
    with pytest.raises(TypeError, match="httpx or httpx2"):
        instrument(object())


def _closed_url() -> str:
    """The address of a server that has stopped: a request to it is refused."""
    gone = Shop()
    gone.stop()
    return gone.url


@pytest.mark.parametrize("lib", LIBS, ids=lambda m: m.__name__)
def test_a_refused_read_is_recorded_and_raised_again_in_replay(
    lib: Any, shop: Shop, db: str
) -> None:
    """A GET that gets no answer is recorded (it wrote nothing, and an agent that retried
    it could not be replayed): its ``external.read`` holds the error, and replay raises the
    same exception type where the request was made."""
    base = _closed_url()
    client = instrument(lib.Client())

    def agent(order_id: str) -> dict[str, Any]:
        try:
            client.get(f"{base}/orders/{order_id}")
        except lib.ConnectError as exc:
            failed = type(exc).__name__
        order = client.get(f"{shop.url}/orders/{order_id}").json()  # the fallback
        return {"failed": failed, "order": order}

    result = tachograph.record_run(_plain(agent), "B-2002", store=db)
    assert result.status == "ok", result
    assert result.output["failed"] == "ConnectError"
    recorded = tachograph.open_store(db).events(result.run_id)
    assert [e.type for e in recorded] == [
        "run.started",
        "external.read",
        "external.read",
        "run.finished",
    ]
    refused = recorded[1].payload
    assert refused["key"] == f"GET {base}/orders/B-2002"
    assert refused["value"]["error"]["type"] == f"{lib.__name__}.ConnectError"

    count = shop.stop()
    report = tachograph.replay(db, result.run_id, _plain(agent))
    assert report.reproduced, report.render()
    assert report.output == result.output
    assert len(shop.requests) == count == 1


@pytest.mark.parametrize("lib", LIBS, ids=lambda m: m.__name__)
def test_a_refused_read_of_an_async_client_is_recorded_and_raised_again(lib: Any, db: str) -> None:
    base = _closed_url()

    async def agent(_: Any) -> str:
        async with instrument(lib.AsyncClient()) as client:
            try:
                await client.get(f"{base}/orders/A-1")
            except lib.ConnectError as exc:
                return f"failed: {type(exc).__name__}"
        return "answered"

    result = tachograph.record_run(_plain(agent), None, store=db)
    assert result.output == "failed: ConnectError"
    recorded = tachograph.open_store(db).events(result.run_id)
    assert [e.type for e in recorded][1:-1] == ["external.read"]
    assert recorded[1].payload["value"]["error"]["type"] == f"{lib.__name__}.ConnectError"
    report = tachograph.replay(db, result.run_id, _plain(agent))
    assert report.reproduced, report.render()
    assert report.output == "failed: ConnectError"


def _impatient(lib: Any, base: str, deadline: float) -> tachograph.Agent:
    async def agent(order_id: str) -> dict[str, Any]:
        async with instrument(lib.AsyncClient()) as client:
            try:
                post = client.post(f"{base}/slow", json={"order_id": order_id})
                slow: Any = (await asyncio.wait_for(post, deadline)).json()
            except asyncio.TimeoutError:
                slow = "timed out"
            refund = await client.post(f"{base}/refunds", json={"order_id": order_id, "amount": 5})
        return {"slow": slow, "refund": refund.json()}

    return _plain(agent)


@pytest.mark.parametrize("lib", LIBS, ids=lambda m: m.__name__)
def test_a_write_the_agent_times_out_is_recorded_cancelled_and_replayed(
    lib: Any, shop: Shop, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = tachograph.record_run(_impatient(lib, shop.url, 0.5), "A-1", store=db)
    assert result.status == "ok", result
    assert result.output["slow"] == "timed out"
    recorded = tachograph.open_store(db).events(result.run_id)
    assert [e.type for e in recorded] == [
        "run.started",
        "tool.requested",
        "tool.failed",  # the POST the agent gave up on
        "tool.requested",
        "tool.completed",
        "run.finished",
    ]
    assert recorded[2].payload == {
        "tool": "http.post",
        "error": {"type": "asyncio.exceptions.CancelledError", "message": ""},
    }
    count = shop.stop()

    # the served call waits until the agent's own deadline cancels it again
    report = tachograph.replay(db, result.run_id, _impatient(lib, shop.url, 0.5))
    assert report.reproduced, report.render()
    assert report.output == result.output

    # an agent that no longer gives up: reported at the call, instead of hanging
    monkeypatch.setattr(boundary, "CANCELLED_WAIT", 0.2)
    report = tachograph.replay(db, result.run_id, _impatient(lib, shop.url, 600))
    assert report.first is not None
    assert (report.first.kind, report.first.seq) == (tachograph.DivergenceKind.UNREPLAYABLE, 2)
    assert "nothing cancelled it" in report.first.explanation

    # a synchronous client cannot cancel it: reported at once
    def sync_agent(order_id: str) -> Any:
        with instrument(lib.Client()) as client:
            return client.post(f"{shop.url}/slow", json={"order_id": order_id}).json()

    report = tachograph.replay(db, result.run_id, _plain(sync_agent))
    assert report.first is not None
    assert (report.first.kind, report.first.seq) == (tachograph.DivergenceKind.UNREPLAYABLE, 2)
    assert "a synchronous call cannot be cancelled" in report.first.explanation
    assert len(shop.requests) == count == 2  # nothing reached the shop in any replay


@pytest.mark.parametrize("lib", LIBS, ids=lambda m: m.__name__)
def test_a_multipart_upload_is_the_same_request_in_every_replay(
    lib: Any, shop: Shop, db: str
) -> None:
    """The client draws a multipart boundary at random for every request: it is recorded
    as a fixed one, so the upload's args and key are the same in the replay (it diverged
    in every one)."""
    client = instrument(lib.Client(), request_headers=["content-type"])

    def uploader(content: bytes) -> Callable[[str], Any]:
        def agent(name: str) -> dict[str, Any]:
            files = {"file": (name, content)}
            answer = client.post(f"{shop.url}/uploads", files=files, data={"purpose": "x"})
            return {"status": answer.status_code, "answer": answer.json()}

        return agent

    agent = uploader(b"hello world")
    result = tachograph.record_run(_plain(agent), "a.txt", store=db)
    assert result.status == "ok", result
    assert result.output["status"] == 201
    recorded = tachograph.open_store(db).events(result.run_id)
    args = recorded[1].payload["args"]
    assert args["headers"]["content-type"] == "multipart/form-data; boundary=tachograph-boundary"
    assert "--tachograph-boundary\r\n" in args["text"]
    assert 'filename="a.txt"' in args["text"]

    count = shop.stop()
    for _ in range(2):
        report = tachograph.replay(db, result.run_id, _plain(agent))
        assert report.reproduced, report.render()
        assert report.output == result.output
    assert len(shop.requests) == count == 1
    # another file is still another request
    other = tachograph.replay(db, result.run_id, _plain(uploader(b"hello there")))
    assert not other.reproduced
    assert other.first is not None
    assert other.first.seq == recorded[1].seq


@pytest.mark.parametrize("lib", LIBS, ids=lambda m: m.__name__)
def test_a_body_reaches_the_agent_as_sent_and_only_json_is_recorded_parsed(
    lib: Any, shop: Shop, db: str
) -> None:
    """Live, the agent gets the server's bytes (a text body that parsed as JSON was handed
    on re-encoded: "3.10" as "3.1"). A body whose content type is not JSON is recorded as
    text and served back as sent; a JSON body is recorded parsed and served back re-encoded,
    which may change number spelling, never its meaning as JSON."""
    shop.raw["version"] = ("text/plain", b"3.10")
    shop.raw["id"] = ("text/plain; charset=utf-8", b"1e3")
    shop.raw["order"] = ("application/json", b'{"total": 19.990, "count": 1e3}')
    shop.raw["blob"] = ("application/octet-stream", b"\xff\x00")
    client = instrument(lib.Client())
    orders: list[str] = []

    def agent(_: Any) -> dict[str, Any]:
        texts = {name: client.get(f"{shop.url}/raw/{name}").text for name in ("version", "id")}
        order = client.get(f"{shop.url}/raw/order")
        orders.append(order.text)
        blob = client.get(f"{shop.url}/raw/blob").content.hex()
        return {"texts": texts, "order": order.json(), "blob": blob}

    result = tachograph.record_run(_plain(agent), None, store=db)
    assert result.status == "ok", result
    assert result.output == {
        "texts": {"version": "3.10", "id": "1e3"},
        "order": {"total": 19.99, "count": 1000.0},
        "blob": "ff00",
    }
    assert orders == ['{"total": 19.990, "count": 1e3}']  # the bytes as sent
    values = [e.payload["value"] for e in tachograph.open_store(db).events(result.run_id)[1:-1]]
    assert [
        {k: v for k, v in value.items() if k in ("body", "text", "base64")} for value in values
    ] == [
        {"text": "3.10"},
        {"text": "1e3"},
        {"body": {"total": 19.99, "count": 1000.0}},
        {"base64": "/wA="},
    ]

    shop.stop()
    report = tachograph.replay(db, result.run_id, _plain(agent))
    assert report.reproduced, report.render()
    assert report.output == result.output
    assert orders[1] == '{"total":19.99,"count":1000.0}'  # re-encoded: the same JSON


@pytest.mark.parametrize("lib", LIBS, ids=lambda m: m.__name__)
def test_a_head_answer_keeps_its_content_length(lib: Any, shop: Shop, db: str) -> None:
    """An agent that sizes a download with HEAD read no content-length once instrumented
    (live too): the header was dropped with every answer's."""
    shop.raw["big"] = ("application/octet-stream", b"x" * 4096)
    client = instrument(lib.Client())

    def agent(_: Any) -> str:
        return str(client.head(f"{shop.url}/raw/big").headers.get("content-length"))

    result = tachograph.record_run(_plain(agent), None, store=db)
    assert result.output == "4096"
    shop.stop()
    report = tachograph.replay(db, result.run_id, _plain(agent))
    assert report.reproduced, report.render()
    assert report.output == "4096"


@pytest.mark.parametrize("lib", LIBS, ids=lambda m: m.__name__)
def test_a_json_body_in_another_charset_is_kept_as_sent(lib: Any, shop: Shop, db: str) -> None:
    """Served back, a parsed body is UTF-8: one whose content type names another charset
    was read as other text in the replay ("cafÃ©"), or failed to decode (UTF-16)."""
    shop.raw["latin"] = (
        "application/json; charset=iso-8859-1",
        '{"name": "café"}'.encode("latin-1"),
    )
    shop.raw["wide"] = ("application/json; charset=utf-16", '{"n": 1}'.encode("utf-16"))
    shop.raw["plain"] = ("application/json; Charset=UTF-8", b'{"n": 2}')
    client = instrument(lib.Client())

    def agent(_: Any) -> list[Any]:
        names = ("latin", "wide", "plain")  # .text decodes by the charset (.json() does not)
        return [json.loads(client.get(f"{shop.url}/raw/{name}").text) for name in names]

    result = tachograph.record_run(_plain(agent), None, store=db)
    assert result.output == [{"name": "café"}, {"n": 1}, {"n": 2}]
    values = [e.payload["value"] for e in tachograph.open_store(db).events(result.run_id)[1:-1]]
    assert ["body" in v for v in values] == [False, False, True]
    shop.stop()
    report = tachograph.replay(db, result.run_id, _plain(agent))
    assert report.reproduced, report.render()
    assert report.output == result.output


# credentials an API takes in the query under short names: Google's key=, an Azure SAS
# sig=, an Azure Functions key (or an OAuth authorization code) as code=
QUERY_SECRETS = {"key": "V0x7Qm3Rt9Zp0", "sig": "V5x7Qm3Rt9Zp5%2Bsas", "code": "V6x7Qm3Rt9Zp6"}


@pytest.mark.parametrize("lib", LIBS, ids=lambda m: m.__name__)
def test_credentials_in_a_query_under_short_names_are_redacted_and_replay(
    lib: Any, shop: Shop, db: str
) -> None:
    """``key=``, ``sig=`` and ``code=`` in a URL's query were stored as given (``api_key=``
    and ``token=`` were redacted); the other parameters stay, and the run replays."""
    query = "&".join(f"{k}={v}" for k, v in QUERY_SECRETS.items()) + "&page=2"
    client = instrument(lib.Client())

    def agent(order_id: str) -> dict[str, Any]:
        order = client.get(f"{shop.url}/orders/{order_id}?{query}").json()
        refund = client.post(f"{shop.url}/refunds?code=V7x7Qm3Rt9Zp7", json={"id": order_id})
        return {"order": order, "refund": refund.status_code}

    result = tachograph.record_run(_plain(agent), "B-2002", store=db)
    assert result.status == "ok", result
    recorded = tachograph.open_store(db).events(result.run_id)
    marker = "[redacted:secret:password]"
    key = recorded[1].payload["key"]
    assert key == (f"GET {shop.url}/orders/B-2002?key={marker}&sig={marker}&code={marker}&page=2")
    assert recorded[2].payload["args"]["url"] == f"{shop.url}/refunds?code={marker}"
    stored = b"".join(p.read_bytes() for p in Path(db).parent.glob(Path(db).name + "*"))
    for value in (*QUERY_SECRETS.values(), "V7x7Qm3Rt9Zp7"):
        assert value.encode() not in stored

    shop.stop()
    report = tachograph.replay(db, result.run_id, _plain(agent))
    assert report.reproduced, report.render()
    assert report.output == result.output
