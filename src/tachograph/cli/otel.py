"""``tacho otel export`` and ``tacho otel import``: runs to and from OpenTelemetry traces.

OpenTelemetry is imported only when one of these commands runs, so that every other command
starts without it; without the ``otel`` extra the commands say how to install it (exit 2).
See docs/otel.md.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from ..errors import FormatError
from ..store import verify_stored
from ..views.text import escape
from .app import (
    EXIT_FAILED,
    EXIT_USAGE,
    POSITIVE_SECONDS,
    SECONDS,
    CliError,
    emit_json,
    json_option,
    open_store,
    regular_file,
    resolve_run,
)
from .privacy import purpose_option, scoped_store

__all__ = ["register"]

_EXTRA = "pip install 'tachograph[otel]'"


def _require_otel(command: str) -> None:
    """One line and exit 2 without the ``otel`` extra, never a traceback. Export needs the
    SDK and its exporter; import reads OTLP/JSON with protobuf's ``json_format`` against
    ``opentelemetry-proto``'s messages."""
    try:
        if command == "import":
            import google.protobuf.json_format  # noqa: F401
            import opentelemetry.proto.trace.v1.trace_pb2
        else:
            import opentelemetry.sdk.trace  # noqa: F401
    except ImportError as exc:
        missing = exc.name or "opentelemetry"
        raise CliError(
            f"tacho otel {command} needs the 'otel' extra ({missing} is not installed): {_EXTRA}",
            exit_code=EXIT_USAGE,
        ) from None


@click.group("otel", short_help="Export runs as OpenTelemetry traces; import GenAI traces.")
def otel_group() -> None:
    """Runs to and from OpenTelemetry traces (needs the 'otel' extra)."""


@otel_group.command("export", short_help="Send a recorded run to an OTLP/HTTP endpoint.")
@click.argument("run_id", metavar="RUN")
@click.option(
    "--endpoint",
    metavar="URL",
    default=None,
    help="The OTLP/HTTP traces URL, used as given (include /v1/traces). Default: "
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as given, else OTEL_EXPORTER_OTLP_ENDPOINT + "
    "/v1/traces, else http://localhost:4318/v1/traces.",
)
@click.option("--tenant", default=None, help="The run's tenant (default: any).")
@click.option(
    "--header",
    "headers",
    multiple=True,
    metavar="KEY=VALUE",
    help="An HTTP header to send (repeatable). Default: OTEL_EXPORTER_OTLP_HEADERS.",
)
@click.option(
    "--timeout",
    type=POSITIVE_SECONDS,
    default=10.0,
    show_default=True,
    help="Seconds to wait for the endpoint, retries included.",
)
@click.option(
    "--content/--no-content",
    "content",
    default=None,
    help="Put message content (requests, responses, tool arguments and results) on the "
    "spans. Default: OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT, else no.",
)
@click.option(
    "--service-name",
    default="tachograph",
    show_default=True,
    help="The service.name resource attribute of the spans.",
)
@click.option(
    "--allow-unverified",
    is_flag=True,
    help="Send a run that does not verify (named TAMPERED on stderr).",
)
@purpose_option
@json_option
def export_command(
    run_id: str,
    endpoint: str | None,
    tenant: str | None,
    headers: tuple[str, ...],
    timeout: float,
    content: bool | None,
    service_name: str,
    allow_unverified: bool,
    purpose: str,
    as_json: bool,
) -> None:
    """Turn a recorded run into spans (its recorded timestamps and ids) and send them over
    OTLP/HTTP, so that a run recorded without tracing can be looked at in a tracing backend.

    A run that does not verify is refused (nothing is sent) unless --allow-unverified.
    Exit 0 when the endpoint accepted the spans, 1 when it did not (the exporter's error is
    printed) or the run was refused, 3 when the run is not in the store.
    """
    _require_otel("export")
    from ..otel.export import export_run, parse_headers

    try:
        header_map = parse_headers(headers)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--header") from None
    # only for an export: not with `otel import`
    from .commands_inspect import seal_of, verification_of

    with open_store() as raw:
        store = scoped_store(raw, purpose)
        info = resolve_run(store, run_id, tenant=tenant)
        # A tracing backend shows what it is sent as the run: a run that does not verify (as
        # stored, as ``tacho verify`` checks it) is not sent unless asked for.
        report = verify_stored(raw, info.run_id, tenant=info.tenant)
        seal = seal_of(raw, info.run_id, info.tenant)
        if (not report.ok or not seal.ok) and not allow_unverified:
            why = report.render() if not report.ok else f"its seal failed: {seal.reason}"
            raise CliError(
                f"refusing to export a run that does not verify: {why}",
                exit_code=EXIT_FAILED,
                hints=("pass --allow-unverified to send it anyway",),
            )
        result = export_run(
            store,
            info.run_id,
            endpoint=endpoint,
            tenant=info.tenant,
            headers=header_map or None,
            timeout=timeout,
            capture_content=content,
            service_name=service_name,
            purpose=purpose,
        )
    if not report.ok:
        click.echo(f"TAMPERED: {escape(report.render())}", err=True)
    if not seal.ok:
        click.echo(f"SEAL FAILED: {escape(str(seal.reason))}", err=True)
    if as_json:
        emit_json(
            {
                **result.to_dict(),
                "verification": verification_of(report, seal),
                "seal": seal.to_dict(),
            }
        )
    elif result.ok:
        click.echo(
            escape(
                f"exported {result.run_id}: {result.spans} spans, {result.span_events} span "
                f"events to {result.endpoint} (trace {result.trace_id})"
            )
        )
    if not result.ok:
        if not as_json:
            click.echo(
                escape(
                    f"Error: {result.endpoint} did not accept the spans of {result.run_id} "
                    "(see the exporter's message above)"
                ),
                err=True,
            )
        sys.exit(EXIT_FAILED)


