"""What every command shares: one CLIContext, where the shared options (their own
module) keep their values; the Fleet, opened on first use and closed when the
command ends; the stderr console; the printing of reports; and the one mapping of
evalfleet's errors to exit codes.

Exit codes: 1 an operational failure (broker unreachable, workers died) or, for
`compare --fail-on-regression`, a regression; 2 bad input, nothing started;
3 the experiment ran but some runs were infrastructure errors; 4 the experiment a
submit or resume followed was cancelled (by `scheduler cancel`) before all its runs
ran; 130 interrupted.
"""

from __future__ import annotations

import contextlib
import importlib
import signal
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

import click

from core.broker_url import ENV_BROKER
from core.errors import ConfigError, EvalfleetError, FleetError, InputError
from scheduler.cli.hints import with_broker
from scheduler.interrupt import interrupted, raise_if_lost

# What only running a command needs is imported where it is used: `--help` of every
# command, and the commands that only print, import this module and the command's own,
# and not Celery, the matrix's models or rich (tests/unit/scheduler/cli/test_light.py).
if TYPE_CHECKING:
    from rich.console import Console

    from core.matrix import ConfigProblem
    from core.results.report import ExperimentReport
    from scheduler.fleet import Fleet


class _Stderr:
    """rich's Console on stderr, made when first printed to."""

    def __init__(self) -> None:
        self._console: Console | None = None

    @property
    def console(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=True, highlight=False, emoji=False)
        return self._console

    def print(self, *objects: Any, **options: Any) -> None:
        # Unwrapped unless asked: rich breaks lines at 80 columns where stderr is not a
        # terminal, in the middle of a command or an experiment id to copy.
        options.setdefault("soft_wrap", True)
        self.console.print(*objects, **options)


err = _Stderr()
USAGE_ERROR = 2
INFRA_ERRORS = 3
CANCELLED = 4
INTERRUPTED = 130


class CLIContext:
    """The options shared by many commands, as their options set them, and the Fleet
    they talk to: opened on first use, closed (with what it started) at the end of
    the command."""

    def __init__(self) -> None:
        # The broker's URL, its password put in (--broker-password-file), once read.
        self.broker: str | None = None
        self.broker_password_file: str | None = None
        # The words that name the broker given on the command line, for the commands
        # the CLI suggests (scheduler.cli.hints); empty for any other broker.
        self.broker_words = ""
        self.workers: int | None = None
        self.wait = False
        self.fmt = "table"
        self.full = False
        self.as_json = False  # --json: --format json (scheduler.cli.options)
        # The experiment a submit or resume is sending: what an interrupt's hint names.
        self.experiment: str | None = None
        # What to run should the broker go away mid-command (default: the command again).
        self.again: str | None = None
        self.nonfinite = "string"
        self.cleanup = contextlib.ExitStack()
        self._fleet: Fleet | None = None

    def fleet(self, *, create: bool = False) -> Fleet:
        """The Fleet on --broker (else the embedded Redis, with --workers local workers;
        `create`: even where none was ever started)."""
        if self._fleet is None:
            from scheduler.fleet import Fleet

            raise_if_lost()  # before anything is started or sent
            self.refuse_local_workers()
            fleet = (
                Fleet.connect(self.broker, console=err.console, hinted=self.hinted)
                if self.broker is not None
                else Fleet.embedded(
                    create=create, workers=self.workers, console=err.console, hinted=self.hinted
                )
            )
            self._fleet = self.cleanup.enter_context(fleet)
        return self._fleet

    def refuse_local_workers(self) -> None:
        """--workers on a shared broker, where it would start nothing: a usage error."""
        if self.broker is None or self.workers is None:
            return
        given = bool(self.broker_words)
        where = "--broker" if given else ENV_BROKER
        embedded = "leave out --broker" if given else f"unset {ENV_BROKER}"
        raise click.UsageError(
            self.hinted(
                f"--workers starts local workers, which only the embedded mode has; with a "
                f"shared broker (named by {where}), the runs go to the workers that serve "
                f"it. Start more with `scheduler worker --concurrency {self.workers}` on a "
                f"machine that reaches the broker, or leave out --workers; to run on the "
                f"embedded Redis with local workers, {embedded}."
            )
        )

    def hinted(self, text: str) -> str:
        """`text` with each command it suggests complete for this command's broker."""
        return with_broker(text, self.broker_words)

    def interrupted(self) -> str:
        """What to say on Ctrl-C (or TERM, HUP): how to go on with what was sent, each
        command with the broker given. An embedded experiment is paused first
        (scheduler.running.interrupt)."""
        return self.hinted(self._interrupted())

    def _interrupted(self) -> str:
        exp_id = self.experiment
        if exp_id is None:
            return "interrupted"
        fleet = self._fleet
        if fleet is None or not fleet.has_experiment(exp_id):
            return f"interrupted before {exp_id} was sent; nothing runs"
        if fleet.shared:
            return (
                f"stopped following; the fleet goes on running it: `scheduler report "
                f"{exp_id} --wait` follows it to its report, `scheduler cancel {exp_id}` "
                "stops it"
            )
        if not fleet.interrupt(exp_id):
            return (
                f"interrupted; its runs not yet run stay queued: `scheduler resume {exp_id}` "
                f"finishes it, `scheduler cancel {exp_id}` records them cancelled (the next "
                "submit here would run them first)"
            )
        return (
            # "interrupted", as `scheduler list` and `status` then show it.
            f"interrupted; {exp_id} waits, its runs not yet run left alone by later submits "
            f"here: `scheduler resume {exp_id}` finishes it, `scheduler cancel {exp_id}` "
            "records them cancelled and prints its report"
        )

    @property
    def reads_runs(self) -> bool:
        """Whether the report is printed with its runs: html's run table, the failure
        reasons the table format (one screen or --full) and markdown lead with."""
        return self.fmt in ("table", "markdown", "html")

    def print_report(self, rendered: str, report: ExperimentReport, notice: bool = True) -> None:
        """A rendered report on stdout, ending in one newline. CSV is rows only: what a
        reader must see first (the budget's notice) goes to stderr, unless the caller
        says it (`notice`)."""
        if self.fmt == "csv" and notice:
            from scheduler.report.sections import banner

            for line in banner(report):
                err.print(self.hinted(line), markup=False, soft_wrap=True)
        echo_rendered(rendered)


