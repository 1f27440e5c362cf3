"""A fixed reference: the quick-run benchmarks of this working tree against an older
commit's, in turns in one run, so that a regression against any past revision
shows as a ratio however busy the machine.

REV is installed once, in a venv of its own with this venv's third-party
packages, from a `git worktree` of it, both kept under
~/.cache/evalfleet-bench/<commit>-<packages> (XDG_CACHE_HOME) for the next
call. Each benchmark then runs the two in pairs, this tree first (A) and REV
(B), after a warm-up run of each, and prints each pair's ratio A/B of wall and
CPU seconds and their medians: below 1 this tree is faster.

- cold: a cold one-run embedded `scheduler submit` (no-op agent, two shell gates);
- help: `scheduler --help`;
- thousand: 1,000 such runs, cold, on 2 slots.

Both sides start every command from nothing (EVALFLEET_WARM=0; a revision before
the warm process knows none): what is compared is the code's own cost, wall and
CPU alike. bench/peers.py shows what a user gets, with the warm process.

    python bench/ab.py 0f57aac [--pairs 5] [--only cold|help|thousand] [--runs 1000]
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path

from quick import (
    FROM_NOTHING,
    SCHEDULER,
    Pairs,
    Timing,
    cold_submit,
    compile_tree,
    in_pairs,
    load,
    median,
)
from quick import scheduler_help as help_of
from support import ROOT, require_bash, show

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "evalfleet-bench"


def installed(revision: str) -> Path:
    """REV's `scheduler` console script, installed (once) in a venv of its own with the
    same third-party packages as this one: an optional package that one of them imports
    when present (redis-py imports OpenTelemetry if installed, as Inspect AI's
    dependencies install it) would otherwise count as a difference of the code."""
    commit = _git("rev-parse", "--verify", f"{revision}^{{commit}}")
    packages = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--exclude-editable"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    digest = hashlib.sha256(packages.encode()).hexdigest()[:10]
    home = CACHE / f"{commit[:12]}-{digest}"
    src, venv, ready = home / "src", home / "venv", home / "ready"
    scheduler = venv / "bin" / "scheduler"
    if ready.exists() and scheduler.exists():
        return scheduler
    print(f"installing {revision} ({commit[:10]}) under {home} (once; a few minutes)...")
    if src.exists():  # a half-done install of an earlier call
        _git("worktree", "remove", "--force", str(src))
    shutil.rmtree(home, ignore_errors=True)
    _git("worktree", "prune")
    home.mkdir(parents=True)
    _git("worktree", "add", "--detach", str(src), commit)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    (home / "packages.txt").write_text(packages)
    # This venv's packages, copied (pip would take many minutes to install them again),
    # without this checkout's own editable install; then REV on them. Not editable: as
    # a user installs it, byte-compiled by pip, whatever REV's pyproject says.
    ours = Path(sysconfig.get_paths()["purelib"])
    theirs = venv / ours.relative_to(Path(sys.prefix))
    shutil.copytree(
        ours,
        theirs,
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns("__editable__.evalfleet*", "evalfleet-*.dist-info"),
    )
    pip = [str(venv / "bin" / "pip"), "install", "-q"]
    subprocess.run([*pip, "-c", str(home / "packages.txt"), str(src)], check=True)
    ready.write_text(commit + "\n")
    return scheduler


def _git(*args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(ROOT), *args], check=False, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("revision", metavar="REV", help="the older commit (any git revision)")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--only", choices=("cold", "help", "thousand"), action="append")
    parser.add_argument("--runs", type=int, default=1000, help="of the thousand")
    parser.add_argument("--workers", type=int, default=2, help="of the thousand")
    args = parser.parse_args()
    require_bash()
    theirs = str(installed(args.revision))
    compile_tree(sys.executable, ROOT)
    benchmarks: dict[str, Callable[[str], Timing]] = {
        "cold": lambda scheduler: cold_submit(scheduler, 1, env=FROM_NOTHING),
        "help": help_of,
        "thousand": lambda scheduler: cold_submit(
            scheduler, args.runs, args.workers, env=FROM_NOTHING
        ),
    }
    chosen = args.only or list(benchmarks)
    before = load()
    figures: dict[str, str] = {}
    for name in chosen:
        run = benchmarks[name]
        pairs: Pairs = in_pairs(
            functools.partial(run, SCHEDULER), functools.partial(run, theirs), args.pairs
        )
        figures[name] = (
            f"this tree {median(pairs.a):.3f} s wall, {median(pairs.a, 'cpu_s'):.3f} s CPU; "
            f"{args.revision} {median(pairs.b):.3f} s wall, {median(pairs.b, 'cpu_s'):.3f} s CPU"
        )
        figures[f"  {name}: this tree / {args.revision}, wall"] = pairs.line()
        figures[f"  {name}: this tree / {args.revision}, CPU"] = pairs.line("cpu_s")
    show(
        f"this tree against {args.revision}, {args.pairs} pairs each; {before} before, "
        f"{load()} after",
        figures,
    )


if __name__ == "__main__":
    main()
