"""`scheduler`: validate, submit, follow and report evalfleet experiments.

With --broker URL (or EVALFLEET_BROKER_URL) every command talks to that shared
Redis; without, to the embedded Redis of ./.evalfleet, started on demand.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn, cast
from urllib.parse import urlsplit

import click
import redis
from rich.console import Console

from core.analysis.comparison import ALPHA, CORRECTION, compare_experiments, correct_report
from core.broker_url import BrokerURLError, configured_broker
from core.evidence.models import RunRecord
from core.files.bundle import Bundle, BundleError, collect
from core.matrix import Artifacts, Budget, Matrix, load_matrix, matrix_json_schema
from core.matrix.yaml_model import ConfigError
from core.metrics.pricing import price_for
from core.results.report import ExperimentInfo, ExperimentReport, ExperimentStatus
from core.results.run import RunSpec, RunStatus
from core.settings import SettingError
from core.stats.significance import CORRECTIONS, Correction
from core.store.retention import (
    Deleted,
    created_before,
    delete_experiment,
    experiment_keys,
    stored_bytes,
)
from core.store.store import ExperimentNotFound, Store
from scheduler.embedded import EmbeddedError, EmbeddedRedis, LocalWorkers, worker_command
from scheduler.plan import PlanTooLarge, check_size, describe_runs, new_experiment_id
from scheduler.report.render import (
    COMPARE_FORMATS,
    FORMATS,
    NONFINITE,
    SCENARIO_FORMATS,
    render,
    render_comparison,
    terminal_width,
)
from scheduler.report.sections import banner
from scheduler.show import render_run
from worker.broker import STATE_DIR, running_embedded_broker
from worker.sending import DEFAULT_QUEUE, configured_visibility_timeout_s, longest_run_s, run_queues

if TYPE_CHECKING:
    from celery import Celery

err = Console(stderr=True, highlight=False)
# Exit codes: 1 an operational failure (broker unreachable, workers died) or, for
# `compare --fail-on-regression`, a regression; 2 bad input, nothing started;
# 3 the experiment ran but some runs were infrastructure errors; 130 interrupted.
USAGE_ERROR = 2
INFRA_ERRORS = 3


def correction_option(default: str | None, default_help: str = "") -> Callable[[Any], Any]:
    return click.option(
        "--correction",
        type=click.Choice(CORRECTIONS),
        default=default,
        show_default=default is not None,
        help=" ".join(
            [
                "Multiple-comparison correction of every test: holm (family-wise error rate),",
                "bh (Benjamini-Hochberg, false discovery rate) or none.",
                *([default_help] if default_help else []),
            ]
        ),
    )


def fail(message: str, code: int = USAGE_ERROR) -> NoReturn:
    err.print(f"[red]error:[/red] {message}", soft_wrap=True)
    sys.exit(code)


def _checked_broker(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    # Every command takes the broker here, from --broker or the environment.
    try:
        configured_broker(value)
    except BrokerURLError as exc:
        fail(str(exc))
    return value


broker_option = click.option(
    "--broker",
    envvar="EVALFLEET_BROKER_URL",
    default=None,
    metavar="URL",
    callback=_checked_broker,
    help="Shared Redis broker (redis:// or rediss://). Default: EVALFLEET_BROKER_URL, "
    "else the embedded Redis under ./.evalfleet (`scheduler worker` joins it only while "
    "it runs).",
)


def budget_option(help_text: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    return click.option(
        "--budget",
        type=click.FloatRange(min=0, min_open=True),
        default=None,
        metavar="USD",
        help=help_text,
    )


workers_option = click.option(
    "--workers",
    type=click.IntRange(1, 512),
    default=None,
    help="Embedded mode: local worker processes (default: the CPU count).",
)
json_nonfinite_option = click.option(
    "--json-nonfinite",
    "nonfinite",
    type=click.Choice(NONFINITE),
    default="string",
    show_default=True,
    help='JSON: write Infinity and NaN as the strings "Infinity"/"NaN", or as null '
    "(for jq, pandas and other readers of strict JSON numbers).",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
def main() -> None:
    """Run AI-agent evaluation experiments over a Celery worker fleet.

    \b
    Examples:
      scheduler validate examples/matrix.yaml
      scheduler submit examples/matrix.yaml             # embedded: no servers needed
      scheduler submit matrix.yaml --broker redis://host:6379/0 --wait
      scheduler report EXP --format markdown
    """


def _load(path: str) -> Matrix:
    try:
        return load_matrix(path)
    except ConfigError as exc:
        for problem in exc.problems:
            err.print(f"[red]error:[/red] {problem}", soft_wrap=True)
        err.print(
            f"{len(exc.problems)} problem(s); nothing was started. "
            "`scheduler schema` prints every accepted key."
        )
        sys.exit(USAGE_ERROR)


@main.command()
@click.argument("matrix_file", type=click.Path(dir_okay=False))
def validate(matrix_file: str) -> None:
    """Check a matrix file and summarize the plan (exit 2 on any problem).

    Example: scheduler validate examples/matrix.yaml
    """
    matrix = _load(matrix_file)
    _check_size(matrix)
    _check_visibility(matrix)
    bundle = _bundle(matrix)
    click.echo(summary(matrix))
    click.echo(
        f"files shipped to workers: {len(bundle.manifest.digests())} distinct files, "
        f"{_size(bundle.size)} (bundle.max_mb: {matrix.bundle.max_mb:g})"
    )
    for cli, tiers in _missing_clis(matrix).items():
        click.echo(
            f"warning: agent CLI {cli!r} (tiers {', '.join(tiers)}) is not on this machine's "
            "PATH; the workers that run them need it",
            err=True,
        )


def _missing_clis(matrix: Matrix) -> dict[str, list[str]]:
    """The presets' CLIs that are not on PATH here, with the tiers that use them."""
    missing: dict[str, list[str]] = {}
    for tier in matrix.tiers:
        cli = matrix.agent_for(tier).cli
        if cli is not None and shutil.which(cli) is None:
            missing.setdefault(cli, []).append(tier.id)
    return missing


def summary(matrix: Matrix) -> str:
    lines = [
        f"{matrix.name}: {len(matrix.tiers)} tiers x {len(matrix.scenarios)} scenarios x "
        f"{describe_runs(matrix)} = {matrix.total_runs()} runs"
        + (" at most" if matrix.adaptive is not None else ""),
        f"baseline: {matrix.baseline_tier}",
    ]
    for tier in matrix.tiers:
        agent = matrix.agent_for(tier)
        target = agent.command if agent.kind == "command" else f"openai loop @ {agent.base_url}"
        extra = f", files: {', '.join(tier.files)}" if tier.files else ""
        lines.append(
            f"  tier {tier.id}: {agent.kind} ({target}), model {agent.model or '-'}, "
            f"timeout {agent.timeout_s:g} s{extra}"
        )
    for scenario in matrix.scenarios:
        gates = ", ".join(g.name or g.type for g in scenario.evaluation.gates) or "none"
        judge = scenario.evaluation.judge
        judged = f"judge >= {judge.pass_threshold:g}" if judge and judge.enabled else "no judge"
        lines.append(f"  scenario {scenario.id}: gates [{gates}], {judged}")
    lines.append(_judge_line(matrix))
    if matrix.budget is not None:
        lines.append(_budget_line(matrix, matrix.budget))
    return "\n".join(lines)


