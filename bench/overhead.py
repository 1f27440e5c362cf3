"""Overhead: N runs of a no-op agent with two gates, evalfleet against a plain shell loop.

Each run, both ways: a fresh folder, the agent `echo ok > out.txt`, the gates
`test -f out.txt` and `cat out.txt` (output must contain "ok"), every command
through bash. The shell loop is `xargs -P W`; evalfleet runs them as Celery
tasks on W local worker processes against a private Redis, with everything a
run does besides (workspace, transcript, metrics, storing the result) and the
report at the end. Workers are started before the clock starts (warm); the
cold figure, `scheduler submit` in embedded mode from nothing, is shown too.
The two are measured in turns, `--repeat` times each, and compared by their
medians: on a shared machine one pair of measurements can be 20% apart.

    python bench/overhead.py [--runs 200] [--workers W] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from support import (
    SCHEDULER,
    Fleet,
    bench_folder,
    group_cpu_s,
    private_fleet,
    redis_cpu_s,
    require_bash,
    shell_loop,
    show,
    submit,
    wait_for_report,
    write_matrix,
)

AGENT = "echo ok > out.txt"
GATES = (
    '[{type: command_succeeds, command: "test -f out.txt"}, '
    '{type: command_output_contains, command: "cat out.txt", substring: ok}]'
)
SHELL_RUN = (
    'd=$(mktemp -d "$ROOT/run.XXXXXX") && cd "$d" '
    f"&& bash -c {AGENT!r} && bash -c 'test -f out.txt' && bash -c 'cat out.txt' | grep -q ok "
    '&& cd / && rm -rf "$d"'
)


@dataclass(frozen=True)
class Warm:
    seconds: float  # from submit to report
    agent_s: float  # the agent's mean time
    worker_cpu_s: float  # per run: the workers' processes with their agents and gates
    redis_cpu_s: float  # per run


def evalfleet_warm(fleet: Fleet, runs: int) -> Warm:
    """`runs` runs from submit to report on the fleet's (started) workers."""
    matrix = write_matrix(fleet.folder, command=AGENT, runs=runs, gates=GATES)
    assert fleet.workers is not None and fleet.workers.proc is not None
    group = fleet.workers.proc.pid  # its own session: the group of its pool processes
    cpu, redis_cpu = group_cpu_s(group), redis_cpu_s(fleet.store)
    started = time.monotonic()
    exp_id = submit(fleet, matrix)
    finish = wait_for_report(fleet.store, exp_id, timeout_s=runs * 5 + 60)
    cpu, redis_cpu = group_cpu_s(group) - cpu, redis_cpu_s(fleet.store) - redis_cpu
    results = fleet.store.results.all(exp_id)
    assert all(r.passed for r in results), "every run should pass both gates"
    agent_s = sum(r.duration_seconds for r in results) / len(results)
    return Warm(finish.report_at - started, agent_s, cpu / runs, redis_cpu / runs)


def evalfleet_cold(runs: int, workers: int) -> float:
    """`scheduler submit` in embedded mode: starts Redis and workers, runs, reports, stops."""
    with bench_folder() as folder:
        matrix = write_matrix(folder, command=AGENT, runs=runs, gates=GATES)
        env = {k: v for k, v in os.environ.items() if k != "EVALFLEET_BROKER_URL"}
        env["EVALFLEET_WORKDIR"] = str(Path(folder) / "runs")
        started = time.perf_counter()
        subprocess.run(
            [SCHEDULER, "submit", str(matrix), "--workers", str(workers), "--format", "json"],
            cwd=folder,
            env=env,
            check=True,
            capture_output=True,
        )
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    require_bash()
    runs, workers = args.runs, args.workers

    shell: list[float] = []
    turns: list[Warm] = []
    with private_fleet() as fleet:  # one Redis and one set of workers for every turn
        fleet.start_workers(workers)
        for _ in range(args.repeat):
            shell.append(shell_loop(SHELL_RUN, runs, workers))
            turns.append(evalfleet_warm(fleet, runs))
    cold_s = evalfleet_cold(runs, workers)
    warm = [t.seconds for t in turns]
    shell_s, warm_s = statistics.median(shell), statistics.median(warm)
    ratio = shell_s / warm_s  # = evalfleet throughput / shell throughput
    ratios = ", ".join(f"{s / w:.2f}" for s, w in zip(shell, warm, strict=True))
    show(
        f"overhead: {runs} runs (no-op agent, two gates) on {workers} workers, "
        f"median of {args.repeat}",
        {
            "shell loop (xargs -P)": f"{shell_s:.2f} s  {runs / shell_s:.1f} runs/s",
            "evalfleet, warm workers": f"{warm_s:.2f} s  {runs / warm_s:.1f} runs/s",
            "evalfleet, agent time per run (mean)": f"{_median_ms(t.agent_s for t in turns)}",
            "evalfleet, CPU per run: workers (with agents, gates)": _median_ms(
                t.worker_cpu_s for t in turns
            ),
            "evalfleet, CPU per run: Redis": _median_ms(t.redis_cpu_s for t in turns),
            "evalfleet, cold `scheduler submit`": f"{cold_s:.2f} s  {runs / cold_s:.1f} runs/s",
            "ratio in each turn": ratios,
            "ratio (evalfleet / shell throughput)": f"{ratio:.2f}  (target >= 0.85)",
        },
    )


def _median_ms(seconds: Iterable[float]) -> str:
    return f"{statistics.median(seconds) * 1000:.1f} ms"


if __name__ == "__main__":
    main()
