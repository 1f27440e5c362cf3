"""A matrix file checked before anything starts: loaded, the mistakes that would waste
it refused (scheduler.mistakes), its plan's size and run times against the broker's
limits, its artifacts folder, the files it ships; the plan summarized in words
(`scheduler validate`), with the smallest differences it can detect on each of the
two questions a report answers.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from core.analysis.comparison import runs_icc
from core.errors import BundleError, InputError, PlanTooLarge
from core.files.bundle import Bundle, collect
from core.matrix import (
    AgentConfig,
    Artifacts,
    Budget,
    ConfigProblem,
    Matrix,
    Scenario,
    load_matrix,
    task_format,
)
from core.metrics.pricing import price_for
from core.results.run import RunResult
from core.stats.choices import PLANNING_ICC
from core.stats.clustered import (
    MIN_SCENARIOS_TO_GENERALISE,
    PLANNING_POWER,
    PLANNING_RATE,
    PLANNING_TARGET,
    design_effect,
    planned_detectable,
    runs_to_detect,
)
from core.stats.significance import lone_test_alpha
from core.wording import plural
from fleet.sending import configured_visibility_timeout_s, longest_run_s
from scheduler.mistakes import refuse_mistakes
from scheduler.plan import check_size, describe_runs
from scheduler.report.formatting import points
from scheduler.report.scenarios import difference, runs_alone, scenarios_would


@dataclass(frozen=True)
class Checked:
    """A matrix ready to run, the files it ships to the workers, and what may be a
    mistake in it but need not be (scheduler.mistakes)."""

    matrix: Matrix
    bundle: Bundle
    warnings: tuple[ConfigProblem, ...] = ()


def validate(matrix_file: str | Path, *, allow_missing_keys: bool = False) -> Checked:
    """The matrix of `matrix_file`, checked as `submit` checks it (ConfigError,
    PlanTooLarge, BundleError, InputError otherwise); nothing is started.
    `allow_missing_keys`: an agent's or a judged scenario's API key not set here is
    no error (the workers have it).

        checked = validate("examples/matrix.yaml")
        print(checked.matrix.total_runs(), checked.bundle.size)
    """
    matrix = load_matrix(matrix_file)
    warnings = refuse_mistakes(matrix, matrix_file, allow_missing_keys=allow_missing_keys)
    _check_runs(matrix)
    return Checked(matrix, _bundle(matrix, Path(matrix_file)), tuple(warnings))


def prepare(
    matrix_file: str | Path,
    *,
    budget: float | None = None,
    keep_workspaces: bool = False,
    artifacts: str | Path | None = None,
    allow_missing_keys: bool = False,
) -> Checked:
    """`validate`, with what a submit may change: a ceiling on the agents' spend over
    the matrix's `budget.agent_usd`, runs' folders kept, an artifacts folder over the
    matrix's (made here, and checked writable)."""
    matrix = load_matrix(matrix_file)
    warnings = refuse_mistakes(matrix, matrix_file, allow_missing_keys=allow_missing_keys)
    if budget is not None:
        matrix.budget = (matrix.budget or Budget(agent_usd=budget)).model_copy(
            update={"agent_usd": budget}
        )
    _check_runs(matrix)
    if keep_workspaces:
        matrix.keep_workspaces = True
    if artifacts is not None:
        matrix.artifacts = Artifacts(dir=os.path.abspath(artifacts))
    _check_artifacts(matrix, "--artifacts" if artifacts is not None else str(matrix_file))
    # The bundle after the artifacts: that folder is not shipped.
    return Checked(matrix, _bundle(matrix, Path(matrix_file)), tuple(warnings))


def _check_runs(matrix: Matrix) -> None:
    try:
        check_size(matrix)
    except PlanTooLarge as exc:
        raise PlanTooLarge(f"{exc}; nothing was started") from None
    longest, visibility_s = longest_run_s(matrix), configured_visibility_timeout_s()
    if longest >= visibility_s:
        raise InputError(
            f"the longest run may take {longest:.0f} s, more than the broker's visibility timeout "
            f"({visibility_s} s): Redis would hand it to a second worker. Lower "
            "agent.timeout_s or raise EVALFLEET_VISIBILITY_TIMEOUT on workers and scheduler."
        )