def _budget_line(matrix: Matrix, budget: Budget) -> str:
    ceilings = [
        f"{who} ${limit:g}"
        for who, limit in (("agents", budget.agent_usd), ("judge", budget.judge_usd))
        if limit is not None
    ]
    line = f"budget: {', '.join(ceilings)}"
    if budget.prior_usd is not None:
        line += f"; a run's cost before its tier x scenario has one: ${budget.prior_usd:g}"
    judge = matrix.judge
    judged = any(s.evaluation.judge_enabled for s in matrix.scenarios)
    unpriced = judge is not None and price_for(judge.model, matrix.pricing) is None
    if budget.judge_usd is not None and judged and judge is not None and unpriced:
        line += (
            f"\nwarning: the judge model {judge.model!r} has no price, so its spend is "
            "unknown and judge_usd cannot count it: give it one under `pricing:`"
        )
    return line


def _judge_line(matrix: Matrix) -> str:
    """Which judge the runs will get, and why, said once."""
    judged = [s.id for s in matrix.scenarios if s.evaluation.judge_enabled]
    judge = matrix.judge
    if judged and judge is not None:
        repeats = f", {judge.repeats} judgments per run" if judge.repeats > 1 else ""
        key = judge.api_key_env
        unset = (
            f"; {key} is not set here (the workers need it to judge: without it every judged "
            "run is an infrastructure error)"
            if key and not os.environ.get(key)
            else ""
        )
        return (
            f"judge: {judge.protocol} {judge.model} @ {judge.base_url}, "
            f"for {len(judged)} of {len(matrix.scenarios)} scenarios{repeats}{unset}"
        )
    asked = [s.id for s in matrix.scenarios if s.evaluation.judge is not None]
    if not asked:
        return "judge: none (no scenario asks for one)"
    if judge is None:
        return (
            "judge: off: scenarios ask for one with `enabled: auto` but the matrix has no "
            "top-level `judge:` section"
        )
    key = judge.api_key_env
    if key and not os.environ.get(key):
        return (
            f"judge: off: {key} is not set, so scenarios with `judge: {{enabled: auto}}` "
            "run without one (set it to judge them)"
        )
    return "judge: off: every scenario's judge is disabled"


@main.command()
def schema() -> None:
    """Print the JSON Schema of matrix.yaml (for editor completion).

    Example: scheduler schema > matrix.schema.json
    """
    click.echo(json.dumps(matrix_json_schema(), indent=2))


# --- the store: shared broker or embedded -----------------------------------------------


@contextlib.contextmanager
def open_store(broker: str | None, *, create: bool = False) -> Iterator[tuple[Store, str]]:
    """The store on the configured broker, else the embedded one (started for the block)."""
    url = configured_broker(broker)
    if url is not None:
        store = Store.from_url(url)
        _ping(store, url)
        yield store, url
        return
    if not create and not STATE_DIR.is_dir():
        fail(
            "no broker given and no embedded store in this folder (./.evalfleet); "
            "pass --broker URL or run `scheduler submit` here first"
        )
    try:
        with EmbeddedRedis() as embedded:
            yield Store.from_url(embedded.url), embedded.url
    except EmbeddedError as exc:
        fail(str(exc), 1)


def _ping(store: Store, url: str) -> None:
    try:
        store.redis.ping()
    except redis.RedisError as exc:
        fail(f"cannot reach the broker at {_safe(url)}: {exc}", 1)


