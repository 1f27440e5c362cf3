"""Aggregation at scale: the report of a 100,000-run experiment, from its stored results.

2 tiers x 2 scenarios x 25,000 runs whose results (two gates each, passes,
costs, durations and token counts that vary from run to run) are stored the
way workers store them (Store.save_run), on a private Redis; then the chord
body's work, timed: read and parse every result, the report (statistics,
intervals, tests against the baseline, pass@k), stored. Its CPU time is shown
beside the wall time: on a shared machine it is the steadier figure.

    python bench/aggregate.py [--runs-per-cell 25000]
"""

from __future__ import annotations

import argparse
import random
import time

from support import private_fleet, show

from core.config import Matrix
from core.report_models import ExperimentInfo, ExperimentStatus
from core.results import GateResult, RunResult, RunSpec, RunStatus
from core.store import Store
from worker.tasks import finish_experiment

TIERS, SCENARIOS = ("T0", "T1"), ("s0", "s1")


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
    store.create_experiment(info, matrix)
    rng = random.Random(7)
    for tier in TIERS:
        for scenario in SCENARIOS:
            specs = []
            for i in range(per_cell):
                run_id = f"{exp_id}:{tier}:{scenario}:{i}"
                spec = RunSpec(experiment_id=exp_id, run_id=run_id, tier=tier,
                               scenario=scenario, run_index=i)  # fmt: skip
                specs.append(spec)
                store.save_run(_result(spec, rng))
            store.add_specs(exp_id, specs)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs-per-cell", type=int, default=25_000)
    args = parser.parse_args()
    total = args.runs_per_cell * len(TIERS) * len(SCENARIOS)
    with private_fleet() as fleet:
        began = time.perf_counter()
        exp_id = seed(fleet.store, args.runs_per_cell)
        seeded_s = time.perf_counter() - began

        wall, cpu = time.perf_counter(), time.process_time()
        runs = fleet.store.runs(exp_id)
        read_s, read_cpu = time.perf_counter() - wall, time.process_time() - cpu
        wall, cpu = time.perf_counter(), time.process_time()
        finish_experiment(fleet.store, exp_id)  # reads them again: the chord body's whole work
        aggregate_s, aggregate_cpu = time.perf_counter() - wall, time.process_time() - cpu
        report = fleet.store.report(exp_id)
        assert report is not None and report.experiment.completed_runs == total == len(runs)

    show(
        f"aggregate: {total:,} stored results (2 tiers x 2 scenarios)",
        {
            "results stored (Store.save_run each)": f"{seeded_s:.1f} s",
            "read and parse every result": f"{read_s:.2f} s  ({read_cpu:.2f} s CPU)",
            "aggregate (read, report, store)": (
                f"{aggregate_s:.2f} s  ({aggregate_cpu:.2f} s CPU)  (target < 10 s)"
            ),
            "ratio (time / target)": f"{aggregate_s / 10:.2f}",
        },
    )


if __name__ == "__main__":
    main()