def _bundle(matrix: Matrix, matrix_file: Path) -> Bundle:
    try:
        return collect(matrix, matrix_file)
    except BundleError as exc:
        raise BundleError(f"{exc}; nothing was started") from None


def _check_artifacts(matrix: Matrix, source: str) -> None:
    """The evidence folder exists (made here) and this machine may write to it."""
    if matrix.artifacts is None:
        return
    folder = matrix.artifacts.dir
    where = source if source == "--artifacts" else f"{source}: artifacts.dir"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(
            f"{where}: cannot create {folder}: {exc.strerror}; give a folder you can write to"
        ) from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"{where}: {folder} is not writable here; give a folder you can write to")


def missing_clis(matrix: Matrix) -> dict[str, list[str]]:
    """The presets' CLIs that are not on PATH here, with the tiers that use them."""
    missing: dict[str, list[str]] = {}
    for tier in matrix.tiers:
        cli = matrix.agent_for(tier).cli
        if cli is not None and shutil.which(cli) is None:
            missing.setdefault(cli, []).append(tier.id)
    return missing


def _model_of(agent: AgentConfig) -> str:
    preset = agent.preset_spec
    if agent.model or preset is None:
        return agent.model or "-"
    if preset.default_model is not None:
        return f"{preset.default_model} (the CLI's default)"
    return "none set (the CLI picks one itself)" if preset.model_choice else "-"


def summary(matrix: Matrix) -> str:
    """The plan in words: runs, tiers, scenarios, the judge and the budget."""
    lines = [
        f"{matrix.name}: {plural(len(matrix.tiers), 'tier')} x "
        f"{plural(len(matrix.scenarios), 'scenario')} x {describe_runs(matrix)} = "
        f"{plural(matrix.total_runs(), 'run')}"
        + (" at most" if matrix.adaptive is not None else ""),
        f"baseline: {matrix.baseline_tier}",
    ]
    for tier in matrix.tiers:
        agent = matrix.agent_for(tier)
        target = agent.command if agent.kind == "command" else f"openai loop @ {agent.base_url}"
        extra = f", files: {', '.join(tier.files)}" if tier.files else ""
        lines.append(
            f"  tier {tier.id}: {agent.kind} ({target}), model {_model_of(agent)}, "
            f"timeout {agent.timeout_s:g} s{extra}"
        )
    for scenario in matrix.scenarios:
        if scenario.task is not None:
            continue  # listed by folder below: a dataset has a hundred
        gates = ", ".join(g.name or g.type for g in scenario.evaluation.gates) or "none"
        judge = scenario.evaluation.judge
        judged = f"judge >= {judge.pass_threshold:g}" if judge and judge.enabled else "no judge"
        lines.append(f"  scenario {scenario.id}: gates [{gates}], {judged}")
    lines += task_lines(matrix)
    lines.append(_judge_line(matrix))
    if matrix.budget is not None:
        lines.append(_budget_line(matrix, matrix.budget))
    return "\n".join(lines)


# A folder's tasks listed one by one up to this many; past it, the first few and a count.
MAX_LISTED_TASKS = 8
FIRST_TASKS = 5


def task_lines(matrix: Matrix) -> list[str]:
    """The scenarios read from benchmark task folders (`task:`, `tasks:`), by the folder
    holding them: how many of each format, what sandbox they need, and the first few."""
    by_folder: dict[Path, list[Scenario]] = {}
    for scenario in matrix.scenarios:
        if scenario.task is not None:
            by_folder.setdefault(scenario.task.parent, []).append(scenario)
    lines = []
    for folder, scenarios in by_folder.items():
        formats = Counter(task_format(s.task) or "?" for s in scenarios if s.task is not None)
        docker = sum(_needs_docker(s) for s in scenarios)
        lines.append(
            f"  tasks in {_shown(folder, matrix)}/: {plural(len(scenarios), 'scenario')} ("
            + ", ".join(f"{n} {kind}" for kind, n in sorted(formats.items()))
            + f"); needs sandbox: docker for {docker} (their own image), bwrap for "
            f"{len(scenarios) - docker} (they run on this system)"
        )
        shown = scenarios if len(scenarios) <= MAX_LISTED_TASKS else scenarios[:FIRST_TASKS]
        lines += [f"    {_task_line(s, matrix)}" for s in shown]
        if len(shown) < len(scenarios):
            lines.append(f"    ... and {len(scenarios) - len(shown)} more")
    return lines


