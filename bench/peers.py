"""evalfleet beside its peers on the quick-run workload, the issue's three comparisons
side by side in one run, each in pairs (A then B) on the same machine moment:

- a one-run experiment in a fresh folder, embedded (`scheduler submit`: Redis
  and a worker started, the run, the report, all stopped), against Inspect AI's
  one-sample eval of the same three subprocesses (bench/inspect_noop.py): as a
  user's second command runs, forked from the warm process the first left
  (scheduler.warm), and from nothing (EVALFLEET_WARM=0: a new interpreter
  importing everything, as every command did before);
- 1,000 such runs cold on 2 slots against a bare `xargs -P2` loop of the same
  three processes a run, and against Inspect AI's 1,000-sample eval of them with
  2 samples at once;
- `scheduler --help` against a minimal click CLI's own `--help`.

Each figure is a whole process (bench/quick.py); each comparison the median of
the pairs' ratios, with each pair's. The machine's load average is printed
before and after: on a busy machine the ratios move less than the times, but
they move. A command the warm process runs is not the caller's child: its CPU is
not in the caller's rusage, so CPU is compared from nothing only. The warm
processes of this user are stopped before and after (`scheduler warm --stop`),
and one is started before the first comparison for all that follow.

    pip install -e '.[bench]'    # Inspect AI
    python bench/peers.py [--pairs 3] [--runs 1000] [--workers 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from quick import (
    FROM_NOTHING,
    SCHEDULER,
    Pairs,
    Timing,
    clean_env,
    click_help,
    cold_submit,
    compile_tree,
    in_pairs,
    load,
    median,
    scheduler_help,
    shell_loop,
    start_warm,
    stop_warm,
    timed,
)
from support import ROOT, require_bash

INSPECT = Path(sys.executable).parent / "inspect"


def inspect_eval(samples: int, workers: int | None = None) -> Timing:
    """One `inspect eval` of bench/inspect_noop.py: `samples` samples, each the three
    subprocesses (`workers`: at most that many samples and subprocesses at once)."""
    with tempfile.TemporaryDirectory(prefix="inspect-cold-") as folder:
        command = [
            str(INSPECT), "eval", "bench/inspect_noop.py",  # Inspect takes it relative
            "--model", "mockllm/model", "--log-dir", folder, "--display", "none",
            "-T", f"samples={samples}",
        ]  # fmt: skip
        if workers is not None:
            command += ["--max-samples", str(workers), "--max-subprocesses", str(workers)]
        return timed(command, cwd=ROOT, env=clean_env())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    require_bash()
    if not INSPECT.exists():
        raise SystemExit("Inspect AI is not installed: pip install -e '.[bench]'")
    compile_tree(sys.executable, ROOT)
    before = load()
    runs, workers, pairs = args.runs, args.workers, args.pairs

    def both(p: Pairs, goal: str, b: str) -> str:
        return f"{median(p.a):.2f} s against {b} {median(p.b):.2f} s" + (
            f"  ({goal})" if goal else ""
        )

    print(f"evalfleet and its peers, median of {pairs} pairs; {before}", flush=True)
    # Each comparison printed as it ends: the 1,000-sample evals take minutes on a busy
    # machine.
    stop_warm()
    start_warm()
    cold = in_pairs(lambda: cold_submit(SCHEDULER, 1), lambda: inspect_eval(1), pairs)
    _said(
        {
            "1-run experiment (warm process)": both(cold, "goal < 0.5 s", "Inspect AI"),
            "  evalfleet / Inspect AI, wall": cold.line() + "  (goal <= 0.20)",
        }
    )
    anew = in_pairs(
        lambda: cold_submit(SCHEDULER, 1, env=FROM_NOTHING), lambda: inspect_eval(1), pairs
    )
    _said(
        {
            "1-run experiment from nothing": both(anew, "", "Inspect AI"),
            "  evalfleet / Inspect AI, wall": anew.line(),
            "  evalfleet / Inspect AI, CPU": anew.line("cpu_s"),
        }
    )
    helps = in_pairs(lambda: scheduler_help(SCHEDULER), click_help, pairs)
    _said(
        {
            "`scheduler --help`": both(helps, "goal < 0.15 s", "click's own"),
            "  scheduler / click, wall": helps.line(),
            "  scheduler / click, CPU": helps.line("cpu_s"),
        }
    )
    loop = in_pairs(
        lambda: cold_submit(SCHEDULER, runs, workers), lambda: shell_loop(runs, workers), pairs
    )
    _said(
        {
            f"{runs} runs on {workers} slots, cold": both(loop, "", f"xargs -P{workers}"),
            "  throughput against the loop": _inverse(loop) + "  (goal >= 0.75)",
        }
    )
    inspect = in_pairs(
        lambda: cold_submit(SCHEDULER, runs, workers),
        lambda: inspect_eval(runs, workers),
        pairs,
    )
    _said(
        {
            f"  against Inspect AI ({median(inspect.b):.2f} s)": _inverse(inspect)
            + "  (goal >= 4)",
        }
    )
    stop_warm()
    print(f"({load()} after)")


def _said(figures: dict[str, str]) -> None:
    width = 44
    for key, value in figures.items():
        print(f"  {key:<{width}}  {value}", flush=True)


def _inverse(p: Pairs) -> str:
    """B's time over A's, pair by pair: A's throughput as a multiple of B's."""
    return Pairs(p.b, p.a).line()


if __name__ == "__main__":
    main()
