"""OTLP/JSON read with protobuf's ``json_format`` (``opentelemetry-proto``'s messages), with the
two tolerances the JSON mapping lacks: OTLP/JSON's hex ids and one document per line.

Each file is checked against an independent reading: the fake OTLP receiver's decoder
(tests/fakes/otlp_receiver.py), which parses the same bytes into an
``ExportTraceServiceRequest`` on its own.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from conftest import GOLDEN
from fakes.otlp_receiver import decode_otlp_json
from tachograph.errors import FormatError
from tachograph.otel.otlp_json import parse_otlp_json

FILES = sorted(
    p
    for p in [*GOLDEN.glob("*.json"), *(GOLDEN / "producers").glob("*.json")]
    if p.name != "expected.json" and not p.name.endswith(".versions.json")
)


def _plain(value: Any) -> Any:
    return [_plain(v) for v in value] if isinstance(value, (list, tuple)) else value


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_golden_file_reads_as_an_independent_decoder_reads_it(path: Path) -> None:
    data = path.read_bytes()
    ours = parse_otlp_json(data)
    theirs = decode_otlp_json(data)
    assert len(ours) == len(theirs) > 0
    for mine, ref in zip(ours, theirs, strict=True):
        assert (mine.trace_id, mine.span_id, mine.name) == (
            ref["trace_id"],
            ref["span_id"],
            ref["name"],
        )
        assert mine.parent_span_id == (ref["parent_span_id"] or None)
        assert mine.kind == ref["kind"]
        assert (mine.start_ns, mine.end_ns) == (
            ref["start_time_unix_nano"],
            ref["end_time_unix_nano"],
        )
        assert {k: _plain(v) for k, v in mine.attributes.items()} == {
            k: _plain(v) for k, v in ref["attributes"].items()
        }
        assert [e.name for e in mine.events] == [e["name"] for e in ref["events"]]
        assert mine.status_code == ref["status"]["code"]
        assert dict(mine.resource) == ref["resource_attributes"]


def _to_base64_ids(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            k: base64.b64encode(bytes.fromhex(v)).decode()
            if k in ("traceId", "spanId", "parentSpanId") and v
            else _to_base64_ids(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_to_base64_ids(v) for v in node]
    return node


def test_hex_and_base64_ids_read_the_same() -> None:
    doc = json.loads((GOLDEN / "producers" / "traceloop.json").read_text())
    hexed = parse_otlp_json(json.dumps(doc).encode())
    based = parse_otlp_json(json.dumps(_to_base64_ids(doc)).encode())
    assert hexed == based
    assert hexed[0].trace_id == doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"]


def test_json_lines_and_an_array_of_documents() -> None:
    doc = json.loads((GOLDEN / "genai_current.json").read_text())
    once = parse_otlp_json(json.dumps(doc).encode())
    lines = (json.dumps(doc) + "\n\n" + json.dumps(doc) + "\n").encode()
    assert parse_otlp_json(lines) == once + once
    assert parse_otlp_json(json.dumps([doc, doc]).encode()) == once + once


def _span_doc(**span: Any) -> bytes:
    body = {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "s", **span}
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [body]}]}]}).encode()


KV = {"key": "x", "value": {"boolValue": True}}


def test_what_the_json_mapping_allows_is_read_as_it_defines_it() -> None:
    (span,) = parse_otlp_json(
        _span_doc(
            kind="SPAN_KIND_CLIENT",
            start_time_unix_nano=1764426193514146000,  # snake_case, a JSON number
            endTimeUnixNano="1764426193514147000",
            status={"code": "STATUS_CODE_ERROR", "message": "boom"},
            attributes=[
                {"key": "n", "value": {"intValue": 7}},
                {"key": "f", "value": {"doubleValue": "NaN"}},
                {"key": "l", "value": {"arrayValue": {"values": [{"stringValue": "a"}]}}},
                {"key": "kv", "value": {"kvlistValue": {"values": [KV]}}},
            ],
            unknownField={"ignored": True},
        )
    )
    assert span.kind == 3
    assert (span.start_ns, span.end_ns) == (1764426193514146000, 1764426193514147000)
    assert (span.status_code, span.status_message) == (2, "boom")
    assert span.attributes == {"n": 7, "f": "nan", "l": ["a"], "kv": {"x": True}}


@pytest.mark.parametrize(
    ("span", "says"),
    [
        ({"attributes": [{"key": "k", "value": {"intValue": "seven"}}]}, "intValue"),
        ({"status": 3}, "status"),
        ({"traceId": "xyz"}, "trace id"),
        ({"spanId": ""}, "no trace id or span id"),
        ({"events": {"name": "not a list"}}, "events"),
    ],
)
def test_a_malformed_document_is_a_format_error_naming_where(span: Any, says: str) -> None:
    with pytest.raises(FormatError) as caught:
        parse_otlp_json(_span_doc(**span))
    assert says in str(caught.value)
    assert caught.value.location is not None
    assert caught.value.location.startswith("document 1")


HIDE = textwrap.dedent(
    """
    import sys

    class Hide:
        def __init__(self, *names):
            self.names = names

        def find_spec(self, name, path=None, target=None):
            if any(name == n or name.startswith(n + ".") for n in self.names):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Hide(*sys.argv[1].split(",")))
    """
)


def _python(code: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TACHOGRAPH_STORE", "FORCE_COLOR")}
    return subprocess.run(
        [sys.executable, "-c", HIDE + code, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("hidden", ["google.protobuf", "opentelemetry.proto"])
def test_cli_import_without_the_proto_modules_is_one_line_and_exit_2(
    tmp_path: Path, hidden: str
) -> None:
    """The SDK may be there and protobuf or the OTLP messages not: the check is on what the
    reader needs."""
    code = "from tachograph.cli import main\nsys.argv = ['tacho', *sys.argv[2:]]\nmain()\n"
    store = tmp_path / "runs.db"
    args = ["--store", str(store), "otel", "import", str(GOLDEN / "genai_current.json")]
    proc = _python(code, hidden, *args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("Error: tacho otel import needs the 'otel' extra")
    assert hidden.split(".")[0] in lines[0]
    assert "pip install 'tachograph[otel]'" in lines[0]
    assert not store.exists()


def test_python_import_without_protobuf_raises_an_import_error_naming_the_extra(
    tmp_path: Path,
) -> None:
    code = textwrap.dedent(
        f"""
        from tachograph.otel.otlp_json import parse_otlp_json  # importable without it
        try:
            parse_otlp_json(open({str(GOLDEN / "genai_current.json")!r}, "rb").read())
        except ImportError as exc:
            print(exc)
        else:
            raise SystemExit("no ImportError")
        """
    )
    proc = _python(code, "google.protobuf", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("reading OTLP/JSON needs the 'otel' extra")
    assert "pip install 'tachograph[otel]'" in proc.stdout
