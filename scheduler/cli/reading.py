"""`scheduler list`, `status` and `compare`: the experiments, one's progress, two
side by side."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import click

from core.stats.choices import DEFAULT_CORRECTION
from core.wording import plural
from scheduler.cli.context import CLIContext, echo_rendered, err, pass_cli, size
from scheduler.cli.options import broker_option, correction_option, format_option, nonfinite_option
from scheduler.report.formats import COMPARE_FORMATS

if TYPE_CHECKING:
    from core.results.report import ExperimentInfo
    from scheduler.report.formatting import Table


def experiments_table(
    infos: list[ExperimentInfo],
    more_columns: Sequence[str] = (),
    more: Mapping[str, list[str]] | None = None,
) -> Table:
    """Experiments one a row under headers; `more` gives each experiment's cells of
    `more_columns`, by its id."""
    from scheduler.report.formatting import Table

    with_budget = any(i.not_run for i in infos)
    columns = ["experiment", "status", "runs ran", "passed", "infra errors", "cancelled"]
    columns += ["not run (budget)"] * with_budget + ["created", *more_columns]
    rows = []
    for i in infos:
        ran = i.completed_runs - i.cancelled - i.not_run
        rows.append(
            [
                i.id,
                i.status.value,
                f"{ran}/{i.total_runs}",
                str(i.passes),
                str(i.errors),
                str(i.cancelled),
                *[str(i.not_run)] * with_budget,
                time.strftime("%Y-%m-%d %H:%M", time.localtime(i.created_at)),
                *(more or {}).get(i.id, []),
            ]
        )
    return Table("", columns, rows, label_columns=2)


@click.command("list")
@broker_option
@click.option("--json", "as_json", is_flag=True, help="One JSON array of experiment records.")
@pass_cli
def list_(cli: CLIContext, as_json: bool) -> None:
    """List experiments, oldest first, with what each takes in Redis (MEMORY USAGE of
    its keys, summed; `stored_bytes` in JSON).

    Example: scheduler list --json
    """
    from scheduler.report.render import render_tables

    listed = cli.fleet().experiments()
    if as_json:
        records = [
            {
                **e.info.model_dump(mode="json"),
                "report_versions": e.report_versions,
                "stored_bytes": e.stored_bytes,
            }
            for e in listed
        ]
        click.echo(json.dumps(records, indent=2))
        return
    if not listed:
        click.echo("no experiments yet")
        return
    # Report versions: 1 is the runs' own, each rejudge or rescore adds one.
    more = {
        e.info.id: [
            _versions(e.report_versions),
            size(e.stored_bytes),
        ]
        for e in listed
    }
    table = experiments_table([e.info for e in listed], ["report versions", "stored"], more)
    click.echo(render_tables([table]), nl=False)


def _versions(versions: list[int]) -> str:
    if len(versions) > 1:
        return f"1-{versions[-1]}"
    return "1" if versions else "-"


@click.command()
@click.argument("experiment", required=False)
@broker_option
@click.option("--json", "as_json", is_flag=True)
@pass_cli
def status(cli: CLIContext, experiment: str | None, as_json: bool) -> None:
    """Progress of an experiment (default: the latest).

    Example: scheduler status notes-guidance-20261122-101500-ab12
    """
    from scheduler.report.render import render_tables

    found = cli.fleet().status(experiment)
    if as_json:
        click.echo(found.info.model_dump_json(indent=2))
    else:
        click.echo(render_tables([experiments_table([found.info])]), nl=False)
    if found.unasked is not None:
        err.print(
            f"which queues have workers is not known: asking them failed ({found.unasked})",
            markup=False,
            soft_wrap=True,
        )
    late = found.unrenewed
    if late is not None and late.runs:
        err.print(
            f"{plural(late.runs, 'run')} in progress not heard from for up to "
            f"{late.ago_s:.0f} s (a worker renews each lease every third of `lease_s`): a worker "
            f"killed or frozen? Such runs are sent again once their leases lapse, within "
            f"{late.lapse_in_s:.0f} s",
            markup=False,
            soft_wrap=True,
        )
    if late is not None and late.lapsed:
        exp_id = found.info.id
        err.print(
            cli.hinted(
                f"{plural(late.lapsed, 'run')} lost, "
                f"{'its lease' if late.lapsed == 1 else 'their leases'} lapsed without a "
                f"result: sent again at the next sweep, a worker's (every EVALFLEET_SWEEP_S "
                f"seconds) or a follower's, or by `scheduler resume {exp_id}`"
            ),
            markup=False,
            soft_wrap=True,
        )
    say_unserved(cli, found.idle_queues)


def say_unserved(cli: CLIContext, idle: list[str]) -> None:
    """The queues of an experiment that no worker takes, and how to start one."""
    if idle:
        from fleet.sending import no_worker_takes

        err.print(cli.hinted(no_worker_takes(idle)), markup=False, soft_wrap=True)


@click.command()
@click.argument("experiment_a")
@click.argument("experiment_b")
@broker_option
@click.option(
    "--alpha",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=0.05,
    show_default=True,
    help="Significance level of the family of tests.",
)
@correction_option(DEFAULT_CORRECTION)
@click.option(
    "--fail-on-regression",
    is_flag=True,
    help="Exit 1 when a tier of B is significantly worse than in A after the correction "
    "(a CI gate).",
)
@format_option(COMPARE_FORMATS)
@nonfinite_option
@pass_cli
def compare(
    cli: CLIContext,
    experiment_a: str,
    experiment_b: str,
    alpha: float,
    correction: str,
    fail_on_regression: bool,
) -> None:
    """Compare experiment B against A, per tier and per tier x scenario. Either may
    be a report JSON file with its runs (`report EXP --format json --runs > FILE`),
    say a baseline kept as a CI artifact.

    Deltas of pass rate and median composite score with their effect sizes,
    Fisher's exact test on passes and Mann-Whitney U on composite scores
    (two-sided), all of them corrected together (--correction, Holm by
    default) at --alpha. A tier with two or more scenarios in both is also
    compared scenario by scenario, on these scenarios (CMH, van Elteren:
    its verdict) and on scenarios like these (paired per-scenario
    differences), a family of its own. A tier regressed when the tests
    that judge it find it significantly worse after the correction.

    \b
    Examples:
      scheduler compare EXP_BASELINE EXP_CANDIDATE --format markdown
      scheduler compare EXP_A EXP_B --fail-on-regression --alpha 0.01   # CI gate
      scheduler compare baseline.json EXP_B --fail-on-regression      # a kept baseline
      scheduler compare EXP_A EXP_B --format github >> "$GITHUB_STEP_SUMMARY"
    """
    from scheduler.report.render import render_comparison

    result = cli.fleet().compare(experiment_a, experiment_b, alpha=alpha, correction=correction)
    echo_rendered(render_comparison(result, cli.fmt, nonfinite=cli.nonfinite))
    if result.regressions:
        err.print(f"significantly worse in {experiment_b}: {', '.join(result.regressions)}")
        if fail_on_regression:
            sys.exit(1)