def _needs_docker(scenario: Scenario) -> bool:
    env = scenario.environment
    return env is not None and (env.image is not None or env.build is not None)


def _task_line(scenario: Scenario, matrix: Matrix) -> str:
    env, verifier = scenario.environment, scenario.verifier
    if env is not None and env.image is not None:
        where = f"docker (image {env.image})"
    elif env is not None and env.build is not None:
        where = f"docker (builds {_shown(env.build / 'Dockerfile', matrix)})"
    else:
        where = "bwrap (runs on this system)"
    agent = f"{scenario.agent_timeout_s:g} s" if scenario.agent_timeout_s else "(agent.timeout_s)"
    checked = (
        f"verifier {verifier.timeout_s:g} s, reward {verifier.reward}"
        if verifier
        else "no verifier"
    )
    kind = task_format(scenario.task) if scenario.task is not None else None
    return (
        f"{scenario.id}: {kind or '?'}, needs sandbox: {where}; timeouts: agent {agent}, {checked}"
    )


def _shown(path: Path, matrix: Matrix) -> str:
    base = matrix.base_dir
    return (
        str(path.relative_to(base)) if base is not None and path.is_relative_to(base) else str(path)
    )


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
            f"for {len(judged)} of {plural(len(matrix.scenarios), 'scenario')}{repeats}{unset}"
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


def planning(matrix: Matrix, icc: float = PLANNING_ICC, said: str | None = None) -> list[str]:
    """The smallest pass-rate difference each question of a report can detect with this
    matrix's scenarios and runs at intra-scenario correlation `icc`, and what more
    scenarios or more runs would buy (docs/METRICS.md, "Planning"); `said`: where `icc`
    comes from, in words (default: assumed, --icc). Empty with a single tier: nothing
    is compared."""
    if len(matrix.tiers) < 2:
        return []
    scenarios = len(matrix.scenarios)
    runs = max(1, round(sum(matrix.runs_for(s) for s in matrix.scenarios) / scenarios))

    def level_of(g: int) -> tuple[int, float]:
        # With one scenario the report asks its run-level tests only (Fisher's and
        # Mann-Whitney's); with two or more, the tests across scenarios (two more).
        tests = (2 if g < 2 else 4) * (len(matrix.tiers) - 1)
        return tests, lone_test_alpha(matrix.report.alpha, matrix.report.correction, tests)

    def detect(g: int, m: int) -> tuple[str, str]:
        # One scenario's runs are draws of it alone: no correlation between scenarios.
        d = planned_detectable(g, m, icc if g >= 2 else 0.0, level_of(g)[1], PLANNING_POWER)
        return difference(d.these_scenarios), difference(d.like_these)

    tests, level = level_of(scenarios)
    these, like = detect(scenarios, runs)
    plan = planned_detectable(scenarios, runs, icc, level, PLANNING_POWER, PLANNING_RATE)
    per = " (the mean over scenarios)" if any(s.runs is not None for s in matrix.scenarios) else ""
    at = " at most (adaptive: each cell's max)" if matrix.adaptive is not None else ""
    head = (
        f"planning: the smallest difference in pass rate (in points: 0.10 is 10 points) each "
        f"question can detect with {PLANNING_POWER:.0%} power, {plural(scenarios, 'scenario')} "
        f"x {plural(runs, 'run')}{per}{at} a tier, pass rates near {PLANNING_RATE:g}, "
        f"two-sided at {level:.3g} "
    )
    more_scenarios, more_runs = detect(2 * scenarios, runs), detect(scenarios, 2 * runs)
    twice_the_scenarios = (
        f"  twice the scenarios ({2 * scenarios} x {runs}): {more_scenarios[0]} on these, "
        f"{more_scenarios[1]} like these"
    )
    if scenarios < 2:
        lines = [
            head
            + f"(the level one of the {plural(tests, 'run-level test')} must reach alone: with "
            "one scenario the report asks nothing across scenarios)",
            f"  on this scenario: {these}",
            "  on scenarios like these: not answered: it needs two scenarios or more",
            f"{twice_the_scenarios}; twice the runs ({scenarios} x {2 * runs}): "
            f"{more_runs[0]} on this scenario",
        ]
    else:
        lines = [
            head + f"(the level one of the {plural(tests, 'test')} across scenarios must reach "
            "alone), "
            f"intra-scenario correlation "
            f"{said or f'{icc:g} assumed (--icc; a report measures it)'}, design effect "
            f"{design_effect(runs, icc):.2f}",
            f"  on these scenarios: {these}",
            f"  on scenarios like these: {like}{_runs_limit(plan.like_these_limit, scenarios)}",
            f"{twice_the_scenarios}; twice the runs ({scenarios} x {2 * runs}): "
            f"{more_runs[0]} on these, {more_runs[1]} like these",
        ]
    if scenarios >= 2 and (plan.like_these or 0.0) > 1:
        lines.append(f"  {_what_would_detect(scenarios, runs, icc, level)}")
    if scenarios < MIN_SCENARIOS_TO_GENERALISE:
        lines.append(
            f"  {plural(scenarios, 'scenario')} {'is' if scenarios == 1 else 'are'} too few to "
            "generalise from: write "
            f"{MIN_SCENARIOS_TO_GENERALISE} or more to ask about scenarios like these"
        )
    if matrix.adaptive is not None:
        lines.append(
            "  adaptive runs stop each tier x scenario cell on its own pass rate, whose runs "
            "are independent draws of that scenario: more runs sharpen the answer on these "
            "scenarios; on scenarios like these only more scenarios do"
        )
    return lines


