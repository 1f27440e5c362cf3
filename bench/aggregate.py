"""Aggregation at scale: the report of a 100,000-run experiment, from its stored results.

2 tiers x 2 scenarios x 25,000 runs whose results (two gates each, passes,
costs, durations and token counts that vary from run to run) are stored the
way workers store them (Results.save), on a private Redis; then the chord
body's work (fleet.finish.finish_experiment), timed: read and parse every
result, the report (statistics, intervals, tests against the baseline,
pass@k), stored. Its CPU time is shown beside the wall time: on a shared
machine it is the steadier figure.

With --before REV the same work is also done by the code at REV (a git
revision, exported with `git archive`), each in a fresh process, in turns
(before, after, before, after...) on the same stored results, so the ratio is
measured in one run; each turn's stored report must be the same bytes. REV's
code must read the results as this checkout stores them: a revision older than
the stored form (2e7af76 is the last before issue 16's matrix field) cannot.

    python bench/aggregate.py [--runs-per-cell 25000] [--repeat 3] [--before REV]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from support import ROOT, Fleet, private_fleet, show

from core.broker_url import redis_py_url
from core.matrix import Matrix
from core.results.report import ExperimentInfo, ExperimentStatus
from core.results.run import GateResult, RunResult, RunSpec, RunStatus
from core.store import Store

TIERS, SCENARIOS = ("T0", "T1"), ("s0", "s1")
TARGET_S = 10.0

# One turn, in a process of its own with the code under test first on sys.path:
# read every result (Results.all, its figure), then the chord body's whole work.
# The code at --before has no store.results: its Store reads them as store.runs.
_TURN = """
import json, sys, time
import core
from core.store import Store
try:
    from fleet.finish import finish_experiment
except ImportError:  # the code at --before, where it was the worker's
    from worker.tasks import finish_experiment

store = Store.from_url(sys.argv[1])
wall, cpu = time.perf_counter(), time.process_time()
read_all = store.results.all if hasattr(store, "results") else store.runs
runs = read_all(sys.argv[2])
read = time.perf_counter() - wall, time.process_time() - cpu
del runs
wall, cpu = time.perf_counter(), time.process_time()
finish_experiment(store, sys.argv[2])
finish = time.perf_counter() - wall, time.process_time() - cpu
print(json.dumps({"code": core.__file__, "read": read, "finish": finish}))
"""


def seed(store: Store, per_cell: int) -> str:
    matrix = Matrix.model_validate(
        {
            "name": "aggregate",
            "runs_per_tier": per_cell,
            "agent": {"command": "true"},
            "tiers": [{"id": t} for t in TIERS],
            "scenarios": [{"id": s, "prompt": "go"} for s in SCENARIOS],
        }
    )
    exp_id = f"aggregate-{int(time.time())}"
    total = per_cell * len(TIERS) * len(SCENARIOS)
    info = ExperimentInfo(
        id=exp_id, name="aggregate", status=ExperimentStatus.running, total_runs=total,
        created_at=time.time(),
    )  # fmt: skip
    store.experiments.create(info, matrix)
    rng = random.Random(7)
    for tier in TIERS:
        for scenario in SCENARIOS:
            specs = []
            for i in range(per_cell):
                run_id = f"{exp_id}:{tier}:{scenario}:{i}"
                spec = RunSpec(experiment_id=exp_id, run_id=run_id, tier=tier,
                               scenario=scenario, run_index=i)  # fmt: skip
                specs.append(spec)
                store.results.save(_result(spec, rng))
            store.specs.add(exp_id, specs)
    return exp_id


def _result(spec: RunSpec, rng: random.Random) -> RunResult:
    gates = [rng.random() < 0.8, rng.random() < 0.7]
    passed = all(gates)
    started = time.time()
    duration = rng.uniform(5, 60)
    tokens_in, tokens_out = rng.randint(1_000, 50_000), rng.randint(100, 5_000)
    cost = (tokens_in * 3 + tokens_out * 15) / 1e6
    return RunResult(
        experiment_id=spec.experiment_id, run_id=spec.run_id, tier=spec.tier,
        scenario=spec.scenario, run_index=spec.run_index, status=RunStatus.completed,
        passed=passed, pass_rate=float(passed), impl_rate=sum(gates) / 2,
        composite_score=(float(passed) + sum(gates) / 2) / 2, cost_usd=cost,
        cost_of_pass=cost if passed else None, duration_seconds=duration,
        started_at=started, ended_at=started + duration, exit_code=0, model="m",
        input_tokens=tokens_in, output_tokens=tokens_out,
        gates=[GateResult(gate_type="command_succeeds", passed=g, message="exit code 0")
               for g in gates],
        gates_passed=sum(gates), gates_total=2, transcript_format="events-jsonl",
    )  # fmt: skip


@contextlib.contextmanager
def code_at(revision: str) -> Iterator[Path]:
    """The repository's code at `revision`, in a temporary folder."""
    with tempfile.TemporaryDirectory(prefix="evalfleet-before-") as folder:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", revision], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
        yield Path(folder)


