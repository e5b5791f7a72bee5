"""Tools of other frameworks in an agent's declaration, fingerprinted by name and schema.

``@tachograph.agent(tools=[...])`` takes ``@tachograph.tool`` functions, and also the tool
objects of agent frameworks, recognised by their shape (no framework is imported here):

* an OpenAI Agents SDK ``FunctionTool`` (``name``, ``params_json_schema``);
* a LangChain ``BaseTool`` (``name``, ``get_input_jsonschema()`` or ``args``);
* any object with a ``name`` and a JSON ``input_schema`` / ``inputSchema`` (MCP tools);
* a pydantic-ai ``Tool`` (its ``tool_def.parameters_json_schema``) or ``ToolDefinition``;
* a Google ADK tool (the ``parameters_json_schema`` of the declaration it sends the model).

The fingerprint (SPEC section 7) is the SHA-256 of the canonical ``{"name", "schema"}``: a
tool whose parameters change changes the fingerprint, its implementation does not (as for
decorated tools, whose fingerprint is their signature).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from ..errors import ProfileError
from ..record.canonical import canonical

__all__ = ["FrameworkTool", "framework_tool"]


@dataclass(frozen=True)
class FrameworkTool:
    """A framework's tool as the environment fingerprint sees it."""

    name: str
    schema: dict[str, Any] = field(repr=False)
    version: str | None = None

    @property
    def schema_hash(self) -> str:
        body = canonical({"name": self.name, "schema": self.schema})
        return "sha256:" + hashlib.sha256(body).hexdigest()

    def fingerprint(self) -> dict[str, Any]:
        """The ``tools`` entry of the environment fingerprint."""
        return {"schema": self.schema_hash, "version": self.version}


def _schema_of(item: Any) -> Any:
    attributes = ("params_json_schema", "input_schema", "inputSchema", "parameters_json_schema")
    for attribute in attributes:
        value = getattr(item, attribute, None)
        if isinstance(value, dict):
            return value
    definition = getattr(item, "tool_def", None)  # pydantic-ai Tool
    value = getattr(definition, "parameters_json_schema", None)
    if isinstance(value, dict):
        return value
    declare = getattr(item, "_get_declaration", None)  # Google ADK BaseTool (its only accessor)
    if callable(declare):
        try:
            declaration = declare()
        except Exception:  # a tool that cannot declare itself: no schema
            declaration = None
        value = getattr(declaration, "parameters_json_schema", None)
        if isinstance(value, dict):
            return value
        parameters = getattr(declaration, "parameters", None)
        dump = getattr(parameters, "model_dump", None)
        if callable(dump):
            value = dump(mode="json", exclude_none=True)
            if isinstance(value, dict):
                return value
    method = getattr(item, "get_input_jsonschema", None)  # LangChain runnables
    if callable(method):
        try:
            value = method()
        except Exception:  # a tool whose schema cannot be built: fall back to its args
            value = None
        if isinstance(value, dict):
            return value
    args = getattr(item, "args", None)
    if isinstance(args, dict):
        return {"properties": args}
    return None


def framework_tool(item: Any) -> FrameworkTool | None:
    """The tool object of a framework as a :class:`FrameworkTool`, or None if it is not one."""
    name = getattr(item, "name", None)
    if not isinstance(name, str) or not name:
        return None
    schema = _schema_of(item)
    if not isinstance(schema, dict):
        return None
    try:
        canonical(schema)
    except ProfileError:
        return None
    version = getattr(item, "schema_version", None)
    return FrameworkTool(name, schema, version if isinstance(version, str) else None)
