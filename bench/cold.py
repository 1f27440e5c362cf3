"""Cold starts: `scheduler submit` in embedded mode from nothing, against doing the same work
without evalfleet, measured in turns in one run.

- One run (a no-op agent and two shell gates: three bash processes) against
  Inspect AI's 1-sample eval of the same three subprocesses
  (`inspect eval bench/inspect_noop.py`, from the `bench` extra).
- N runs (default 1,000) of the same on W slots against a bare `xargs -P W`
  loop running the three commands per run in a fresh folder each.

Each evalfleet figure is a whole `scheduler submit` in a fresh folder: the
private Redis and the workers start, the runs run, the report is printed, and
everything started is stopped. Figures are medians of `--repeat` turns; the
ratios are what the targets are stated in.

    pip install -e '.[bench]'
    python bench/cold.py [--runs 1000] [--workers 2] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from support import ROOT, SCHEDULER, bench_folder, require_bash, shell_loop, show, write_matrix

AGENT = "true"
GATES = ("true", "true")
GATES_YAML = "[" + ", ".join(f'{{type: command_succeeds, command: "{g}"}}' for g in GATES) + "]"
SHELL_RUN = (
    'd=$(mktemp -d "$ROOT/run.XXXXXX") && cd "$d" && bash -c '
    + " && bash -c ".join(repr(c) for c in (AGENT, *GATES))
    + ' && cd / && rm -rf "$d"'
)
INSPECT = Path(os.environ.get("VIRTUAL_ENV", Path(SCHEDULER).parent.parent)) / "bin" / "inspect"


def evalfleet_cold(runs: int, workers: int | None) -> float:
    """Seconds of one `scheduler submit` in embedded mode, in a fresh folder (`workers`
    None: the default, one per CPU, as a user runs it)."""
    with bench_folder("evalfleet-cold-") as folder:
        matrix = write_matrix(folder, command=AGENT, runs=runs, gates=GATES_YAML)
        env = {k: v for k, v in os.environ.items() if k != "EVALFLEET_BROKER_URL"}
        env["EVALFLEET_WORKDIR"] = str(Path(folder) / "runs")
        command = [SCHEDULER, "submit", str(matrix)]
        if workers is not None:
            command += ["--workers", str(workers)]
        started = time.perf_counter()
        done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
        elapsed = time.perf_counter() - started
        if done.returncode != 0 or f"{runs}/{runs}" not in done.stderr:
            raise SystemExit(f"scheduler submit failed: {done.stderr[-2000:]}")
        return elapsed


def inspect_cold() -> float:
    """Seconds of one `inspect eval` of the same three subprocesses, one sample."""
    with tempfile.TemporaryDirectory(prefix="inspect-cold-") as folder:
        command = [
            str(INSPECT), "eval", "bench/inspect_noop.py",  # Inspect takes it relative
            "--model", "mockllm/model", "--log-dir", folder, "--display", "none",
        ]  # fmt: skip
        started = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        elapsed = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"inspect eval failed: {done.stderr[-2000:]}")
        return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    require_bash()
    if not INSPECT.exists() and shutil.which("inspect") is None:
        raise SystemExit("Inspect AI is not installed: pip install -e '.[bench]'")

    one, inspect, many, loop = [], [], [], []
    for _ in range(args.repeat):  # in turns, so that both meet the same machine
        one.append(evalfleet_cold(1, None))
        inspect.append(inspect_cold())
        many.append(evalfleet_cold(args.runs, args.workers))
        loop.append(shell_loop(SHELL_RUN, args.runs, args.workers))
    one_s, inspect_s = statistics.median(one), statistics.median(inspect)
    many_s, loop_s = statistics.median(many), statistics.median(loop)
    turns = ", ".join(f"{a / b:.2f}" for a, b in zip(one, inspect, strict=True))
    many_turns = ", ".join(f"{b / a:.2f}" for a, b in zip(many, loop, strict=True))
    show(
        f"cold starts, median of {args.repeat} turns",
        {
            "evalfleet, 1 run (`scheduler submit`)": f"{one_s:.2f} s  (target < 2.0 s)",
            "Inspect AI, 1 sample (`inspect eval`)": f"{inspect_s:.2f} s",
            "ratio in each turn": turns,
            "ratio (evalfleet / Inspect AI time)": f"{one_s / inspect_s:.2f}  (target <= 0.6)",
            f"evalfleet, {args.runs} runs on {args.workers} slots": (
                f"{many_s:.2f} s  {args.runs / many_s:.1f} runs/s"
            ),
            f"shell loop (xargs -P {args.workers})": (
                f"{loop_s:.2f} s  {args.runs / loop_s:.1f} runs/s"
            ),
            "throughput ratio in each turn": many_turns,
            "ratio (evalfleet / shell throughput)": f"{loop_s / many_s:.2f}  (target >= 0.5)",
        },
    )


if __name__ == "__main__":
    main()
