"""``tacho save`` and ``tacho test``: a corpus of saved runs, replayed in CI.

``tacho save RUN --to DIR --verdict good|bad`` keeps a run from the store as a fixture;
``tacho test DIR --agent module:attr`` replays every fixture against the agent and exits 1
when any run is ``changed``, ``still wrong``, ``raised`` or ``unreplayable``. See
docs/regression.md.
"""

from __future__ import annotations

from pathlib import Path

import click

from ..capture.loader import load_agent
from ..capture.recorder import Processor
from ..errors import AgentLoadError
from ..record.files import write_whole
from ..regression.runner import CorpusError, load_corpus, save_run, test_corpus
from ..views.text import escape
from . import MAX_WORKERS
from .app import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    agent_output,
    emit_json,
    json_option,
    open_store,
    resolve_run,
)
from .privacy import purpose_option, scoped_store

__all__ = ["register"]


@click.command("save")
@click.argument("run_id", metavar="RUN")
@click.option(
    "--to",
    "to",
    required=True,
    metavar="DIR",
    type=click.Path(file_okay=False, path_type=Path),
    help="The corpus folder (created if missing).",
)
@click.option(
    "--verdict",
    required=True,
    type=click.Choice(["good", "bad"]),
    help="good: the run did the right thing; bad: it did something wrong (needs --wrong-at).",
)
@click.option("--note", default=None, help="Why the run is kept: what it shows, what went wrong.")
@click.option(
    "--wrong-at",
    "wrong_at",
    type=click.IntRange(min=0),
    default=None,
    metavar="SEQ",
    help="For a bad run: the seq of the step that was wrong.",
)
@click.option(
    "--processor",
    "processors",
    multiple=True,
    metavar="MODULE:ATTR",
    help="A payload processor (type, payload) -> payload applied before saving, e.g. a "
    "redactor; repeatable. The chain is rebuilt over the processed payloads.",
)
@click.option("--name", default=None, help="File name in the corpus (default: the run id).")
@click.option(
    "--tenant", default=None, help="The run's tenant, when run ids repeat across tenants."
)
@click.option("--force", is_flag=True, help="Replace a fixture of the same name.")
@purpose_option
@json_option
@click.pass_context
def save_command(
    ctx: click.Context,
    run_id: str,
    to: Path,
    verdict: str,
    note: str | None,
    wrong_at: int | None,
    processors: tuple[str, ...],
    name: str | None,
    tenant: str | None,
    force: bool,
    purpose: str,
    as_json: bool,
) -> None:
    """Save RUN from the store into a corpus folder, with its verdict.

    RUN is a run id or a unique prefix of one (at least 6 characters). Writes DIR/NAME.jsonl
    (the run, SPEC section 4) and DIR/NAME.tacho.json (verdict, note, wrong step, provenance).

    \b
    Examples:
      tacho save run_01J... --to corpus/ --verdict good --note "refund under the limit"
      tacho save run_01J... --to corpus/ --verdict bad --wrong-at 8 \\
          --note "refunded an order that should have been escalated"

    Exit codes: 0 saved; 1 the run does not verify; 2 usage error; 3 store or run not found.
    """
    if verdict == "bad" and wrong_at is None:
        raise CliError(
            "a bad run needs --wrong-at SEQ (the step that was wrong)", exit_code=EXIT_USAGE
        )
    if verdict == "good" and wrong_at is not None:
        raise CliError("--wrong-at is only for --verdict bad", exit_code=EXIT_USAGE)
    loaded: list[Processor] = []
    for target in processors:
        try:
            with agent_output(as_json):  # what its module prints is not the JSON document
                loaded.append(load_agent(target, kind="processor"))
        except AgentLoadError as exc:
            raise CliError(f"--processor: {exc}", exit_code=EXIT_USAGE) from exc
    raw = open_store(ctx)
    # a fixture holds payloads: read for --purpose and recorded in the store audit, as an
    # export is (what the purpose may not read whole is saved erased, so the file verifies)
    store = scoped_store(raw, purpose, whole_events=True)
    try:
        info = resolve_run(store, run_id, tenant=tenant)
        run_id = info.run_id
        path = save_run(
            store,
            run_id,
            to=to,
            verdict=verdict,
            note=note,
            wrong_at=wrong_at,
            processors=loaded,
            name=name,
            tenant=info.tenant,
            overwrite=force,
        )
    except CorpusError as exc:
        raise CliError(str(exc), exit_code=EXIT_USAGE) from exc
    finally:
        raw.close()
    sidecar = path.with_name(path.name[: -len(".jsonl")] + ".tacho.json")
    if as_json:
        emit_json(
            {
                "run_id": run_id,
                "path": str(path),
                "sidecar": str(sidecar),
                "verdict": verdict,
                "wrong_at": wrong_at,
                "note": note,
                "processors": list(processors),
            }
        )
        return
    what = f"bad, wrong at seq {wrong_at}" if verdict == "bad" else "good"
    click.echo(escape(f"saved {run_id} ({what}) to {path}"))


