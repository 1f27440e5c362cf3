"""Where a cold one-run submit's time goes: the marks of core.timeline (the CLI's, the
worker's and the run's) on one clock, from the moment the `scheduler` process is
started to its exit, median of --repeat cold submits in fresh folders.

The workload is bench/peers.py's: an embedded `scheduler submit` of one run of a
no-op agent and two shell gates; the worker count is the default (one per CPU).
As a user's second command runs, forked by the warm process the first left
(scheduler.warm), or with --from-nothing as every command did before.
A mark that comes more than once in a submit (the task of the run, then the
aggregation's) is counted in its order.

    python bench/timeline.py [--repeat 5] [--from-nothing]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path

from quick import (
    FROM_NOTHING,
    SCHEDULER,
    cold_submit,
    compile_tree,
    load,
    start_warm,
    stop_warm,
)
from support import ROOT, require_bash

from core.timeline import ENV_TIMELINE


def one_submit(env: dict[str, str]) -> dict[str, float]:
    """Each mark's milliseconds since the process was started, and the exit's."""
    with tempfile.TemporaryDirectory(prefix="evalfleet-timeline-") as folder:
        marks = Path(folder) / "marks"
        timing = cold_submit(SCHEDULER, 1, env={ENV_TIMELINE: str(marks), **env})
        lines = [line.split(" ", 1) for line in marks.read_text().splitlines()]
    seen: Counter[str] = Counter()
    at: dict[str, float] = {}
    for stamp, what in sorted(lines, key=lambda line: float(line[0])):
        seen[what] += 1
        key = what if seen[what] == 1 else f"{what} ({seen[what]})"
        at[key] = (float(stamp) - timing.started_at) * 1000
    at["process exited (as its parent saw)"] = timing.wall_s * 1000
    return at


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--from-nothing",
        action="store_true",
        help="every submit a new interpreter (EVALFLEET_WARM=0), not forked warm",
    )
    args = parser.parse_args()
    require_bash()
    compile_tree(sys.executable, ROOT)
    env = FROM_NOTHING if args.from_nothing else {}
    stop_warm()
    if not args.from_nothing:
        start_warm()
    before = load()
    one_submit(env)  # warm-up: the page cache, the byte-compiled modules
    submits = [one_submit(env) for _ in range(args.repeat)]
    stop_warm()
    common = [key for key in submits[0] if all(key in s for s in submits)]
    medians = {key: statistics.median(s[key] for s in submits) for key in common}
    how = "from nothing" if args.from_nothing else "forked by the warm process"
    print(f"1-run submit {how}, median of {args.repeat}; {before} before, {load()} after")
    print(f"{'ms':>8} {'+ms':>7}  mark")
    last = 0.0
    for key, ms in sorted(medians.items(), key=lambda item: item[1]):
        print(f"{ms:8.0f} {ms - last:7.0f}  {key}")
        last = ms


if __name__ == "__main__":
    main()
