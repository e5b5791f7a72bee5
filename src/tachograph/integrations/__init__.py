"""Record and replay agents built on provider SDKs, with no change to the agent's code.

Each integration is an optional extra and is imported on its own; importing ``tachograph``
imports none of them (nor the SDKs they wrap):

* :mod:`tachograph.integrations.openai`: the official ``openai`` SDK (``tachograph[openai]``);
* :mod:`tachograph.integrations.anthropic`: the official ``anthropic`` SDK
  (``tachograph[anthropic]``);
* :mod:`tachograph.integrations.httpx`: plain ``httpx`` and ``httpx2`` clients, requests as
  external reads and tool calls (``tachograph[http]``);
* :mod:`tachograph.integrations.openai_agents`: the OpenAI Agents SDK: model calls, tools,
  guardrails and handoffs (``tachograph[agents]``);
* :mod:`tachograph.integrations.mcp`: MCP client sessions (tool calls, listings, reads;
  replayed without starting the server) and a server middleware (``tachograph[mcp]``).

Both record at the SDK's HTTP transport, so that a replay hands the SDK the recorded bytes and
the SDK builds its own objects, streams, raw responses and exceptions from them.
"""

from __future__ import annotations

__all__: list[str] = []
