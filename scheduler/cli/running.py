"""`scheduler submit`, `resume` and `cancel`: an experiment sent to the fleet,
followed to its report, sent again, or stopped."""

from __future__ import annotations

import importlib
import sys
import threading

import click

from core.errors import WorkersDied
from core.timeline import mark
from scheduler.cli.context import (
    USAGE_ERROR,
    CLIContext,
    err,
    exit_if_cancelled,
    exit_if_infra_errors,
    pass_cli,
    print_warnings,
)
from scheduler.cli.options import (
    allow_missing_keys_option,
    broker_option,
    budget_option,
    format_option,
    json_option,
    nonfinite_option,
    wait_option,
    workers_option,
)


# wide: click passes each of the command's options as a parameter
@click.command()
@click.argument("matrix_file", type=click.Path(dir_okay=False))
@broker_option
@wait_option("With a shared broker: follow until the report is ready.")
@workers_option
@json_option("Print the report JSON on stdout (the same as --format json).")
@format_option()
@click.option(
    "--keep-workspaces",
    is_flag=True,
    help="Keep each run's folder (under EVALFLEET_WORKDIR, default $TMPDIR/evalfleet) to inspect.",
)
@click.option(
    "--artifacts",
    metavar="DIR",
    default=None,
    help="Store each run's evidence as a file in DIR, a folder every worker shares "
    "(overrides the matrix's `artifacts: {dir}`); Redis keeps its path.",
)
@budget_option(
    "Ceiling on the agents' spend over the whole experiment, over the matrix's "
    "budget.agent_usd: runs that do not fit are recorded not_run."
)
@allow_missing_keys_option
@nonfinite_option
@click.option(
    "--preflight",
    "first_preflight",
    is_flag=True,
    help="First run `scheduler preflight` (its table on stderr); send nothing unless sound.",
)
@pass_cli
def submit(
    cli: CLIContext,
    matrix_file: str,
    keep_workspaces: bool,
    artifacts: str | None,
    budget: float | None,
    allow_missing_keys: bool,
    first_preflight: bool,
) -> None:
    """Validate a matrix and run every (tier, scenario, run) of it.

    \b
    Embedded (no broker): starts a private Redis under ./.evalfleet and local
    workers, shows progress, prints the report and stops what it started.
    Shared broker: enqueues, prints the experiment id and returns (--wait follows).

    \b
    Examples:
      scheduler submit examples/matrix.yaml --workers 4
      scheduler submit matrix.yaml --broker redis://:pw@redis:6379/0 --wait --json
      scheduler submit matrix.yaml --artifacts /mnt/shared/evidence
      scheduler submit matrix.yaml --budget 25      # agents spend at most $25 in all
      scheduler submit matrix.yaml --broker URL --allow-missing-keys  # workers hold the keys
      scheduler submit matrix.yaml --preflight      # each tier x scenario tried first
    """
    from scheduler.plan import new_experiment_id
    from scheduler.validation import prepare

    cli.refuse_local_workers()  # before a preflight runs anything
    # Embedded, the private Redis starts while the matrix is read and checked.
    early = None if cli.broker is not None else cli.fleet(create=True)
    if early is not None:
        early.start_aside()
    try:
        checked = prepare(
            matrix_file,
            budget=budget,
            keep_workspaces=keep_workspaces,
            artifacts=artifacts,
            # With --preflight an unset judge key is one of its lines, not a refusal first.
            allow_missing_keys=allow_missing_keys or first_preflight,
        )
        mark("cli: matrix loaded and checked")
        print_warnings(checked.warnings)
        if first_preflight:
            from scheduler.cli.preflight import run_preflight

            if not run_preflight(checked, None, aside=True, judge_key_elsewhere=allow_missing_keys):
                sys.exit(USAGE_ERROR)
    except BaseException:
        if early is not None:
            early.close_unused()  # refused: nothing started, no ./.evalfleet made
        raise
    fleet = cli.fleet(create=True)
    exp_id = cli.experiment = new_experiment_id(checked.matrix)
    fleet.submit(checked, experiment_id=exp_id)
    if checked.matrix.keep_workspaces:
        err.print(
            "each run's folder is kept on its worker (--keep-workspaces): "
            f"`scheduler show {exp_id}:TIER:SCENARIO:INDEX` says where",
            soft_wrap=True,
            markup=False,
        )
    if fleet.shared:
        # Machine-readable output is the report alone on stdout: the id goes aside.
        aside = cli.fmt == "json" or (cli.wait and cli.fmt in ("csv", "html"))
        click.echo(exp_id, err=aside)
        if cli.wait:
            _print_report(cli, exp_id)
        return
    _print_report(cli, exp_id)


