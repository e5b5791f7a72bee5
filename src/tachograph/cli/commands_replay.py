"""Commands that run agent code against a record: ``replay``, ``fork``, ``resume``."""

from __future__ import annotations

import os
import sys
from typing import Any

import click
import orjson

from ..capture.loader import load_agent
from ..errors import Divergence, FormatError
from ..record.event import EventType
from ..replay.api import fork, replay, resume
from ..replay.history import RunHistory
from ..replay.report import ReplayReport
from .app import (
    EXIT_FAILED,
    EXIT_USAGE,
    CliError,
    agent_output,
    emit_json,
    json_option,
    open_store,
    resolve_run,
)
from .render import Output

__all__ = ["print_report", "register"]

_AGENT_HELP = (
    "The agent, as module:function (imported like an ASGI app; the current directory first)."
)


_ANSWERABLE = (
    EventType.MODEL_REQUEST.value,
    EventType.MODEL_RESPONSE.value,
    EventType.TOOL_REQUESTED.value,
    EventType.TOOL_COMPLETED.value,
)


def _check_allow(
    ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
) -> tuple[str, ...]:
    from ..errors import ReplayError
    from ..replay.guard import parse_allow

    for entry in value:
        try:
            parse_allow([entry])
        except ReplayError:
            raise click.BadParameter(
                f"{entry!r} is not HOST:PORT (a port 0-65535), HOST:*, unix:PATH or exec:PROGRAM"
            ) from None
    return value


_allow_network = click.option(
    "--allow-network",
    "allow_network",
    multiple=True,
    callback=_check_allow,
    metavar="HOST:PORT",
    help="Let this unrecorded connection through (repeatable; also HOST:*, unix:PATH, "
    "exec:PROGRAM). Anything else the record does not serve is refused.",
)


_tenant = click.option(
    "--tenant", default=None, help="The run's tenant, if its id exists under several."
)


def print_report(out: Output, report: ReplayReport) -> None:
    """Print a replay report with its verdict coloured."""
    # split at line feeds only: a recorded CR or U+2028 is escaped, never a line break
    lines = report.render().rstrip("\n").split("\n")
    out.line(lines[0], style="bold green" if report.reproduced else "bold red")
    for line in lines[1:]:
        stripped = line.strip()
        if stripped.startswith(("drift:", "WARNING")):
            style = "yellow"
        elif stripped.startswith(("first divergence", "seq ")):
            style = "bold red"
        elif stripped.startswith("$"):
            style = "red"
        elif stripped.startswith(("candidate", "note:")):
            style = "dim"
        else:
            style = None
        out.line(line, style=style)


def _failed(report: ReplayReport) -> bool:
    # a fork or resume whose agent raised (or exited) once live failed too, though it
    # followed the record
    return not report.reproduced or report.final_status in ("error", "aborted")


def _finish(report: ReplayReport, as_json: bool) -> None:
    if as_json:
        emit_json(report.to_dict())
    else:
        print_report(Output(), report)
    if _failed(report):
        sys.exit(EXIT_FAILED)


def _parse_override(text: str | None) -> Any:
    if text is None:
        return ...
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint="--override") from exc


@click.command("replay", short_help="Replay a run against the agent's code.")
@click.argument("run_id", metavar="RUN|FILE")
@click.option("--agent", "agent_path", required=True, metavar="MODULE:FUNCTION", help=_AGENT_HELP)
@click.option(
    "--match",
    type=click.Choice(["auto", "strict", "key"]),
    default="auto",
    show_default=True,
    help="strict: steps in recorded order; key: calls matched by idempotency key; auto: key "
    "when the recorded run had concurrent calls, else strict.",
)
@click.option("--collect", is_flag=True, help="Go on after the first divergence; report all.")
@click.option(
    "--allow-unverified", is_flag=True, help="Replay a run that does not verify (labelled so)."
)
@click.option("--rerun-pure", is_flag=True, help="Re-execute pure tools and compare results.")
@_tenant
@_allow_network
@json_option
def replay_cmd(
    run_id: str,
    agent_path: str,
    match: str,
    collect: bool,
    allow_unverified: bool,
    rerun_pure: bool,
    tenant: str | None,
    allow_network: tuple[str, ...],
    as_json: bool,
) -> None:
    """Replay a run against the agent's current code; nothing runs live, nothing is written.

    RUN is a run of the store, or a JSONL file of one run (``tacho export``), which needs no
    store. Exits 0 when the agent reproduces the run, 1 at a divergence (the report names the
    step).
    """
    with agent_output(as_json):  # what its module prints as it is imported: to stderr
        agent = load_agent(agent_path)
    if not os.path.isfile(run_id) and ("/" in run_id or os.sep in run_id):
        # a run id holds no slash: this names a file, as `tacho verify FILE` takes it
        raise CliError(f"no such file: {run_id}", exit_code=EXIT_USAGE)
    if os.path.isfile(run_id):
        try:
            history = RunHistory.from_jsonl(run_id, allow_unverified=allow_unverified)
        except FormatError as exc:
            if exc.runs is None:
                raise
            raise CliError(
                f"{run_id} holds {exc.runs} runs; replay takes a file of one run: export "
                "the run alone (tacho export RUN -o FILE), or replay it from its store",
                exit_code=EXIT_USAGE,
            ) from exc
        with agent_output(as_json):
            report = replay(
                history,
                None,
                agent,
                match=match,
                collect=collect,
                allow_unverified=allow_unverified,
                rerun_pure=rerun_pure,
                allow_network=allow_network,
            )
        _finish(report, as_json)
        return
    with open_store() as store, agent_output(as_json):
        info = resolve_run(store, run_id, tenant=tenant)
        report = replay(
            store,
            info.run_id,
            agent,
            tenant=info.tenant,
            match=match,
            collect=collect,
            allow_unverified=allow_unverified,
            rerun_pure=rerun_pure,
            allow_network=allow_network,
        )
    _finish(report, as_json)