@otel_group.command("import", short_help="Record GenAI traces (OTLP/JSON) as runs.")
@click.argument("file", metavar="FILE", type=click.Path(dir_okay=False, allow_dash=True))
@click.option(
    "--tenant",
    default=None,
    help="Tenant of the new runs (default: the store's ?tenant=, else 'default').",
)
@click.option(
    "--group-by",
    default=None,
    metavar="ATTR",
    help="Join traces whose spans share this attribute's value into one run "
    "(default: gen_ai.conversation.id, session.id, the Traceloop session id).",
)
@click.option(
    "--gap",
    type=SECONDS,
    default=None,
    metavar="SECONDS",
    help="Join traces naming no conversation when one starts within SECONDS of the last.",
)
@json_option
def import_command(
    file: str, tenant: str | None, group_by: str | None, gap: float | None, as_json: bool
) -> None:
    """Read OTLP/JSON traces of GenAI spans (current or older OpenTelemetry GenAI conventions,
    OpenInference, OpenLLMetry) from FILE ('-' for stdin) and record each trace as a run,
    labelled as imported; the traces of one conversation become one run (see --group-by and
    --gap). Runs already imported are skipped.

    Exit 0 when at least one run was found, 1 when the file holds no GenAI trace or is not
    OTLP/JSON, 2 when it does not exist or without the 'otel' extra.
    """
    _require_otel("import")
    from ..otel.importer import import_otlp

    source: Any
    if file == "-":
        with click.open_file("-", "rb") as stdin:
            source = stdin.read()
    else:
        source = regular_file(Path(file))
    with open_store(create=True) as store:
        try:
            result = import_otlp(store, source, tenant=tenant, group_by=group_by, gap=gap)
        except FormatError as exc:
            raise CliError(f"cannot import {source}: {exc}", exit_code=EXIT_FAILED) from exc
    if as_json:
        emit_json({"ok": bool(result.runs), **result.to_dict()})
    else:
        for run in result.runs:
            what = "already present, skipped" if run.skipped else f"{len(run.events)} events"
            click.echo(escape(f"{run.run_id}  {run.dialect}  {what}"))
        click.echo(
            escape(
                f"imported {sum(not r.skipped for r in result.runs)} run(s) from "
                f"{result.source} ({result.spans} spans, {result.written} events written)"
            )
        )
    if not result.runs:
        if not as_json:
            click.echo(escape(f"Error: no GenAI spans found in {result.source}"), err=True)
        sys.exit(EXIT_FAILED)


def register(cli: click.Group) -> None:
    """Add the ``otel`` group to ``cli``."""
    cli.add_command(otel_group)