def turn(fleet: Fleet, exp_id: str, code: Path) -> dict[str, tuple[float, float]]:
    """(wall, CPU) seconds of reading every result and of finish_experiment, by `code`."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    # redis-py's own form of the embedded Redis's socket URL: older code reads no other.
    url = redis_py_url(fleet.url)
    done = subprocess.run(
        [sys.executable, "-c", _TURN, url, exp_id], env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(
            f"the code at {code} could not aggregate this store's results:\n"
            f"{done.stderr[-1500:]}\n"
            "its store may be older than the results' form: --before a later revision, "
            "or --before none"
        )
    figures = json.loads(done.stdout.splitlines()[-1])
    assert Path(figures["code"]).is_relative_to(code), f"{figures['code']} is not from {code}"
    return {"read": tuple(figures["read"]), "finish": tuple(figures["finish"])}


def stored_report(fleet: Fleet, exp_id: str) -> str:
    raw = fleet.store.redis.get(fleet.store.keys.report(exp_id))
    assert raw is not None
    return hashlib.sha256(raw.encode()).hexdigest()


def _median(turns: list[dict[str, tuple[float, float]]], what: str, i: int) -> float:
    return statistics.median(t[what][i] for t in turns)


def _seconds(values: Iterable[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs-per-cell", type=int, default=25_000)
    parser.add_argument("--repeat", type=int, default=3, help="turns of each side")
    # No revision by default: older code reads only the stored results of its own days
    # (4e1dae1, once the default, no longer reads today's matrix), and what it cannot
    # read is said, with what to do, not a traceback.
    parser.add_argument(
        "--before", default="none", help="a git revision to compare with, or none (default)"
    )
    args = parser.parse_args()
    total = args.runs_per_cell * len(TIERS) * len(SCENARIOS)
    sides = ["after"] if args.before == "none" else ["before", "after"]
    turns: dict[str, list[dict[str, tuple[float, float]]]] = {side: [] for side in sides}
    reports = set()
    with contextlib.ExitStack() as stack:
        code = {"after": ROOT}
        if args.before != "none":
            code["before"] = stack.enter_context(code_at(args.before))
        fleet = stack.enter_context(private_fleet())
        began = time.perf_counter()
        exp_id = seed(fleet.store, args.runs_per_cell)
        seeded_s = time.perf_counter() - began
        for _ in range(args.repeat):
            for side in sides:
                turns[side].append(turn(fleet, exp_id, code[side]))
                reports.add(stored_report(fleet, exp_id))
        report = fleet.store.reports.get(exp_id)
        assert report is not None and report.experiment.completed_runs == total

    figures = {"results stored (Results.save each)": f"{seeded_s:.1f} s"}
    for side in sides:
        done = turns[side]
        figures[f"{side}: read and parse every result (Results.all)"] = (
            f"{_median(done, 'read', 0):.2f} s  ({_median(done, 'read', 1):.2f} s CPU)"
        )
        figures[f"{side}: aggregate (read, report, store)"] = (
            f"{_median(done, 'finish', 0):.2f} s  ({_median(done, 'finish', 1):.2f} s CPU);"
            f" turns {_seconds(t['finish'][0] for t in done)}"
        )
    if "before" in turns:
        ratios = [a["finish"][0] / b["finish"][0] for b, a in zip(*turns.values(), strict=True)]
        figures["after / before (each turn's pair)"] = (
            f"{statistics.median(ratios):.2f}  (turns {_seconds(ratios)})"
        )
        figures["report the same bytes before and after"] = "yes" if len(reports) == 1 else "NO"
    after = _median(turns["after"], "finish", 0)
    figures[f"after against the {TARGET_S:.0f} s target"] = (
        f"{after:.2f} s: {after / TARGET_S:.2f} of it ({'met' if after < TARGET_S else 'not met'})"
    )
    show(
        f"aggregate: {total:,} stored results (2 tiers x 2 scenarios), {args.repeat} turns"
        + ("" if args.before == "none" else f", before = {args.before}"),
        figures,
    )


if __name__ == "__main__":
    main()