@click.command("fork", short_help="Continue a run live from step N, as a new run.")
@click.argument("run_id", metavar="RUN")
@click.option("--at", "at", type=int, required=True, metavar="N", help="Go live after seq N.")
@click.option("--agent", "agent_path", required=True, metavar="MODULE:FUNCTION", help=_AGENT_HELP)
@click.option(
    "--override",
    metavar="JSON",
    help="Serve this answer at seq N instead of the recorded one (a model or tool answer).",
)
@click.option(
    "--live", is_flag=True, help="Run write and irreversible tools for real (default: dry run)."
)
@click.option("--allow-unverified", is_flag=True, help="Fork a run that does not verify.")
@_tenant
@_allow_network
@json_option
def fork_cmd(
    run_id: str,
    at: int,
    agent_path: str,
    override: str | None,
    live: bool,
    allow_unverified: bool,
    tenant: str | None,
    allow_network: tuple[str, ...],
    as_json: bool,
) -> None:
    """Serve a run up to seq N, then continue live in a new run (printed at the end).

    Tools that write or cannot be undone run in dry run unless --live is given.
    """
    with agent_output(as_json):  # what its module prints as it is imported: to stderr
        agent = load_agent(agent_path)
    value = _parse_override(override)
    with open_store() as store:
        info = resolve_run(store, run_id, tenant=tenant)
        run_id = info.run_id
        if not 0 <= at < info.events:
            raise CliError(
                f"--at {at} is outside run {run_id} (seq 0..{info.events - 1})",
                exit_code=EXIT_USAGE,
            )
        if value is not ...:
            target = next(store.read(run_id, tenant=info.tenant, from_seq=at))
            if target.type not in _ANSWERABLE:
                raise CliError(
                    f"--override needs --at to name a model or tool call or its answer; "
                    f"seq {at} is {target.type}",
                    exit_code=EXIT_USAGE,
                )
        with agent_output(as_json):
            report = fork(
                store,
                run_id,
                at,
                agent,
                tenant=info.tenant,
                override=value,
                dry_run=not live,
                allow_unverified=allow_unverified,
                allow_network=allow_network,
            )
    if not as_json:
        out = Output()
        print_report(out, report)
        if report.new_run_id is not None:
            out.line(f"new run: {report.new_run_id}", style="bold")
        else:
            out.line("no new run: nothing was recorded", style="bold")
    else:
        emit_json(report.to_dict())
    if _failed(report):
        sys.exit(EXIT_FAILED)


@click.command("resume", short_help="Continue a crashed run where it stopped.")
@click.argument("run_id", metavar="RUN")
@click.option("--agent", "agent_path", required=True, metavar="MODULE:FUNCTION", help=_AGENT_HELP)
@click.option(
    "--confirm",
    is_flag=True,
    help="Allow repeating a side effect whose outcome was never recorded.",
)
@click.option(
    "--takeover",
    is_flag=True,
    help="With --confirm: resume although another resume took the run and cannot be asked "
    "whether it still runs (one on another host, or a process id since given to another "
    "process): say it has ended.",
)
@_tenant
@_allow_network
@json_option
def resume_cmd(
    run_id: str,
    agent_path: str,
    confirm: bool,
    takeover: bool,
    tenant: str | None,
    allow_network: tuple[str, ...],
    as_json: bool,
) -> None:
    """Continue a run that never finished (a crash), in the same run.

    Recorded steps are served; then the agent goes on live. A call whose intent was recorded
    but never completed is repeated only for pure and read tools, or with --confirm.
    """
    if takeover and not confirm:
        # only a confirmed resume runs an open effect again, so only it takes the run
        raise click.UsageError("--takeover goes with --confirm (only it runs an effect again)")
    with agent_output(as_json):  # what its module prints as it is imported: to stderr
        agent = load_agent(agent_path)
    with open_store() as store:
        info = resolve_run(store, run_id, tenant=tenant)
        run_id = info.run_id
        if info.status is not None:
            raise CliError(
                f"run {run_id} has finished ({info.status}); only an unfinished run resumes",
                exit_code=EXIT_USAGE,
                hints=(
                    f"To continue from a step, fork it: tacho fork {run_id} --at N --agent ...",
                ),
            )
        try:
            with agent_output(as_json):
                report = resume(
                    store,
                    run_id,
                    agent,
                    tenant=info.tenant,
                    confirm=confirm,
                    takeover=takeover,
                    allow_network=allow_network,
                )
        except Divergence as exc:  # the run stays open; the report says where and why
            report = exc.report
    _finish(report, as_json)


def register(group: click.Group) -> None:
    """Add the replay commands to ``group``."""
    for command in (replay_cmd, fork_cmd, resume_cmd):
        group.add_command(command)