def _safe(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    if parts.password:
        return url.replace(f":{parts.password}@", ":***@")
    return url


def _app(url: str) -> Celery:
    """The Celery app on `url`, for the commands that talk to workers. Imported here, not
    at the top: Celery and the tasks take a third of a second that `scheduler --help`
    and `validate` should not pay."""
    from worker.celery_app import create_app

    return create_app(url)


def _experiment(store: Store, exp_id: str | None) -> str:
    if exp_id is None:
        latest = store.latest()
        if latest is None:
            fail("no experiments yet; start one with `scheduler submit matrix.yaml`")
        return latest
    if not store.exists(exp_id):
        fail(str(ExperimentNotFound(exp_id)))
    return exp_id


# --- submit, follow ------------------------------------------------------------------------


@main.command()
@click.argument("matrix_file", type=click.Path(dir_okay=False))
@broker_option
@click.option(
    "--wait", is_flag=True, help="With a shared broker: follow until the report is ready."
)
@workers_option
@click.option("--json", "as_json", is_flag=True, help="Print the report JSON on stdout.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
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
@json_nonfinite_option
def submit(
    matrix_file: str,
    broker: str | None,
    wait: bool,
    workers: int | None,
    as_json: bool,
    fmt: str,
    keep_workspaces: bool,
    artifacts: str | None,
    budget: float | None,
    nonfinite: str,
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
    """
    matrix = _load(matrix_file)
    if budget is not None:
        matrix.budget = (matrix.budget or Budget(agent_usd=budget)).model_copy(
            update={"agent_usd": budget}
        )
    _check_size(matrix)
    _check_visibility(matrix)
    if keep_workspaces:
        matrix.keep_workspaces = True
    if artifacts is not None:
        matrix.artifacts = Artifacts(dir=os.path.abspath(artifacts))
    _check_artifacts(matrix, "--artifacts" if artifacts is not None else matrix_file)
    bundle = _bundle(matrix)  # after --artifacts: that folder is output, not shipped
    if as_json:
        fmt = "json"

    with open_store(broker, create=True) as (store, url):
        exp_id = new_experiment_id(matrix)

        def send_runs(app: Celery, local_workers: int | None) -> None:
            from scheduler.dispatch import start  # imports Celery (see _app)

            total = start(app, store, matrix, exp_id, bundle)
            if local_workers is None:
                # Machine-readable output is the report alone on stdout: the id goes aside.
                aside = fmt == "json" or (wait and fmt in ("csv", "html"))
                click.echo(exp_id, err=aside)
            else:
                err.print(f"experiment {exp_id}: {total} runs on {local_workers} local workers")

        _drive(url, broker, store, matrix, exp_id, send_runs, workers, wait, fmt, nonfinite)


def _drive(
    url: str,
    broker: str | None,
    store: Store,
    matrix: Matrix,
    exp_id: str,
    send_runs: Callable[[Celery, int | None], None],
    workers: int | None,
    wait: bool,
    fmt: str,
    nonfinite: str,
) -> None:
    """What `submit` and `resume` share once they know what to send. With a shared
    broker: send, then follow only with --wait. Embedded: start local workers, send
    (`send_runs` is told how many workers), follow to the report, stop them.

    The local workers start before Celery is imported here: their start-up, the
    longest wait of a short experiment, runs beside this process's own."""
    if configured_broker(broker) is not None:
        app = _app(url)
        send_runs(app, None)
        if wait:
            try:
                _follow_and_print(app, store, exp_id, fmt, nonfinite)
            except KeyboardInterrupt:
                err.print(
                    f"\nstopped following; the fleet goes on running it: `scheduler status "
                    f"{exp_id}` follows it, `scheduler cancel {exp_id}` stops it",
                    soft_wrap=True,
                )
                sys.exit(130)
        return
    concurrency = workers or os.cpu_count() or 1
    with LocalWorkers(url, concurrency, _queues(matrix)) as local:
        app = _app(url)
        local.nudge = lambda: _wake(app, local.hostname)
        try:
            # Sending too: the workers can be running the first runs by then.
            send_runs(app, concurrency)
            _follow_and_print(app, store, exp_id, fmt, nonfinite, local)
        except KeyboardInterrupt:
            err.print(
                f"\ninterrupted; its runs not yet run stay queued: `scheduler resume {exp_id}` "
                f"finishes it, `scheduler cancel {exp_id}` drops them (the next submit here "
                "would run them first)",
                soft_wrap=True,
            )
            sys.exit(130)


def _wake(app: Celery, hostname: str) -> None:
    """A control message to one worker, no reply asked: an event its loop wakes for."""
    from celery.utils.nodenames import host_format

    app.control.broadcast("ping", destination=[host_format(hostname)], reply=False)


def _queues(matrix: Matrix) -> list[str]:
    """What local workers consume: the default queue first, then every queue the matrix names."""
    default = DEFAULT_QUEUE  # the apps' task_default_queue (worker/celery_app.py)
    return [default, *sorted(run_queues(matrix, default) - {default})]


def _check_size(matrix: Matrix) -> None:
    try:
        check_size(matrix)
    except PlanTooLarge as exc:
        fail(f"{exc}; nothing was started")


def _bundle(matrix: Matrix) -> Bundle:
    """The files the experiment ships to its workers; exit 2 when they cannot go."""
    try:
        return collect(matrix)
    except BundleError as exc:
        fail(f"{exc}; nothing was started")


def _size(size: float) -> str:
    for unit in ("B", "KB", "MB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


def _check_artifacts(matrix: Matrix, source: str) -> None:
    """The evidence folder exists (made here) and this machine may write to it."""
    if matrix.artifacts is None:
        return
    folder = matrix.artifacts.dir
    where = source if source == "--artifacts" else f"{source}: artifacts.dir"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"{where}: cannot create {folder}: {exc.strerror}; give a folder you can write to")
    if not os.access(folder, os.W_OK | os.X_OK):
        fail(f"{where}: {folder} is not writable here; give a folder you can write to")


def _check_visibility(matrix: Matrix) -> None:
    longest, visibility_s = longest_run_s(matrix), configured_visibility_timeout_s()
    if longest >= visibility_s:
        fail(
            f"the longest run may take {longest:.0f} s, more than the broker's visibility timeout "
            f"({visibility_s} s): Redis would hand it to a second worker. Lower "
            "agent.timeout_s or raise EVALFLEET_VISIBILITY_TIMEOUT on workers and scheduler."
        )


def _print(rendered: str, report: ExperimentReport, fmt: str, notice: bool = True) -> None:
    """A rendered report on stdout, ending in one newline. CSV is rows only: what a
    reader must see first (the budget's notice) goes to stderr, unless the caller
    says it (`notice`)."""
    if fmt == "csv" and notice:
        for line in banner(report):
            err.print(line, markup=False, soft_wrap=True)
    click.echo(rendered, nl=not rendered.endswith("\n"))


def _evidence(store: Store, exp_id: str) -> dict[str, bytes]:
    """Every run's evidence as stored (compressed JSON), for the html run table.
    Evidence kept as a file in an artifacts folder this machine does not see is
    left out, and stderr says so."""
    try:
        return store.all_evidence_blobs(exp_id)
    except OSError:
        pass
    found: dict[str, bytes] = {}
    unreadable: list[str] = []
    for run in store.runs(exp_id):
        try:
            evidence = store.evidence_blob(exp_id, run.run_id)
        except OSError as exc:
            unreadable.append(f"{run.run_id}: {exc}")
            continue
        if evidence is not None:
            found[run.run_id] = evidence
    if unreadable:
        err.print(
            f"note: the evidence of {len(unreadable)} run(s) is in an artifacts folder this "
            f"machine cannot read, and not in the page (first: {unreadable[0]}); write the "
            "report where that folder is mounted",
            markup=False,
            soft_wrap=True,
        )
    return found


def _follow_and_print(
    app: Celery, store: Store, exp_id: str, fmt: str, nonfinite: str, local: Any = None
) -> None:
    from scheduler.follow import WorkersDied, follow  # imports Celery (see _app)

    try:
        follow(app, store, exp_id, err, local)
    except WorkersDied as exc:
        fail(f"{exc}; the experiment can continue with `scheduler resume {exp_id}`", 1)
    report = store.report(exp_id)
    if report is None:
        fail(f"experiment {exp_id} ended without a report", 1)
    evidence = None
    if fmt == "html":  # its run table: every run with its evidence
        report = report.model_copy(update={"runs": store.runs(exp_id)})
        evidence = _evidence(store, exp_id)
    _print(render(report, fmt, nonfinite=nonfinite, evidence=evidence), report, fmt, notice=False)
    if report.budget is not None and report.budget.reached:
        err.print(
            f"{report.budget.notice}; `scheduler resume {exp_id} --budget USD` runs them",
            soft_wrap=True,
            markup=False,
        )
    _exit_if_infra_errors(report)


def _exit_if_infra_errors(report: ExperimentReport) -> None:
    """Exit 3, naming the most common infrastructure error, when some runs had one."""
    errors = report.experiment.errors
    if errors:
        reason, count = next(iter(report.error_reasons.items()))
        err.print(
            f"{errors} of {report.experiment.total_runs} runs were infrastructure errors, kept out "
            f"of the statistics; most common ({count}): {reason}",
            soft_wrap=True,
            markup=False,
        )
        sys.exit(INFRA_ERRORS)


# --- reading experiments ---------------------------------------------------------------------


@main.command("list")
@broker_option
@click.option("--json", "as_json", is_flag=True, help="One JSON array of experiment records.")
def list_(broker: str | None, as_json: bool) -> None:
    """List experiments, oldest first, with what each takes in Redis (MEMORY USAGE of
    its keys, summed; `stored_bytes` in JSON).

    Example: scheduler list --json
    """
    with open_store(broker) as (store, _):
        infos = store.list_experiments()
        versions = {info.id: store.report_versions(info.id) for info in infos}
        sizes = stored_bytes(store)
    if as_json:
        records = [
            {
                **i.model_dump(mode="json"),
                "report_versions": versions[i.id],
                "stored_bytes": sizes.get(i.id, 0),
            }
            for i in infos
        ]
        click.echo(json.dumps(records, indent=2))
        return
    if not infos:
        click.echo("no experiments yet")
    for info in infos:
        later = versions[info.id][1:]
        shown = _status_line(info) + (f"  report versions 1-{later[-1]}" if later else "")
        click.echo(f"{shown}  {_size(sizes.get(info.id, 0))} stored")


def _status_line(info: ExperimentInfo) -> str:
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(info.created_at))
    state = info.status.value
    if info.status == ExperimentStatus.complete and info.errors:
        state = f"complete with {info.errors} infrastructure errors"
    ran = info.completed_runs - info.cancelled - info.not_run
    not_run = f"  {info.not_run} not run (budget)" if info.not_run else ""
    return (
        f"{info.id}  {state:<9} {ran}/{info.total_runs} runs ran  {info.passes} passed  "
        f"{info.errors} infrastructure errors  {info.cancelled} cancelled{not_run}  {when}"
    )


@main.command()
@click.argument("experiment", required=False)
@broker_option
@click.option("--json", "as_json", is_flag=True)
def status(experiment: str | None, broker: str | None, as_json: bool) -> None:
    """Progress of an experiment (default: the latest).

    Example: scheduler status notes-guidance-20261122-101500-ab12
    """
    with open_store(broker) as (store, url):
        exp_id = _experiment(store, experiment)
        info = store.info(exp_id)
        idle = None
        if configured_broker(broker) is not None and info.status in (
            ExperimentStatus.pending,
            ExperimentStatus.running,
        ):
            app = _app(url)
            default = store.sent_to(exp_id) or app.conf.task_default_queue
            queues = sorted(run_queues(store.matrix(exp_id), default))
            idle = _queues_without_workers(app, queues)
    click.echo(info.model_dump_json(indent=2) if as_json else _status_line(info))
    if idle:
        err.print(
            f"no worker is taking runs from queue {', '.join(idle)}: start one with "
            f"`scheduler worker --broker URL --queues {','.join(idle)}`",
            markup=False,
            soft_wrap=True,
        )


def _queues_without_workers(app: Celery, queues: list[str]) -> list[str]:
    """The queues no live worker consumes (Celery's inspect: the workers answer)."""
    replies = app.control.inspect(timeout=1.0).active_queues() or {}
    consumed = {q["name"] for worker_queues in replies.values() for q in worker_queues}
    return [q for q in queues if q not in consumed]


@main.command()
@click.argument("experiment", required=False)
@broker_option
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option(
    "--runs",
    is_flag=True,
    help="Every run: json puts each RunResult under `runs`, csv gives one row per run "
    "instead of the tier rows (html always has its run table).",
)
@correction_option(None, "Default: as the experiment's report was made (matrix `report:`).")
@click.option(
    "--alpha",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=None,
    help="Significance level of the family of tests (default: as the report was made).",
)
@click.option(
    "--scenario",
    metavar="ID",
    default=None,
    help="Table, markdown, html: the view of one scenario, its tiers' interaction metrics "
    "side by side (the guidance comparison).",
)
@click.option(
    "--version",
    "version",
    type=click.IntRange(min=1),
    default=None,
    help="The report version: 1 is the runs' own, 2, 3... each rejudge's or rescore's "
    "(default: the latest; `scheduler list` shows them).",
)
@json_nonfinite_option
def report(
    experiment: str | None,
    broker: str | None,
    fmt: str,
    runs: bool,
    correction: str | None,
    alpha: float | None,
    scenario: str | None,
    version: int | None,
    nonfinite: str,
) -> None:
    """Print an experiment's report (default: the latest experiment, its latest version).

    The table fits the terminal (COLUMNS when set, else 120 columns when stdout
    is not a terminal). Pass rate is passes / runs counted (completed,
    agent_error, timeout, limit) with its Wilson 95% interval; infrastructure errors
    and cancelled runs are counted apart. Every test against the baseline is
    corrected with the others (Holm unless the matrix's `report:` or
    --correction says otherwise); raw and adjusted p-values are both shown.
    --format github is compact markdown for a PR comment or a job summary,
    its verdict line first.

    The html format is one file that opens offline: charts, tables and a run
    table that filters by tier, scenario and outcome; click a run for its
    evidence (gates, judge, transcript, stderr and stdout, attempts).

    \b
    Examples:
      scheduler report EXP --format markdown > report.md
      scheduler report EXP --format github >> "$GITHUB_STEP_SUMMARY"
      scheduler report EXP --correction bh --alpha 0.1
      scheduler report EXP --format html > report.html
      scheduler report EXP --scenario create_notes
      scheduler report EXP --format json --runs --json-nonfinite null | jq .tiers
      scheduler report EXP --format csv --runs > runs.csv   # one row per run
      scheduler report EXP --version 1      # the original, before any rejudge
    """
    if scenario is not None and fmt not in SCENARIO_FORMATS:
        fail(
            f"--scenario is a view for --format {', '.join(SCENARIO_FORMATS)}; {fmt} carries "
            "every scenario already"
        )
    if runs and fmt not in ("json", "csv", "html"):
        fail(
            f"--runs lists every run in --format json or csv, not {fmt} (html always has its "
            "run table; `scheduler show RUN` gives one run's evidence)"
        )
    with open_store(broker) as (store, _):
        exp_id = _experiment(store, experiment)
        versions = store.report_versions(exp_id)
        if not versions:
            fail(f"experiment {exp_id} has no report yet ({_status_line(store.info(exp_id))})", 1)
        if version is not None and version not in versions:
            fail(
                f"experiment {exp_id} has no report version {version}; its versions: "
                + ", ".join(map(str, versions))
            )
        shown = version or versions[-1]
        result = store.report(exp_id, shown)
        assert result is not None  # listed as stored
        if runs or fmt == "html":  # html: for its run table
            every = store.runs(exp_id) if shown == 1 else store.version_runs(exp_id, shown)
            result = result.model_copy(update={"runs": every})
        evidence = _evidence(store, exp_id) if fmt == "html" else None
    if len(versions) > 1:
        note = f" ({result.version_note})" if result.version_note else ""
        err.print(
            f"report version {shown} of {versions[-1]}{note}; --version N for another",
            markup=False,
            soft_wrap=True,
        )
    if correction is not None or alpha is not None:
        stored = result.multiplicity
        result = correct_report(
            result,
            cast(Correction, correction or (CORRECTION if stored is None else stored.correction)),
            alpha or (ALPHA if stored is None else stored.alpha),
        )
    known = list(dict.fromkeys(s for t in result.tiers.values() for s in t.scenarios))
    if scenario is not None and scenario not in known:
        fail(f"experiment {exp_id} has no scenario {scenario!r}; its scenarios: {', '.join(known)}")
    _print(render(result, fmt, scenario, nonfinite=nonfinite, evidence=evidence), result, fmt)


@main.command()
@click.argument("run", nargs=-1, required=True)
@broker_option
@click.option("--json", "as_json", is_flag=True, help="The run's result, evidence and deliveries.")
def show(run: tuple[str, ...], broker: str | None, as_json: bool) -> None:
    """Show one run: outcome and reason, gates with their command and output, the
    judge's scores and reasons, a compact transcript, stdout and stderr tails, and
    every delivery.

    RUN is a run id (EXP:TIER:SCENARIO:INDEX, as `report --format json --runs`
    lists them), or EXP TIER SCENARIO INDEX, or the end of a run id that only one
    run of the 100 latest experiments has.

    \b
    Examples:
      scheduler show notes-guidance-20261122-101500-ab12:T1:create_notes:3
      scheduler show notes-guidance-20261122-101500-ab12 T1 create_notes 3
      scheduler show ab12:T1:create_notes:3 --json | jq .evidence.gates
    """
    with open_store(broker) as (store, _):
        exp_id, run_id = _run_of(store, run)
        note = None
        try:
            evidence = store.evidence(exp_id, run_id)
        except OSError as exc:  # a file in an artifacts folder this machine does not see
            evidence, note = None, f"the run's evidence file cannot be read here: {exc}"
        attempts = evidence.attempts if evidence is not None else None
        record = RunRecord(
            result=store.run(exp_id, run_id),
            evidence=evidence,
            attempts=attempts or store.deliveries(exp_id, run_id),
        )
        versions = store.report_versions(exp_id)
    if len(versions) > 1:
        # `report` shows the latest version; what is shown here is the run as it ran.
        err.print(
            f"note: this is the run as it ran (report version 1 of {versions[-1]}); its result "
            f"in a later version: `scheduler report {exp_id} --version {versions[-1]} "
            "--format json --runs`",
            soft_wrap=True,
            markup=False,
        )
    if as_json:
        click.echo(record.model_dump_json(indent=2))
        if note is not None:
            err.print(f"note: {note}", markup=False)
        return
    click.echo(render_run(record, run_id, terminal_width(), note), nl=False)


def _run_of(store: Store, words: tuple[str, ...]) -> tuple[str, str]:
    """(experiment id, run id) of `scheduler show`'s RUN words; exits 2 if there is no such run."""
    if len(words) == 4:
        exp_id = _experiment(store, words[0])
        run_id = ":".join(words)
    elif len(words) == 1:
        exp_id, run_id = words[0].rsplit(":", 3)[0], words[0]
        if not store.exists(exp_id):
            found = store.run_ids_ending(words[0])
            if len(found) != 1:
                listed = "; ".join(found[:5]) + ("; ..." if len(found) > 5 else "")
                fail(
                    f"{len(found)} runs end with {words[0]!r}: {listed}; give more of the run id"
                    if found
                    else f"no run {words[0]!r}: give a run id as `report --format json --runs` "
                    "lists them (EXPERIMENT:TIER:SCENARIO:INDEX), or EXP TIER SCENARIO INDEX"
                )
            run_id = found[0]
            exp_id = run_id.rsplit(":", 3)[0]
    else:
        fail(f"give one run id or EXP TIER SCENARIO INDEX, not {len(words)} words")
    if not store.has_run(exp_id, run_id):
        fail(
            f"experiment {exp_id} has no run {run_id.removeprefix(exp_id + ':')!r} "
            "(its runs are TIER:SCENARIO:INDEX; `scheduler report EXP --format json --runs` "
            "lists them)"
        )
    return exp_id, run_id


@main.command()
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
@correction_option(CORRECTION)
@click.option(
    "--fail-on-regression",
    is_flag=True,
    help="Exit 1 when a tier of B is significantly worse than in A after the correction "
    "(a CI gate).",
)
@click.option(
    "--format", "fmt", type=click.Choice(COMPARE_FORMATS), default="table", show_default=True
)
@json_nonfinite_option
def compare(
    experiment_a: str,
    experiment_b: str,
    broker: str | None,
    alpha: float,
    correction: str,
    fail_on_regression: bool,
    fmt: str,
    nonfinite: str,
) -> None:
    """Compare experiment B against A, per tier and per tier x scenario.

    Deltas of pass rate and median composite score with their effect sizes,
    Fisher's exact test on passes and Mann-Whitney U on composite scores
    (two-sided), all of them corrected together (--correction, Holm by
    default) at --alpha. A tier regressed when either test finds it
    significantly worse after the correction.

    \b
    Examples:
      scheduler compare EXP_BASELINE EXP_CANDIDATE --format markdown
      scheduler compare EXP_A EXP_B --fail-on-regression --alpha 0.01   # CI gate
      scheduler compare EXP_A EXP_B --format github >> "$GITHUB_STEP_SUMMARY"
    """
    with open_store(broker) as (store, _):
        ids = [_experiment(store, e) for e in (experiment_a, experiment_b)]
        infos = [store.info(exp_id) for exp_id in ids]
        runs = [store.runs(exp_id) for exp_id in ids]
        versions = {exp_id: store.report_versions(exp_id) for exp_id in ids}
    for info in infos:
        if info.status != ExperimentStatus.complete:
            err.print(f"note: {_status_line(info)}: comparing the runs it has")
    for exp_id, numbers in versions.items():
        if len(numbers) > 1:
            # `report` shows the latest version: say that this is not it.
            err.print(
                f"note: {exp_id} has report versions {numbers[0]}-{numbers[-1]}; compare "
                "reads its runs as they ran (version 1), not a rejudge's or rescore's",
                soft_wrap=True,
            )
    result = compare_experiments(
        infos[0], runs[0], infos[1], runs[1], alpha, cast(Correction, correction)
    )
    if not result.tiers:
        fail(f"{ids[0]} and {ids[1]} share no tier; nothing to compare")
    click.echo(render_comparison(result, fmt, nonfinite=nonfinite))
    if result.regressions:
        err.print(f"significantly worse in {ids[1]}: {', '.join(result.regressions)}")
        if fail_on_regression:
            sys.exit(1)


@main.command()
@click.argument("experiment")
@broker_option
@workers_option
@click.option("--wait", is_flag=True, help="With a shared broker: follow until done.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@budget_option(
    "A new ceiling on the agents' spend of the whole experiment (what it spent so far "
    "included); the runs not run for the budget are sent again."
)
@json_nonfinite_option
def resume(
    experiment: str,
    broker: str | None,
    workers: int | None,
    wait: bool,
    fmt: str,
    budget: float | None,
    nonfinite: str,
) -> None:
    """Re-send the runs that have no result and are neither running nor queued (and,
    of a cancelled experiment, those cancelled before they started; with --budget,
    those the budget kept from starting), then aggregate.

    \b
    Examples:
      scheduler resume notes-guidance-20261122-101500-ab12
      scheduler resume EXP --broker redis://host:6379/0 --wait
      scheduler resume EXP --budget 40     # raise the budget: the not-run runs run
    """
    # Both import Celery (see _app).
    from scheduler.dispatch import send
    from worker.recovery import to_resend

    with open_store(broker) as (store, url):
        exp_id = _experiment(store, experiment)
        matrix = store.matrix(exp_id)
        info = store.info(exp_id)
        app = _app(url)
        if budget is not None and matrix.budget is None:
            fail(
                f"experiment {exp_id} was submitted without a budget; --budget on resume "
                "changes an experiment's budget (nothing was sent)"
            )
        # Never-started runs first: once they lose their results they are pending too.
        cancelled = (
            store.unrecord(exp_id, RunStatus.cancelled)
            if info.status == ExperimentStatus.cancelled
            else []
        )
        not_run: list[RunSpec] = []
        if budget is not None and matrix.budget is not None:
            limits = store.ledger.state(exp_id).limits
            raised = matrix.budget.model_copy(
                update={"agent_usd": budget, "judge_usd": limits.get("judge")}
            )
            store.ledger.set_limits(exp_id, raised)
            not_run = store.unrecord(exp_id, RunStatus.not_run)
        pending = to_resend(app, store, exp_id)
        # Runs still queued or running are left where they are: taken by the workers
        # (the embedded ones started here), not sent a second time.
        now = store.info(exp_id)  # unrecord took results back
        waiting = now.total_runs - now.completed_runs - len(pending)
        kept = (
            f"; {now.not_run} runs not run for the budget stay so (`--budget USD` raises it)"
            if now.not_run
            else ""
        )
        if not pending and not waiting and store.report(exp_id) is not None:
            err.print(
                f"experiment {exp_id}: every run has a result; nothing to resume{kept}",
                soft_wrap=True,
            )
            return
        if pending:
            store.reopen(exp_id)
        unstarted = len(cancelled) + len(not_run)
        err.print(
            f"experiment {exp_id}: re-sending {len(pending)} runs: {len(cancelled)} cancelled "
            f"before they started, "
            + (f"{len(not_run)} not run for the budget, " if budget is not None else "")
            + f"{len(pending) - unstarted} with no result, lease or "
            f"message; {waiting} still queued or running{kept}",
            soft_wrap=True,
        )

        def send_runs(app: Celery, _local_workers: int | None) -> None:
            send(app, store, matrix, exp_id, pending, len(pending))

        _drive(url, broker, store, matrix, exp_id, send_runs, workers, wait, fmt, nonfinite)


@main.command()
@click.argument("experiment")
@broker_option
@click.option("--judge-model", metavar="MODEL", default=None, help="Another judge model.")
@click.option(
    "--rubric",
    "rubric_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Another rubric for every judged scenario (read here, sent with the tasks).",
)
@click.option(
    "--repeats",
    type=click.IntRange(1, 20),
    default=None,
    help="Judgments per run (default: the matrix's judge.repeats).",
)
@workers_option
@click.option("--wait", is_flag=True, help="With a shared broker: follow until the report.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@json_nonfinite_option
def rejudge(
    experiment: str,
    broker: str | None,
    judge_model: str | None,
    rubric_file: str | None,
    repeats: int | None,
    workers: int | None,
    wait: bool,
    fmt: str,
    nonfinite: str,
) -> None:
    """Judge every run of a finished experiment again from its stored evidence,
    through the fleet, without starting any agent: a new report version (2, 3...)
    beside the original, which is never overwritten.

    \b
    Judgments already asked (same transcript, rubric, judge model and prompt
    version) come from the judgment cache at no cost; the output says how many.

    \b
    Examples:
      scheduler rejudge EXP --judge-model gpt-4o            # a second opinion
      scheduler rejudge EXP --repeats 5                     # measure the judge's noise
      scheduler rejudge EXP --rubric rubrics/strict.yaml --broker redis://host:6379/0 --wait
      scheduler report EXP --version 1                      # the original again
    """
    from core.matrix import load_rubric

    if judge_model is not None and not judge_model.strip():
        fail("--judge-model is empty: give the judge model's name, e.g. --judge-model gpt-4o")
    rubric = None
    if rubric_file is not None:
        try:
            rubric = load_rubric(Path(rubric_file).resolve())
        except ConfigError as exc:
            for problem in exc.problems:
                err.print(f"[red]error:[/red] {problem}", soft_wrap=True)
            fail(f"--rubric {rubric_file} is not a usable rubric; nothing was started")
    with open_store(broker) as (store, url):
        exp_id = _finished(store, experiment)
        matrix = store.matrix(exp_id)
        if matrix.judge is None:
            fail(f"experiment {exp_id} has no judge (no top-level `judge:` in its matrix)")
        # Whether judge inputs were kept is seen in one run's evidence, not in every
        # run's (each is a decompression): runs judged before evidence was kept are
        # kept as they were by the workers.
        judged = [r.run_id for r in store.runs(exp_id) if r.judge is not None]
        first = store.evidence(exp_id, judged[0]) if judged else None
        if first is None or first.judge is None:
            fail(
                f"no run of {exp_id} has stored judge inputs (evidence): nothing to judge "
                "again; runs judged before evidence was kept cannot be rejudged"
            )
        overrides = {"model": judge_model, "repeats": repeats}
        judge = matrix.judge.model_copy(
            update={k: v for k, v in overrides.items() if v is not None}
        )
        changed = [f"{k} {v}" for k, v in overrides.items() if v is not None]
        changed += [f"rubric {rubric_file}"] if rubric_file else []
        plan = {
            "judge": judge,
            "rubric": rubric,
            "note": "rejudged" + (": " + ", ".join(changed) if changed else " (same judge)"),
        }
        runs = store.info(exp_id).completed_runs
        what = f"judging {len(judged)} of {runs} runs again with {judge.model} x{judge.repeats}"
        _judge_again(store, url, broker, matrix, exp_id, plan, what, workers, wait, fmt, nonfinite)


@main.command()
@click.argument("experiment")
@broker_option
@click.option(
    "--matrix",
    "matrix_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Take the gates of the experiment's scenarios from this matrix file (say, a fixed "
    "gate); default: the experiment's own gates.",
)
@workers_option
@click.option("--wait", is_flag=True, help="With a shared broker: follow until the report.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@json_nonfinite_option
def rescore(
    experiment: str,
    broker: str | None,
    matrix_file: str | None,
    workers: int | None,
    wait: bool,
    fmt: str,
    nonfinite: str,
) -> None:
    """Run the gates again on the runs' archived workspaces (matrix `workspace_archive:`),
    and their judge with the new gates, through the fleet, without starting any agent:
    a new report version beside the original. Runs without an archived workspace
    (passed ones with `keep: failed`, ones above `max_bytes`) are kept as they were.

    \b
    Examples:
      scheduler rescore EXP --matrix matrix.yaml        # gates fixed since the runs
      scheduler rescore EXP --broker redis://host:6379/0 --wait
      scheduler report EXP --version 1                  # the original again
    """
    gates = {}
    if matrix_file is not None:
        gates = {s.id: s.evaluation.gates for s in _load(matrix_file).scenarios}
    with open_store(broker) as (store, url):
        exp_id = _finished(store, experiment)
        matrix = store.matrix(exp_id)
        unknown = sorted(set(gates) - {s.id for s in matrix.scenarios})
        if unknown:
            fail(
                f"{matrix_file}: scenarios {', '.join(unknown)} are not in experiment {exp_id} "
                f"(its scenarios: {', '.join(s.id for s in matrix.scenarios)})"
            )
        archived = store.archived_runs(exp_id)
        if not archived:
            fail(
                f"no run of {exp_id} has an archived workspace: nothing to gate again; set "
                "`workspace_archive: {keep: failed}` in the matrix to keep them"
            )
        plan = {
            "rescore": True,
            "gates": gates,
            "note": "rescored" + (f": gates of {matrix_file}" if matrix_file else ""),
        }
        runs = store.info(exp_id).completed_runs
        what = f"gating {archived} of {runs} runs again on their archived workspaces"
        _judge_again(store, url, broker, matrix, exp_id, plan, what, workers, wait, fmt, nonfinite)


def _finished(store: Store, experiment: str) -> str:
    exp_id = _experiment(store, experiment)
    if store.report(exp_id) is None:
        fail(f"experiment {exp_id} has not finished ({_status_line(store.info(exp_id))})")
    return exp_id


def _judge_again(
    store: Store,
    url: str,
    broker: str | None,
    matrix: Matrix,
    exp_id: str,
    plan_fields: dict[str, Any],
    what: str,
    workers: int | None,
    wait: bool,
    fmt: str,
    nonfinite: str,
) -> None:
    """What rejudge and rescore share: a new version, sent through the fleet (embedded:
    local workers), followed to its report unless a shared broker without --wait."""
    from core.evaluation.rejudge import RejudgePlan
    from scheduler.follow import WorkersDied
    from scheduler.rejudge import follow_version, send_rejudge

    judge = plan_fields.get("judge") or matrix.judge
    key = judge.api_key_env if judge is not None else None
    if configured_broker(broker) is None and key and not os.environ.get(key):
        # The local workers judge with this shell's environment: every judgment would
        # be an infrastructure error in a version that then shows by default.
        fail(f"{key} is not set: the local workers need it to judge; nothing was started")
    version = store.new_version(exp_id)
    plan = RejudgePlan(version=version, **plan_fields)
    app = _app(url)
    err.print(
        f"experiment {exp_id}: report version {version}, {what} (the others are kept as they were)",
        soft_wrap=True,
    )
    try:
        if configured_broker(broker) is not None:
            send_rejudge(app, store, matrix, exp_id, plan)
            if not wait:
                click.echo(f"{exp_id} version {version}", err=fmt == "json")
                return
            result = follow_version(store, exp_id, plan, err)
        else:
            concurrency = workers or os.cpu_count() or 1
            with LocalWorkers(url, concurrency, [app.conf.task_default_queue]) as local:
                send_rejudge(app, store, matrix, exp_id, plan)
                result = follow_version(store, exp_id, plan, err, local)
    except WorkersDied as exc:
        fail(f"{exc}; version {version} is incomplete", 1)
    _print(render(result, fmt, nonfinite=nonfinite), result, fmt)
    if result.judge is not None:
        err.print(
            f"{result.judge.judgments} judgments, {result.judge.cached} from cache",
            markup=False,
        )
    _exit_if_infra_errors(result)


@main.command()
@click.argument("experiment")
@broker_option
def cancel(experiment: str, broker: str | None) -> None:
    """Cancel an experiment: runs not yet started are recorded as cancelled.

    Example: scheduler cancel notes-guidance-20261122-101500-ab12
    """
    with open_store(broker) as (store, _):
        exp_id = _experiment(store, experiment)
        store.set_status(exp_id, ExperimentStatus.cancelled)
    click.echo(f"cancelled {exp_id}; running runs finish, the rest are recorded as cancelled")


# --- retention ---------------------------------------------------------------------------

yes_option = click.option("--yes", "-y", is_flag=True, help="Delete without asking.")
force_option = click.option(
    "--force",
    is_flag=True,
    help="Delete running experiments too (their queued runs are dropped by the workers; a "
    "run in progress may write its result back: delete again once it ends).",
)


@main.command()
@click.argument("experiment")
@broker_option
@yes_option
@force_option
def delete(experiment: str, broker: str | None, yes: bool, force: bool) -> None:
    """Delete an experiment and everything stored with it: runs, evidence (its files in
    an artifacts folder too), reports, files, counters, and the Celery keys of its chords.

    \b
    Examples:
      scheduler delete notes-guidance-20261122-101500-ab12
      scheduler delete notes-guidance-20261122-101500-ab12 --yes     # in a script
    """
    with open_store(broker) as (store, _):
        keys = experiment_keys(store, experiment)
        if not keys:
            fail(str(ExperimentNotFound(experiment)))
        running = _running(store, experiment)
        if running and not force:
            fail(
                f"experiment {experiment} is {running}: cancel it first (`scheduler cancel "
                f"{experiment}`), or pass --force to delete it while it runs"
            )
        size = stored_bytes(store).get(experiment, 0)
        _confirm(f"delete experiment {experiment} ({len(keys)} keys, {_size(size)})?", yes)
        _deleted(experiment, delete_experiment(store, experiment), size)


@main.command()
@click.option(
    "--older-than",
    "age",
    required=True,
    metavar="AGE",
    callback=lambda ctx, param, value: _seconds(value),
    help="Created longer ago than this: a number and a unit, s m h d or w (30d, 12h).",
)
@broker_option
@click.option("--dry-run", is_flag=True, help="Only list what would be deleted.")
@yes_option
@force_option
def prune(age: float, broker: str | None, dry_run: bool, yes: bool, force: bool) -> None:
    """Delete every experiment created longer ago than --older-than, with all its keys
    (as `scheduler delete`); running ones are kept unless --force.

    \b
    Examples:
      scheduler prune --older-than 30d --dry-run
      scheduler prune --older-than 30d --yes      # e.g. a nightly job
    """
    with open_store(broker) as (store, _):
        sizes = stored_bytes(store)
        doomed = []
        for exp_id in created_before(store, time.time() - age):
            running = _running(store, exp_id)
            if running and not force:
                err.print(f"keeping {exp_id}: it is {running} (--force deletes it)")
                continue
            doomed.append(exp_id)
            click.echo(
                f"{'would delete' if dry_run else 'delete'} {exp_id}  {_size(sizes.get(exp_id, 0))}"
            )
        total = _size(sum(sizes.get(exp_id, 0) for exp_id in doomed))
        if not doomed or dry_run:
            note = " (dry run: nothing deleted)" if dry_run else ""
            click.echo(f"{len(doomed)} experiments, {total}{note}")
            return
        _confirm(f"delete these {len(doomed)} experiments ({total})?", yes)
        for exp_id in doomed:
            _deleted(exp_id, delete_experiment(store, exp_id), sizes.get(exp_id, 0))
    click.echo(f"deleted {len(doomed)} experiments, {total}")


def _deleted(exp_id: str, deleted: Deleted, size: int) -> None:
    files = f", {deleted.files} evidence files" if deleted.files else ""
    click.echo(f"deleted {exp_id}: {deleted.keys} keys, {_size(size)}{files}")
    if deleted.unreachable:
        err.print(
            f"{len(deleted.unreachable)} evidence files of {exp_id} could not be removed from "
            f"here, e.g. {deleted.unreachable[0]}: remove them where the artifacts folder is",
            soft_wrap=True,
            markup=False,
        )


def _running(store: Store, exp_id: str) -> str | None:
    """How far the experiment is when it is still pending or running, else None."""
    try:
        info = store.info(exp_id)
    except (ExperimentNotFound, KeyError):  # keys left without a record: nothing runs
        return None
    if info.status not in (ExperimentStatus.pending, ExperimentStatus.running):
        return None
    return f"{info.status.value} ({info.completed_runs}/{info.total_runs} runs done)"


def _confirm(question: str, yes: bool) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        fail(f"{question[:-1]}: pass --yes to confirm without a terminal")
    click.confirm(question, abort=True, err=True)


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def _seconds(age: str) -> float:
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", age or "")
    if match is None:
        raise click.BadParameter(f"{age!r} is not an age: a number and a unit, s m h d or w (30d)")
    return float(match[1]) * _UNITS[match[2]]


@main.command()
@broker_option
@click.option(
    "--concurrency",
    "-c",
    type=click.IntRange(1, 512),
    default=None,
    help="Runs at once in this worker (default: the CPU count).",
)
@click.option(
    "--queues",
    "-Q",
    default=None,
    help="Comma-separated queues to take runs from (default: EVALFLEET_QUEUE or evalfleet).",
)
@click.option(
    "--until-idle",
    type=click.FloatRange(min=0),
    default=None,
    metavar="SECONDS",
    help="Exit 0 once no task has run and the queues have stayed empty this long "
    "(for CI jobs that should end when the experiment is drained).",
)
@click.option(
    "--grace",
    type=click.FloatRange(min=0),
    default=None,
    metavar="SECONDS",
    help="On SIGTERM, running runs may finish this long; then they go back to the queue "
    "for another worker (default: EVALFLEET_SHUTDOWN_GRACE or 30).",
)
@click.option(
    "--hostname",
    "-n",
    default=None,
    metavar="NAME",
    help="Celery node name shown in Flower, e.g. ci-3@%h (default: evalfleet-<pid>@<host>, "
    "unique among the workers of one machine).",
)
@click.option("--loglevel", default="INFO", show_default=True)
def worker(
    broker: str | None,
    concurrency: int | None,
    queues: str | None,
    until_idle: float | None,
    grace: float | None,
    hostname: str | None,
    loglevel: str,
) -> None:
    """Start a Celery worker for evalfleet runs on this machine.

    \b
    Examples:
      scheduler worker --broker redis://:pw@broker:6379/0 --concurrency 4
      scheduler worker --queues evalfleet,gpu
      scheduler worker --concurrency 2 --until-idle 120 --grace 5    # a CI job
    """
    url = configured_broker(broker) or running_embedded_broker()
    if url is None:
        fail(
            "no broker: pass --broker URL or set EVALFLEET_BROKER_URL (a worker joins the "
            "embedded Redis under ./.evalfleet only while a `scheduler submit` here runs it)"
        )
    # Celery's default, celery@HOST, is the same for every worker of a machine:
    # Flower then shows one. The pid stays the worker's own across the exec below.
    command = worker_command(
        concurrency or os.cpu_count() or 1,
        (queues or DEFAULT_QUEUE).split(","),
        hostname or f"evalfleet-{os.getpid()}@%h",
        loglevel,
    )
    if until_idle is not None:
        command += ["--until-idle", f"{until_idle:g}"]
    if grace is not None:
        command += ["--grace", f"{grace:g}"]
    os.execvpe(command[0], command, {**os.environ, "EVALFLEET_BROKER_URL": url})


def _interrupted(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run() -> NoReturn:
    """The `scheduler` console script: `main`, then an exit without the interpreter's
    teardown of Celery's, pydantic's and rich's objects, 0.1-0.3 s of CPU after
    every command had finished. Exit handlers (logging's flush) still run.

    TERM (a cancelled CI job, `kill`) and HUP (a closed terminal) stop a command as
    Ctrl-C does: an embedded experiment's workers and Redis run in sessions of their
    own, out of the signal's reach, and only the CLI's own clean-up stops them."""
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupted)
    try:
        main()
        code: object = 0
    except SystemExit as exc:
        code = exc.code
    except SettingError as exc:  # read where used: any command may meet one
        err.print(f"[red]error:[/red] {exc}", soft_wrap=True)
        code = USAGE_ERROR
    except KeyboardInterrupt:  # before a command could say more (while importing)
        print("\ninterrupted", file=sys.stderr)
        code = 130
    if isinstance(code, str):  # what sys.exit would print
        print(code, file=sys.stderr)
    status = code if isinstance(code, int) else int(code is not None)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe: nothing left to say
            stream.flush()
    os._exit(status)


if __name__ == "__main__":
    run()