@click.command("test", short_help="Replay a corpus of saved runs against the agent.")
@click.argument(
    "corpus", metavar="DIR", type=click.Path(exists=True, file_okay=False, path_type=Path)
)
@click.option(
    "--agent",
    "agent",
    required=True,
    metavar="MODULE:ATTR",
    help="The agent under test, e.g. tachograph.demo.agent:billing_agent.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1, max=MAX_WORKERS),
    default=None,
    help="Replay in this many processes (default: one per CPU; 1 replays in this process).",
)
@click.option(
    "--junit",
    "junit",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE",
    help="Also write a JUnit XML report to FILE, for CI.",
)
@click.option(
    "--accept",
    "accept",
    multiple=True,
    metavar="RUN",
    help="Record RUN's current behaviour, if changed or raised, as its new expectation (in its "
    "sidecar; the log is never edited). Repeatable; RUN is a file name or run id.",
)
@click.option(
    "--match",
    type=click.Choice(["strict", "key"]),
    default="strict",
    help="strict: steps in recorded order; key: calls matched by idempotency key.",
)
@json_option
def test_command(
    corpus: Path,
    agent: str,
    workers: int | None,
    junit: Path | None,
    accept: tuple[str, ...],
    match: str,
    as_json: bool,
) -> None:
    """Replay every run saved under DIR against the agent and classify each.

    \b
    reproduced    a good run, same decisions                        passes
    changed       a good run whose decisions now differ             fails
    fixed         a bad run that now diverges at or before its
                  wrong step                                        passes
    still wrong   a bad run whose wrong step is reproduced          fails
    raised        the agent raised or exited where the recording
                  did not end so (never a fix)                      fails
    unreplayable  erased payloads or a run that does not verify     fails

    Environment drift (code version, models, prompts, tools) is reported per run: such a
    replay is a simulation, not a reproduction.

    Exit codes: 0 every run passed; 1 at least one failed; 2 usage error (agent does not
    import, empty corpus, unknown --accept run).
    """
    try:
        entries = load_corpus(corpus)
    except CorpusError as exc:
        raise CliError(str(exc), exit_code=EXIT_USAGE) from exc
    if not entries:
        raise CliError(
            f"no runs in {corpus}",
            exit_code=EXIT_USAGE,
            hints=("Save runs into it with: tacho save RUN --to DIR --verdict good",),
        )
    # fail early, with exit code 2, before any worker starts; what the agent's module prints
    # as it is imported goes to stderr under --json, as the agent's own output does
    with agent_output(as_json):
        load_agent(agent)
    if junit is not None:  # and a report that could not be written, before any replay
        try:
            junit.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CliError(
                f"--junit {junit}: cannot make its folder: {exc.strerror or exc}",
                exit_code=EXIT_USAGE,
            ) from None
        if junit.exists() and not junit.is_file():
            raise CliError(
                f"--junit {junit}: not a regular file (the report is written whole, by name)",
                exit_code=EXIT_USAGE,
            )
    try:
        # under --json what the agent (or a worker) prints goes to stderr: see agent_output
        with agent_output(as_json):
            report = test_corpus(corpus, agent, workers=workers, accept=accept, match=match)
    except CorpusError as exc:
        raise CliError(str(exc), exit_code=EXIT_USAGE) from exc
    if junit is not None:
        from ..regression.runner import junit_xml

        try:
            with write_whole(junit) as handle:
                handle.write(junit_xml(report).encode("utf-8"))
        except OSError as exc:
            raise CliError(
                f"--junit {junit}: cannot write it: {exc.strerror or exc}", exit_code=EXIT_USAGE
            ) from None
    if as_json:
        emit_json(report.to_dict())
    else:
        # recorded text (notes, tool names, messages) is untrusted: escaped, line by line
        click.echo(escape(report.render(), newlines=True))
    ctx = click.get_current_context()
    ctx.exit(EXIT_OK if report.ok else EXIT_FAILED)


def register(cli: click.Group) -> None:
    """Add ``save`` and ``test`` to the root ``tacho`` group."""
    cli.add_command(save_command)
    cli.add_command(test_command)