def echo_rendered(rendered: str) -> None:
    """A rendered report, comparison or run (JSON) on stdout, ending in one newline; to
    a terminal inert (an agent's text quoted in markdown or CSV could move the cursor or
    set the title, or turn a file name around), to a file or a pipe as rendered."""
    if sys.stdout.isatty():
        from core.evidence.text import visible

        rendered = visible(rendered)
    click.echo(rendered, nl=not rendered.endswith("\n"))


pass_cli = click.make_pass_decorator(CLIContext, ensure=True)


class Command(NamedTuple):
    """A command not imported yet: where it is ("module:attribute" in scheduler.cli)
    and its short help."""

    target: str
    summary: str


class Commands(click.Group):
    """The `scheduler` group: each command runs with a CLIContext, and an
    EvalfleetError it raises ends it here, as one clear message and its exit code.

    `lazy_commands` names the commands imported when looked up; the group's help lists
    them from their summaries, importing none."""

    def __init__(self, *args: Any, lazy_commands: dict[str, Command] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.lazy_commands = lazy_commands or {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy_commands:
            module, attribute = self.lazy_commands[cmd_name].target.split(":")
            command = getattr(importlib.import_module(f"scheduler.cli.{module}"), attribute)
            command.short_help = self.lazy_commands[cmd_name].summary
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        with formatter.section("Commands"):
            formatter.write_dl([(name, self._summary(name)) for name in names])

    def _summary(self, name: str) -> str:
        lazy = self.lazy_commands.get(name)
        if lazy is not None:
            return lazy.summary
        return self.commands[name].get_short_help_str(limit=200)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0]
        if self.get_command(ctx, name) is None and not name.startswith("-"):
            from core.matrix import did_you_mean

            hint = did_you_mean(name, self.list_commands(ctx))
            ctx.fail(f"No such command {name!r}" + (f"; {hint}" if hint else "."))
        return super().resolve_command(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        cli = ctx.ensure_object(CLIContext)
        ctx.call_on_close(lambda: _unstoppable(cli.cleanup.close))
        try:
            return super().invoke(ctx)
        except EvalfleetError as exc:
            ctx.exit(_said(exc, cli))
        except BaseException as exc:  # Ctrl-C, TERM or HUP (scheduler.cli.run), at any moment
            if _broker_down(exc):
                ctx.exit(_said(FleetError(_broker_lost(exc, cli)), cli))
            if not interrupted(exc):
                raise
            _unstoppable(lambda: err.print(f"\n{cli.interrupted()}", soft_wrap=True))
            ctx.exit(INTERRUPTED)


def _broker_down(exc: BaseException) -> bool:
    """Whether `exc` is the broker gone away (fleet.app.BROKER_DOWN), met after the
    command had reached it: only a command that imported redis can meet it."""
    if "redis" not in sys.modules:
        return False
    from fleet.app import BROKER_DOWN

    return isinstance(exc, BROKER_DOWN)


def _broker_lost(exc: BaseException, cli: CLIContext) -> str:
    """The broker went away mid-command: why, in one line, and what to run then."""
    from scheduler.follow import broker_unavailable

    gone = cli._fleet.broker_gone() if cli._fleet is not None else None
    why = gone or broker_unavailable(exc)
    return f"{why}; {cli.again or 'run the command again once it answers'}"


def _unstoppable(step: Callable[[], object]) -> None:
    """`step` with Ctrl-C, TERM and HUP ignored: a second one must not cut short the
    stopping of what the command started (the embedded Redis and workers run in
    sessions of their own: nothing else stops them), nor the interrupt's hint."""
    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    before = [signal.signal(s, signal.SIG_IGN) for s in signals]
    try:
        step()
    finally:
        for signum, handler in zip(signals, before, strict=True):
            signal.signal(signum, handler)


def _said(exc: EvalfleetError, cli: CLIContext) -> int:
    """Print `exc` for a person, the commands it suggests complete for the broker given;
    its exit code: 2 for bad input, else 1 (FleetError, the broker's or the workers'
    failure)."""
    if isinstance(exc, ConfigError):
        print_problems(exc)
        # Where a key or its type is at fault; not for a file that is missing or not YAML,
        # nor a value its own check refused.
        keyed = any(getattr(problem, "schema_error", False) for problem in exc.problems)
        schema = " `scheduler schema` prints every accepted key." if keyed else ""
        # A matrix that does not read yet has had none of the checks of what it says.
        more = (
            " Once it reads, its commands, files and API keys are checked too."
            if exc.unread
            else ""
        )
        err.print(f"{len(exc.problems)} problem(s); nothing was started.{schema}{more}")
        return USAGE_ERROR
    fail_line(cli.hinted(str(exc)))
    return USAGE_ERROR if isinstance(exc, InputError) else 1


def print_problems(exc: ConfigError) -> None:
    for problem in exc.problems:
        fail_line(str(problem))


def fail_line(message: str) -> None:
    err.print(f"[red]error:[/red] {message}", soft_wrap=True)


def exit_if_cancelled(report: ExperimentReport) -> None:
    """Exit 4 when the experiment was cancelled: a CI job that followed it must not pass
    on runs that never ran."""
    info = report.experiment
    if info.status == "cancelled":
        from core.wording import plural

        err.print(
            f"experiment {info.id} was cancelled: {plural(info.cancelled, 'run')} of "
            f"{info.total_runs} did not run; `scheduler resume {info.id}` runs them",
            soft_wrap=True,
            markup=False,
        )
        sys.exit(CANCELLED)


def exit_if_infra_errors(report: ExperimentReport) -> None:
    """Exit 3, naming the most common infrastructure error, when some runs had one, and
    what runs each kind again: a judge that failed is asked again by rejudge, which starts
    no agent; only runs whose agent part failed need resume --retry-errors."""
    errors = report.experiment.errors
    if errors:
        from core.evidence.text import visible
        from core.results.run import REDONE_FAILED
        from core.wording import plural

        exp_id = report.experiment.id
        reason, count = next(iter(report.error_reasons.items()))
        judged = report.judge_errors
        # A rejudge's or rescore's own failure: made again by the same command, where a
        # resume would start a version 1 anew and leave this version behind.
        again = sum(n for r, n in report.error_reasons.items() if r.startswith(REDONE_FAILED))
        redo = "rescore" if (report.version_note or "").startswith("rescored") else "rejudge"
        kinds = [
            (
                errors - judged - again,
                "whose agent could not be run",
                f"`scheduler resume {exp_id} --retry-errors` runs {{them}} again (with the "
                "files as submitted: a fix in the matrix folder needs a new submit)",
            ),
            (
                judged,
                "whose judge failed",
                f"`scheduler rejudge {exp_id}` judges {{them}} again from what the judge was "
                "shown, without starting any agent",
            ),
            (again, f"whose {redo} failed", f"`scheduler {redo} {exp_id}` {redo}s {{them}}"),
        ]
        kinds = [
            (n, whose, how.format(them="it" if n == 1 else "them")) for n, whose, how in kinds if n
        ]
        if len(kinds) == 1 and judged:
            ran = "its agent and gates" if judged == 1 else "their agents and gates"
            what = f"{ran} ran but the judge failed: once it answers, {kinds[0][2]}"
        elif len(kinds) == 1:
            what = f"once the cause is mended, {kinds[0][2]}"
        else:
            what = "once the cause is mended, " + "; then ".join(
                f"{'first ' if i == 0 else ''}for the {plural(n, 'run')} {whose}, {how}"
                for i, (n, whose, how) in enumerate(kinds)
            )
        err.print(
            f"{errors} of {plural(report.experiment.total_runs, 'run')} "
            + ("was an infrastructure error" if errors == 1 else "were infrastructure errors")
            + f", kept out of the statistics; most common ({count}): {visible(reason)}\n{what}",
            soft_wrap=True,
            markup=False,
        )
        sys.exit(INFRA_ERRORS)


def size(value: float) -> str:
    for unit in ("B", "KB", "MB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"


def print_warnings(warnings: Iterable[ConfigProblem]) -> None:
    """What may be a mistake in the matrix, one line each on stderr."""
    from rich.markup import escape

    for warning in warnings:
        err.print(f"[yellow]warning:[/yellow] {escape(str(warning))}", soft_wrap=True)
