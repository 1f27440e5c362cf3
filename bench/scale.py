"""Scale: plan, submit, run and aggregate a 10,000-run experiment of no-op runs.

2 tiers x 2 scenarios x 2,500 runs of the agent `true`, no gates, on a
private Redis. Figures:

- time to submit: `scheduler submit --broker URL` as a user runs it
  (interpreter start and imports included; shown apart), before any worker
  starts, so nothing competes with it for the CPU;
- time to aggregate: reading the 10,000 results, the report (statistics,
  intervals, tests, pass@k) and storing it, as the chord body does, timed in
  this process; and, as seen from outside, last result counted to report there;
- peak memory: the submitting CLI (its maximum resident set) and the worker
  (main process and pool processes, sampled);
- Redis bytes per run: growth of the private Redis' used memory over the
  experiment, and what the experiment's own keys hold, per run.

    python bench/scale.py [--runs-per-cell 2500] [--workers W]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time

from support import (
    SCHEDULER,
    PeakMemory,
    private_fleet,
    show,
    wait_for_report,
    write_matrix,
)

from core.analysis.aggregate import ReportSettings, aggregate
from core.store import Store
from fleet.finish import finish_experiment


def run_cli(args: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    """Wall seconds, peak resident KB and stdout of a `scheduler` command."""
    started = time.perf_counter()
    proc = subprocess.Popen([SCHEDULER, *args], env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    # wait4 instead of proc.wait(): it also returns the child's peak memory.
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"scheduler {' '.join(args)} failed")
    return elapsed, usage.ru_maxrss, out


def keys_bytes(store: Store, pattern: str) -> int:
    keys = store.redis.keys(pattern)
    return sum(int(store.redis.memory_usage(key, samples=0) or 0) for key in keys)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs-per-cell", type=int, default=2500, help="2 tiers x 2 scenarios")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    total = 4 * args.runs_per_cell

    with private_fleet() as fleet:
        env = {**os.environ, "EVALFLEET_BROKER_URL": fleet.url}
        matrix = write_matrix(
            fleet.folder, command="true", runs=args.runs_per_cell, tiers=2, scenarios=2
        )
        startup_s, _, _ = run_cli(["--help"], env)
        memory_before = int(fleet.store.redis.info("memory")["used_memory"])
        submit_s, submit_kb, out = run_cli(["submit", str(matrix)], env)
        exp_id = out.strip().splitlines()[-1]
        queued = fleet.store.redis.llen("evalfleet")

        started = time.monotonic()
        workers = fleet.start_workers(args.workers)
        assert workers.proc is not None
        sampler = PeakMemory(workers.proc.pid)
        sampler.start()
        finish = wait_for_report(fleet.store, exp_id, timeout_s=total * 0.5 + 600)
        sampler.stop()
        run_s = finish.runs_done_at - started
        grown = int(fleet.store.redis.info("memory")["used_memory"]) - memory_before
        ours = keys_bytes(fleet.store, f"{fleet.store.keys.experiment(exp_id)}*")
        celery_keys = len(fleet.store.redis.keys("celery-task-meta-*"))
        celery = keys_bytes(fleet.store, "celery-task-meta-*")
        chord_s = finish.report_at - finish.runs_done_at

        # The chord body's work again (it is idempotent), timed here.
        began = time.perf_counter()
        finish_experiment(fleet.store, exp_id)
        aggregate_s = time.perf_counter() - began
        runs = fleet.store.results.all(exp_id)
        report = fleet.store.reports.get(exp_id)
        assert report is not None and len(runs) == total
        matrix_model = fleet.store.experiments.matrix(exp_id)
        began = time.perf_counter()
        aggregate(
            report.experiment, runs, ReportSettings(baseline="T0", scoring=matrix_model.scoring)
        )
        pure_s = time.perf_counter() - began

    show(
        f"scale: {total} no-op runs (2 tiers x 2 scenarios), {args.workers} workers",
        {
            "submit (`scheduler submit --broker`)": f"{submit_s:.2f} s  (target < 5 s)",
            "  of which interpreter + imports": f"{startup_s:.2f} s (`scheduler --help`)",
            "  messages queued": f"{queued}",
            "aggregate (read results, report, store)": f"{aggregate_s:.2f} s  (target < 2 s)",
            "  of which the pure aggregation": f"{pure_s:.2f} s",
            "  last result counted -> report there": f"{chord_s:.2f} s",
            "runs executed": f"{run_s:.1f} s  {total / run_s:.0f} runs/s",
            "peak memory, submitting CLI": f"{submit_kb / 1024:.0f} MB",
            "peak memory, worker (all processes)": f"{sampler.peak_total_kb / 1024:.0f} MB",
            "peak memory, largest worker process": f"{sampler.peak_process_kb / 1024:.0f} MB",
            "Redis bytes per run (used_memory growth)": f"{grown / total:.0f}",
            "  experiment keys (ours, no TTL)": f"{ours / total:.0f}",
            "  Celery task states (expire)": f"{celery / total:.0f} in {celery_keys} keys",
            "ratios": f"submit {submit_s / 5:.2f} of its budget, aggregate {aggregate_s / 2:.2f}",
        },
    )


if __name__ == "__main__":
    main()
