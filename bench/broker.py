"""The broker's side of a run: Redis commands, CPU, network bytes and stored bytes per run,
measured on the Redis itself while many worker processes run sleeping agents.

P worker processes x W slots run N runs of `sleep S` (I/O-bound agents, as
real agent CLIs are) against a private Redis. Redis's own counters (INFO
commandstats, cpu, stats, memory) are read before the submit and after the
report, and over an idle stretch with the fleet up (heartbeats, events, the
workers' polling), so that per-run and per-worker costs come apart. From these
the run rate at which one Redis (one core) saturates follows:
docs/SCALE.md builds its capacity model on the figures printed here.

    python bench/broker.py [--runs 1000] [--processes 4] [--workers 16] [--agent-s 2]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from support import private_fleet, show, submit, wait_for_report, write_matrix

from core.store import Store

GATES = '[{type: command_succeeds, command: "true"}, {type: command_succeeds, command: "true"}]'


def counters(store: Store) -> dict[str, Any]:
    info = store.redis.info("all")
    calls = {k[len("cmdstat_") :]: v["calls"] for k, v in info.items() if k.startswith("cmdstat_")}
    return {
        "cpu_s": float(info["used_cpu_sys"]) + float(info["used_cpu_user"]),
        "commands": int(info["total_commands_processed"]),
        "net_in": int(info["total_net_input_bytes"]),
        "net_out": int(info["total_net_output_bytes"]),
        "memory": int(info["used_memory"]),
        "calls": calls,
        "at": time.monotonic(),
    }


def delta(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    calls = {
        name: n - before["calls"].get(name, 0)
        for name, n in after["calls"].items()
        if n - before["calls"].get(name, 0) > 0
    }
    out = {k: after[k] - before[k] for k in ("cpu_s", "commands", "net_in", "net_out", "memory")}
    return {**out, "calls": calls, "seconds": after["at"] - before["at"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--workers", type=int, default=16, help="slots per worker process")
    parser.add_argument("--agent-s", type=float, default=2.0)
    parser.add_argument("--idle-s", type=float, default=10.0, help="idle stretch measured")
    args = parser.parse_args()
    slots = args.processes * args.workers

    with private_fleet() as fleet:
        # Redis's own housekeeping (its timers run whether or not anyone is connected).
        alone_from = counters(fleet.store)
        time.sleep(args.idle_s)
        alone = delta(counters(fleet.store), alone_from)
        fleet.start_workers(args.workers, args.processes)
        time.sleep(2)  # past the workers' start-up sweeps
        idle_from = counters(fleet.store)
        time.sleep(args.idle_s)
        idle = delta(counters(fleet.store), idle_from)

        matrix = write_matrix(
            fleet.folder, command=f"sleep {args.agent_s:g}", runs=args.runs, gates=GATES
        )
        before = counters(fleet.store)
        exp_id = submit(fleet, matrix)
        # Polled as often as `scheduler submit` follows an experiment, not faster.
        timeout_s = args.runs * args.agent_s / slots * 3 + 300
        wait_for_report(fleet.store, exp_id, timeout_s=timeout_s, poll_s=0.25)
        busy = delta(counters(fleet.store), before)
        sizes = {
            k: int(fleet.store.redis.memory_usage(k, samples=0) or 0)
            for k in fleet.store.redis.keys(f"{fleet.store.keys.experiment(exp_id)}*")
        }
        evidence = sizes.pop(fleet.store.keys.evidence(exp_id), 0)
        stored = sum(sizes.values())

    n = args.runs
    # What the fleet costs anyway over the busy stretch, taken out of the runs' share.
    idle_cpu_per_s = idle["cpu_s"] / idle["seconds"]
    idle_cmds_per_s = idle["commands"] / idle["seconds"]
    alone_cpu_per_s = alone["cpu_s"] / alone["seconds"]
    worker_cpu_per_s = max(idle_cpu_per_s - alone_cpu_per_s, 0.0) / args.processes
    run_cpu = (busy["cpu_s"] - idle_cpu_per_s * busy["seconds"]) / n
    run_cmds = (busy["commands"] - idle_cmds_per_s * busy["seconds"]) / n
    top = sorted(busy["calls"].items(), key=lambda kv: -kv[1])[:8]
    show(
        f"broker: {n} runs of `sleep {args.agent_s:g}` + 2 gates on {args.processes} worker "
        f"processes x {args.workers} slots",
        {
            "elapsed (submit to report)": (
                f"{busy['seconds']:.1f} s  {n / busy['seconds']:.1f} runs/s"
            ),
            "Redis CPU per run": f"{run_cpu * 1000:.2f} ms  (idle fleet taken out)",
            "Redis commands per run": f"{run_cmds:.1f}",
            "  most called": ", ".join(f"{k} {v / n:.1f}" for k, v in top),
            "network bytes per run, in / out": (
                f"{busy['net_in'] / n:,.0f} / {busy['net_out'] / n:,.0f}"
            ),
            "stored bytes per run, without evidence": f"{stored / n:,.0f}",
            "  its evidence (a sleep's: a few lines)": f"{evidence / n:,.0f}",
            "used_memory growth per run": f"{busy['memory'] / n:,.0f}",
            "Redis alone, CPU": f"{alone_cpu_per_s * 1000:.1f} ms/s  (its own timers)",
            "idle fleet, Redis CPU": (
                f"{idle_cpu_per_s * 1000:.1f} ms/s  ({worker_cpu_per_s * 1000:.2f} ms/s per "
                "worker process, Redis alone taken out)"
            ),
            "idle fleet, commands": (
                f"{idle_cmds_per_s:.1f}/s  ({idle_cmds_per_s / args.processes:.1f} per process)"
            ),
            "one Redis core saturates at (runs/s)": f"{1 / run_cpu:,.0f}" if run_cpu > 0 else "-",
        },
    )


if __name__ == "__main__":
    main()
