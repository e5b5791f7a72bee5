"""Load an agent from an import path, ``module:attribute``, as ASGI servers load apps."""

from __future__ import annotations

import difflib
import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

from ..errors import AgentLoadError

__all__ = ["load_agent"]


def load_agent(target: str, *, kind: str = "agent") -> Callable[..., Any]:
    """Import ``package.module:attribute`` (the attribute may be dotted) and return it.

    The current directory is put first on ``sys.path``, so that an agent in the project being
    worked on imports without installing it. Every failure is an
    :class:`~tachograph.errors.AgentLoadError` (``target``, ``reason``) that says which part
    failed: the form of the path, the module, the attribute, or that it is not callable.
    ``kind`` names what is loaded in those messages (``agent``, ``processor``).
    """
    module_name, sep, attr_path = target.partition(":")
    if not sep or not module_name or not attr_path:
        raise AgentLoadError(
            f"--{kind} {target!r} is not of the form module:function "
            "(for example tachograph.demo.agent:billing_agent)",
            target=target,
            reason="form",
        )
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise AgentLoadError(
                f"cannot load {kind} {target!r}: no module named {missing!r} "
                f"(looked in the current directory {cwd} and on sys.path)",
                target=target,
                reason="module",
            ) from exc
        raise AgentLoadError(
            f"cannot load {kind} {target!r}: importing {module_name!r} failed because it "
            f"imports {missing!r}, which is not installed",
            target=target,
            reason="dependency",
        ) from exc
    except Exception as exc:
        raise AgentLoadError(
            f"cannot load {kind} {target!r}: importing {module_name!r} raised "
            f"{type(exc).__name__}: {exc}",
            target=target,
            reason="import",
        ) from exc
    obj: Any = module
    done: list[str] = []
    for part in attr_path.split("."):
        walked = f"{module_name}:{'.'.join(done)}" if done else f"module {module_name}"
        if not hasattr(obj, part):
            names = [n for n in dir(obj) if not n.startswith("_")]
            close = difflib.get_close_matches(part, names, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise AgentLoadError(
                f"cannot load {kind} {target!r}: {walked} has no attribute {part!r}{hint}",
                target=target,
                reason="attribute",
                suggestions=close,
            )
        obj = getattr(obj, part)
        done.append(part)
    if not callable(obj):
        raise AgentLoadError(
            f"cannot load {kind} {target!r}: it is a {type(obj).__name__}, not a callable {kind}",
            target=target,
            reason="callable",
        )
    return obj  # type: ignore[no-any-return]
