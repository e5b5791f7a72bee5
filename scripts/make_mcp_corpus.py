"""Record the MCP example corpus into corpus/mcp/.

One good run of ``examples.mcp_refund:agent``: the OpenAI SDK against the fake model server
of ``tests/fakes`` on 127.0.0.1, the tools on the MCP shop server of ``examples/`` started
over stdio. ``tacho test corpus/mcp --agent examples.mcp_refund:agent`` replays it with
neither server running. Run from the repository root:

    python scripts/make_mcp_corpus.py [--out corpus/mcp]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import tachograph as tg  # noqa: E402
from fakes.llm_server import FakeLLMServer  # noqa: E402
from tachograph.regression.corpus import save_run  # noqa: E402

RUN_ID = "mcp-good-refund-b2002"
NOTE = (
    "MCP refund agent over stdio: lookup (read), refund (irreversible), two user turns; "
    "replayed without the model or the MCP server"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "corpus" / "mcp"))
    out = parser.parse_args().out
    with tempfile.TemporaryDirectory() as scratch:
        os.environ["SHOP_COUNTER"] = str(Path(scratch) / "refunds.json")
        os.environ.pop("MCP_SHOP_URL", None)
        store = str(Path(scratch) / "runs.db")
        with FakeLLMServer() as srv:
            os.environ["OPENAI_BASE_URL"] = srv.openai_base_url
            os.environ["OPENAI_API_KEY"] = "sk-corpus"
            import examples.mcp_refund as example

            result = tg.record_run(example.agent, example.PROMPT, store=store, run_id=RUN_ID)
        if result.status != "ok":
            raise SystemExit(f"the run failed: {result}")
        save_run(store, RUN_ID, to=out, verdict="good", note=NOTE, overwrite=True)
    print(f"saved {RUN_ID} to {out}")


if __name__ == "__main__":
    main()
