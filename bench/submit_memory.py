"""Submit at scale: peak memory and speed of a cold `scheduler submit` of many runs.

A 100,000-run experiment of no-op runs (1 tier x 1 scenario x 100,000) is
submitted to a private Redis as a user submits it to a shared broker
(`scheduler submit --broker URL`, no --wait, no workers): interpreter start
and imports included. Figures: the CLI's peak resident memory (its maximum
resident set, from wait4), wall time and runs per second, and the Redis bytes
the experiment's keys and queued messages take per run.

    python bench/submit_memory.py [--runs 100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time

from support import SCHEDULER, private_fleet, show, write_matrix

from fleet.sending import configured_queue


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with private_fleet() as fleet:
        env = {
            **os.environ,
            "EVALFLEET_BROKER_URL": fleet.url,
            "EVALFLEET_MAX_RUNS": str(max(args.runs, 1)),
        }
        matrix = write_matrix(fleet.folder, command="true", runs=args.runs)
        for attempt in range(args.repeat):
            fleet.store.redis.flushdb()
            before = int(fleet.store.redis.info("memory")["used_memory"])
            started = time.perf_counter()
            proc = subprocess.Popen([SCHEDULER, "submit", str(matrix)], env=env)
            # wait4 instead of proc.wait(): it also returns the child's peak memory.
            _, status, usage = os.wait4(proc.pid, 0)
            elapsed = time.perf_counter() - started
            if os.waitstatus_to_exitcode(status) != 0:
                raise SystemExit("scheduler submit failed")
            queued = fleet.store.redis.llen(configured_queue())
            grown = int(fleet.store.redis.info("memory")["used_memory"]) - before
            show(
                f"cold submit {attempt + 1}/{args.repeat}: {args.runs:,} runs, no workers",
                {
                    "peak memory, submitting CLI": f"{usage.ru_maxrss / 1024:.0f} MB",
                    "wall time (imports included)": f"{elapsed:.2f} s",
                    "runs per second": f"{args.runs / elapsed:,.0f}",
                    "runs queued": f"{queued:,}",
                    "Redis bytes per run": f"{grown / max(args.runs, 1):,.0f}",
                },
            )


if __name__ == "__main__":
    main()
