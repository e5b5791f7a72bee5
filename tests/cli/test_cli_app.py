"""The conventions of the root group: store selection, errors, exit codes, plugged modules."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import tachograph.cli.app as app
from tachograph import errors
from tachograph.cli.app import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_STORE,
    EXIT_USAGE,
    cli,
    exit_code_for,
    load_plugged,
)

from .conftest import Tacho

Run = Callable[..., subprocess.CompletedProcess[str]]


def test_exit_codes_are_the_documented_numbers() -> None:
    assert (EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_STORE) == (0, 1, 2, 3)


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (errors.AgentLoadError("x"), EXIT_USAGE),
        (errors.ConfirmationRequired("x"), EXIT_USAGE),
        (errors.ProfileError("x"), EXIT_USAGE),
        (errors.StoreNotFound("x"), EXIT_STORE),
        (errors.RunNotFound("x"), EXIT_STORE),
        (errors.StoreUnavailable("x"), EXIT_STORE),
        (errors.SchemaVersionError("x"), EXIT_STORE),
        (errors.VerificationFailed("x"), EXIT_FAILED),
        (errors.Divergence("x"), EXIT_FAILED),
        (errors.Unreplayable("x"), EXIT_FAILED),
        (errors.FormatError("x"), EXIT_FAILED),
        (errors.RecordingError("x"), EXIT_FAILED),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else str(v),
)
def test_each_error_maps_to_its_documented_exit_code(
    error: errors.TachographError, code: int
) -> None:
    assert exit_code_for(error) == code


def test_no_command_prints_help_as_a_usage_error(runner: CliRunner) -> None:
    result = runner.invoke(cli, [])
    assert result.exit_code == EXIT_USAGE
    assert "demo" in result.output


@pytest.mark.parametrize(
    "args",
    [
        ("runs",),
        ("show", "run_x"),
        ("state", "run_x"),
        ("verify",),
        ("diff", "a", "b"),
        ("export", "--all"),
        ("replay", "run_x", "--agent", "tachograph.demo.agent:billing_agent"),
    ],
)
def test_a_missing_store_says_where_it_looked(
    tmp_path: Path, runner: CliRunner, args: tuple[str, ...]
) -> None:
    missing = tmp_path / "typo.db"
    result = Tacho(missing, runner)(*args)
    assert result.exit_code == EXIT_STORE
    assert f"no tachograph store at {missing}" in result.stderr
    assert "tacho demo" in result.stderr
    assert not missing.exists()  # a read never creates a store


def test_an_unknown_store_scheme_is_a_store_error(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["--store", "mysql://db/x", "runs"])
    assert result.exit_code == EXIT_STORE
    assert "unknown store URL scheme 'mysql'" in result.stderr


def test_the_store_comes_from_tachograph_store(
    store_path: Path, run_id: str, runner: CliRunner
) -> None:
    result = runner.invoke(
        cli, ["runs", "--json"], env={"TACHOGRAPH_STORE": f"sqlite:///{store_path}"}
    )
    assert result.exit_code == EXIT_OK
    assert run_id in result.stdout
    # --store wins over the environment
    other = runner.invoke(
        cli,
        ["--store", str(store_path.parent / "none.db"), "runs"],
        env={"TACHOGRAPH_STORE": f"sqlite:///{store_path}"},
    )
    assert other.exit_code == EXIT_STORE


def test_exit_codes_through_the_real_executable(run_tacho: Run, tmp_path: Path) -> None:
    assert run_tacho("--no-such-option").returncode == EXIT_USAGE
    assert run_tacho("runs").returncode == EXIT_STORE  # no store here yet
    assert run_tacho("demo").returncode == EXIT_OK
    unknown = run_tacho("show", "run_unknown")
    assert unknown.returncode == EXIT_STORE
    assert unknown.stderr.startswith("Error: no run 'run_unknown'")
    exported = tmp_path / "x.jsonl"
    assert run_tacho("export", "--all", "-o", str(exported)).returncode == EXIT_OK
    exported.write_text(exported.read_text().replace("A-4471", "A-4472", 1))
    assert run_tacho("verify", str(exported)).returncode == EXIT_FAILED


def test_colour_on_a_terminal_and_progress_on_stderr(run_tacho: Run) -> None:
    assert run_tacho("demo").returncode == EXIT_OK
    plain = run_tacho("verify", "--all")
    assert "\x1b[" not in plain.stdout
    assert plain.stderr == ""
    coloured = run_tacho("verify", "--all", env={"FORCE_COLOR": "1"})
    assert coloured.returncode == EXIT_OK
    assert "\x1b[32m" in coloured.stdout  # verified runs in green
    assert "verifying" in coloured.stderr  # the progress bar
    assert "15/15" in coloured.stderr
    run_id = run_tacho("runs", "--json").stdout.split('"run_id": "')[1].split('"')[0]
    shown = run_tacho("show", run_id, env={"FORCE_COLOR": "1", "COLUMNS": "160"})
    assert "\x1b[33mtool.requested" in shown.stdout  # tools in yellow
    assert "\x1b[36mmodel.request" in shown.stdout  # models in cyan
    no_colour = run_tacho("show", run_id, env={"FORCE_COLOR": "1", "NO_COLOR": "1"})
    assert "\x1b[33m" not in no_colour.stdout


def test_importing_tachograph_does_not_import_the_cli_stack(
    python: str, child_env: dict[str, str]
) -> None:
    code = (
        "import sys, tachograph; "
        "bad = [m for m in ('click', 'rich', 'tachograph.cli') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run(
        [python, "-c", code], env=child_env, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


# -- plugged command modules --------------------------------------------------------------


@pytest.fixture
def plug_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A real package on sys.path with a good, a broken and no third command module."""
    pkg = tmp_path / "cli_plug_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "good.py").write_text(
        "import click\n\n"
        "def register(group):\n"
        "    @group.command('hello')\n"
        "    def hello():\n"
        "        '''Say hello.'''\n"
        "        click.echo('hello')\n"
    )
    (pkg / "broken.py").write_text("import cli_plug_missing_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m.startswith("cli_plug_pkg")]:
        monkeypatch.delitem(sys.modules, name)
    return "cli_plug_pkg"


def test_load_plugged_registers_present_modules_and_skips_absent_ones(
    plug_package: str, runner: CliRunner
) -> None:
    group = click.Group("t")
    assert load_plugged(group, ("absent", "good"), plug_package) == ["good"]
    assert list(group.commands) == ["hello"]
    assert runner.invoke(group, ["hello"]).stdout == "hello\n"


def test_load_plugged_lets_a_broken_module_fail_loudly(plug_package: str) -> None:
    with pytest.raises(ModuleNotFoundError) as info:
        load_plugged(click.Group("t"), ("broken",), plug_package)
    assert info.value.name == "cli_plug_missing_dependency"


def test_the_plugged_modules_present_in_this_checkout_are_registered() -> None:
    here = Path(app.__file__).parent
    ctx = click.Context(cli)
    for name in app.PLUGGED:
        if (here / f"{name}.py").is_file() or (here / name / "__init__.py").is_file():
            group = click.Group("t")
            assert load_plugged(group, (name,), "tachograph.cli") == [name]
            assert group.commands
            assert set(group.commands) <= set(cli.list_commands(ctx))


def test_the_table_of_commands_is_what_each_module_registers() -> None:
    """``COMMANDS`` (which module to import for a command) against the modules themselves:
    a command missing from it would be absent from ``tacho``, one named under the wrong
    module would not be found."""
    registered: dict[str, str] = {}
    for module in sorted(set(app.COMMANDS.values())):
        group = click.Group("t")
        assert load_plugged(group, (module,), "tachograph.cli") == [module]
        registered.update(dict.fromkeys(group.commands, module))
    assert registered == app.COMMANDS
    assert set(app.PLUGGED) <= set(app.COMMANDS.values())
    ctx = click.Context(cli)
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        assert command is not None
        assert command.name == name


def test_a_command_imports_its_own_module_and_not_the_others() -> None:
    """``tacho verify`` starts without the replay layer and the other commands' modules:
    a new interpreter, as the console script starts one."""
    code = (
        "import sys\n"
        "from tachograph.cli.app import main\n"
        "try:\n"
        "    main(['verify', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('tachograph.'))\n"
        "print('\\n'.join(loaded), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = set(done.stderr.split())
    assert "tachograph.cli.commands_inspect" in loaded
    assert "Usage: " in done.stdout
    for absent in (
        "tachograph.replay.api",
        "tachograph.cli.commands_replay",
        "tachograph.cli.commands_io",
        "tachograph.cli.demo",
        "tachograph.cli.corpus",
        "tachograph.cli.otel",
        "tachograph.cli.migrate",
        "tachograph.cli.doctor",
    ):
        assert absent not in loaded, absent


def test_a_mistyped_command_is_answered_with_the_commands_not_yet_imported() -> None:
    """A new interpreter, in which no command module is imported yet (in this one, earlier
    tests have imported them)."""
    done = subprocess.run(
        [sys.executable, "-c", "from tachograph.cli import main; main(['verif'])"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "No such command 'verif'" in done.stderr
    assert "'verify'" in done.stderr  # its module is imported only when asked for
