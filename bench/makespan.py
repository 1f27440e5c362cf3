"""Makespan: N runs of a sleeping agent on P worker processes x W slots, against the
ideal N * agent time / (P * W).

The agent is `sleep S` (I/O-bound, as real agent CLIs are); no gates.
Workers are started before the clock starts; the makespan runs from
submitting to the report being there, so the dispatch, every run's own
overhead, the tail and the aggregation all count.

    python bench/makespan.py [--runs 200] [--workers 4] [--processes 1] [--agent-s 1]
    python bench/makespan.py --runs 1000 --processes 4 --workers 8 --agent-s 2   # 62.5 s ideal
"""

from __future__ import annotations

import argparse
import time

from support import private_fleet, show, submit, wait_for_report, write_matrix


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--workers", type=int, default=4, help="slots per worker process")
    parser.add_argument("--processes", type=int, default=1, help="worker processes")
    parser.add_argument("--agent-s", type=float, default=1.0, help="the agent's sleep")
    args = parser.parse_args()
    runs, agent_s = args.runs, args.agent_s
    slots = args.workers * args.processes
    ideal = runs * agent_s / slots

    with private_fleet() as fleet:
        fleet.start_workers(args.workers, args.processes)
        matrix = write_matrix(fleet.folder, command=f"sleep {agent_s:g}", runs=runs)
        started, wall = time.monotonic(), time.time()
        exp_id = submit(fleet, matrix)
        finish = wait_for_report(fleet.store, exp_id, timeout_s=ideal * 3 + 120)
        results = fleet.store.results.all(exp_id)

    makespan = finish.report_at - started
    first_start = min(r.started_at or wall for r in results)
    last_end = max(r.ended_at or wall for r in results)
    show(
        f"makespan: {runs} runs of a {agent_s:g} s agent on {args.processes} worker "
        f"processes x {args.workers} slots",
        {
            "ideal (total agent time / slots)": f"{ideal:.2f} s",
            "makespan (submit to report)": f"{makespan:.2f} s",
            "first agent start to last agent end": f"{last_end - first_start:.2f} s",
            "submit to first agent start": f"{first_start - wall:.2f} s",
            "last agent end to report": f"{finish.report_at - started - (last_end - wall):.2f} s",
            "ratio (makespan / ideal)": f"{makespan / ideal:.3f}  (target <= 1.05)",
        },
    )


if __name__ == "__main__":
    main()