def _runs_limit(limit: float | None, scenarios: int) -> str:
    """What unlimited runs per scenario would detect on scenarios like these, where so
    many scenarios can promise it."""
    if limit is None:
        return ""
    alone = runs_alone(scenarios)
    if alone is not None:
        return f"; {alone}"
    return (
        f" (with unlimited runs per scenario still {difference(limit)}: below that only more "
        "scenarios go)"
    )


def _what_would_detect(scenarios: int, runs: int, icc: float, level: float) -> str:
    """When no difference is detectable on scenarios like these, what would detect one
    of PLANNING_TARGET: more scenarios at these runs, or (with scenarios enough to
    promise it) more runs at these scenarios."""
    more_runs = runs_to_detect(PLANNING_TARGET, scenarios, icc, level)
    by_runs = (
        f"more runs on {scenarios} scenarios alone cannot promise it"
        if runs_alone(scenarios) is not None
        else f"no number of runs on {scenarios} scenarios would"
        if more_runs is None
        else f"{plural(scenarios, 'scenario')} x {plural(more_runs, 'run')}"
    )
    return (
        f"to detect {points(PLANNING_TARGET)} on scenarios like these: "
        f"{scenarios_would(runs, icc, level)}; {by_runs}"
    )


def planning_so_far(matrix: Matrix, runs: Sequence[RunResult]) -> list[str]:
    """`planning` at the intra-scenario correlation the runs so far showed, as a report
    plans at it (core.analysis.comparison.runs_icc: the mean of each tier's implied one);
    with too few runs to measure it, at the one assumed, saying so (`resume`)."""
    counted = sum(r.status.counted for r in runs)
    icc = runs_icc(runs)
    if icc is None:
        return planning(
            matrix,
            PLANNING_ICC,
            f"{PLANNING_ICC:g} assumed: the {counted} counted runs so far are too few to "
            "measure it (it needs runs of a tier in two scenarios or more, more than one a "
            "scenario, not all alike)",
        )
    return planning(matrix, icc, f"{icc:.2f} observed in the {counted} counted runs so far")
