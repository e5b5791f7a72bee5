"""What model providers' wire formats look like, and nothing else.

Pure shape knowledge shared by the SDK integrations, the OpenTelemetry bridge, export, import,
the CLI and replay matching:

* :mod:`.http`: an HTTP exchange as the integrations record it (JSON bodies, server-sent
  events) and the provider body inside it;
* :mod:`.openai`: OpenAI chat completions and responses;
* :mod:`.anthropic`: Anthropic messages;
* :mod:`.genai`: the OpenTelemetry GenAI semantic conventions' message, finish-reason,
  tool-definition and provider-name forms;
* :mod:`.normal`: the provider-neutral normal form of a model request, for comparing a
  request recorded in one form with one made in another.

Nothing here imports OpenTelemetry, an SDK, the CLI or the integrations.
"""