@click.command()
@click.argument("experiment")
@broker_option
@workers_option
@wait_option("With a shared broker: follow until done.")
@format_option()
@budget_option(
    "A new ceiling on the agents' spend of the whole experiment (what it spent so far "
    "included); the runs not run for the budget are sent again."
)
@click.option(
    "--retry-errors",
    is_flag=True,
    help="Also run again the runs that ended in an infrastructure error of their agent's "
    "part (an agent that could not start, a failed setup, a provider outage, those "
    "fail-fast stopped), once their cause is mended; their tiers' fail-fast counts start "
    "again. A run whose judge alone failed is left to `scheduler rejudge`, which starts "
    "no agent.",
)
@nonfinite_option
@pass_cli
def resume(cli: CLIContext, experiment: str, budget: float | None, retry_errors: bool) -> None:
    """Re-send the runs that have no result and are neither running nor queued (and,
    of a cancelled experiment, those cancelled before they started; with --budget,
    those the budget kept from starting; with --retry-errors, the infrastructure
    errors), then aggregate. Says, as validate does, what the experiment can detect,
    at the intra-scenario correlation of its runs so far.

    \b
    Examples:
      scheduler resume notes-guidance-20261122-101500-ab12
      scheduler resume EXP --broker redis://host:6379/0 --wait
      scheduler resume EXP --budget 40     # raise the budget: the not-run runs run
      scheduler resume EXP --retry-errors  # the agent's binary installed: run them
    """
    fleet = cli.fleet()
    cli.experiment = experiment
    resumed = fleet.resume(experiment, budget=budget, retry_errors=retry_errors) is not None
    if resumed and (cli.wait or not fleet.shared):
        _print_report(cli, experiment)


@click.command()
@click.argument("experiment")
@broker_option
@pass_cli
def cancel(cli: CLIContext, experiment: str) -> None:
    """Cancel an experiment: runs not yet started are recorded as cancelled. Embedded
    (an interrupted submit's experiment), local workers record them here and the
    report is printed.

    Example: scheduler cancel notes-guidance-20261122-101500-ab12
    """
    from core.results.report import ExperimentStatus

    cli.again = f"`scheduler cancel {experiment}` again records the rest"
    exp_id, before, sent = cli.fleet().cancel(experiment)
    if sent is not None:
        click.echo(f"cancelled {exp_id}; recording its runs not yet run as cancelled", err=True)
        cli.experiment = exp_id
        cli.again = f"`scheduler cancel {exp_id}` again records the rest"
        _print_report(cli, exp_id, cancelling=True)
    elif before in (ExperimentStatus.complete, ExperimentStatus.cancelled):
        click.echo(f"{exp_id} is already {before.value}; nothing changed")
    else:
        click.echo(
            f"cancelled {exp_id}; running runs finish, the rest are recorded as cancelled by "
            "the workers that take them"
        )
        from scheduler.cli.reading import say_unserved

        say_unserved(cli, cli.fleet().status(exp_id).idle_queues)


def _print_report(cli: CLIContext, exp_id: str, cancelling: bool = False) -> None:
    """Follow the experiment to its report and print it (exit 4 when it was cancelled,
    unless `cancelling` it; 3 on infrastructure errors). Should the local workers or
    their broker go first, it says what to do: the command's `again`, else resume."""
    # What printing the report imports is imported while the runs run, on a core this
    # process would leave idle: a one-run experiment's report is there in ~0.1 s.
    threading.Thread(target=_import_printing, name="evalfleet-import", daemon=True).start()
    fleet = cli.fleet()
    try:
        report = fleet.wait(exp_id)
    except WorkersDied as exc:
        again = cli.again or f"the experiment can continue with `scheduler resume {exp_id}`"
        raise WorkersDied(f"{exc}; {again}") from None
    from scheduler.report.render import render

    mark("cli: report ready")
    evidence = None
    if cli.reads_runs:
        report = report.model_copy(update={"runs": list(fleet.runs(exp_id))})
    if cli.fmt == "html":  # every run with its evidence
        evidence = fleet.evidence_blobs(exp_id)
    rendered = render(
        report,
        cli.fmt,
        nonfinite=cli.nonfinite,
        evidence=evidence,
        full=cli.full,
        complete=cli.hinted,
    )
    cli.print_report(rendered, report, notice=False)
    mark("cli: report printed")
    if report.budget is not None and report.budget.reached:
        err.print(
            cli.hinted(
                f"{report.budget.notice}; `scheduler resume {exp_id} --budget USD` runs them"
            ),
            soft_wrap=True,
            markup=False,
        )
    if not cancelling:  # `cancel` prints the report of the cancellation it asked for
        exit_if_cancelled(report)
    exit_if_infra_errors(report)


def _import_printing() -> None:
    for module in ("scheduler.experiments", "scheduler.report.render"):
        importlib.import_module(module)
