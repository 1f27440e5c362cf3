"""The quick-run workload, as a user meets it, each figure a whole process timed from
outside: a cold embedded `scheduler submit` of a no-op agent and two shell gates
(three bash processes a run), `scheduler --help`, and the bare shell loop doing
the same three processes. bench/peers.py, bench/ab.py and bench/timeline.py
measure with these.

A process's time is its wall clock from start to exit and its CPU (user and
system) with everything it started and waited for: the embedded Redis, the
workers, the agents and gates. Two commands are compared in pairs, A then B,
after warm-up runs of each: the ratio of each pair is taken while the machine is
the same for both, and the median of the pairs quoted (a shared machine's speed
drifts by more than the differences measured).
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from support import bench_folder, write_matrix

AGENT = "true"
GATES = ("true", "true")
GATES_YAML = "[" + ", ".join(f'{{type: command_succeeds, command: "{g}"}}' for g in GATES) + "]"
# One run of the bare loop: a fresh folder, the three commands through bash, the folder gone.
SHELL_RUN = (
    'd=$(mktemp -d "$ROOT/run.XXXXXX") && cd "$d" && bash -c '
    + " && bash -c ".join(repr(c) for c in (AGENT, *GATES))
    + ' && cd / && rm -rf "$d"'
)
# The scheduler's console script next to this interpreter (the working tree's venv).
SCHEDULER = str(Path(sys.executable).parent / "scheduler")


@dataclass(frozen=True)
class Timing:
    wall_s: float
    cpu_s: float  # user + system of the process and every descendant it waited for
    started_at: float  # time.time() as it was started


def timed(
    command: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    check: Callable[[subprocess.CompletedProcess[str]], str | None] | None = None,
    stdin: str | None = None,
) -> Timing:
    """Run `command` to its end; `check` says what went wrong, if anything (then exit)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started_at, started = time.time(), time.perf_counter()
    done = subprocess.run(
        command, cwd=cwd, env=env, input=stdin, capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    problem = check(done) if check is not None else None
    if done.returncode != 0 and problem is None:
        problem = f"exit {done.returncode}"
    if problem is not None:
        raise SystemExit(f"{' '.join(command[:3])} ...: {problem}\n{done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timing(wall, cpu, started_at)


def clean_env(**more: str) -> dict[str, str]:
    """This environment without a broker, a test prefix or another checkout on the path:
    each side runs its own code in embedded mode. Nor CI: a user's machine keeps a warm
    process between commands (scheduler.warm), a CI job's steps do not."""
    dropped = (
        "EVALFLEET_BROKER_URL", "EVALFLEET_KEY_PREFIX", "EVALFLEET_QUEUE", "PYTHONPATH", "CI",
        "EVALFLEET_WARM",
    )  # fmt: skip
    return {**{k: v for k, v in os.environ.items() if k not in dropped}, **more}


# Every command started anew, importing everything: no warm process used or left.
FROM_NOTHING = {"EVALFLEET_WARM": "0"}


def stop_warm(scheduler: str = SCHEDULER) -> None:
    """This user's warm processes stopped: the next command runs from nothing."""
    subprocess.run(
        [scheduler, "warm", "--stop", "--all"], env=clean_env(), capture_output=True, check=False
    )


def start_warm(scheduler: str = SCHEDULER, timeout_s: float = 60) -> None:
    """A command run so that it leaves a warm process, then until that one answers (it
    imports for a second or so after the command ended)."""
    cold_submit(scheduler, 1)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        listed = subprocess.run(
            [scheduler, "warm"], env=clean_env(), capture_output=True, text=True, check=False
        )
        if "(this Python's)" in listed.stdout:  # answering, not starting
            return
        time.sleep(0.2)
    raise SystemExit(f"no warm process answered within {timeout_s:.0f} s")


def cold_submit(
    scheduler: str, runs: int, workers: int | None = None, env: Mapping[str, str] | None = None
) -> Timing:
    """A whole `scheduler submit` of `runs` quick runs in embedded mode, in a fresh
    folder: Redis and the workers started, the runs run, the report printed,
    everything stopped (`workers` None: the default, one per CPU, as a user runs it;
    `env`: more variables)."""
    with bench_folder("evalfleet-cold-") as folder:
        matrix = write_matrix(folder, command=AGENT, runs=runs, gates=GATES_YAML)
        command = [scheduler, "submit", str(matrix)]
        if workers is not None:
            command += ["--workers", str(workers)]

        def failed(done: subprocess.CompletedProcess[str]) -> str | None:
            ok = done.returncode == 0 and f"{runs}/{runs}" in done.stderr
            return None if ok else f"exit {done.returncode}, not {runs}/{runs} runs"

        return timed(
            command,
            cwd=folder,
            env=clean_env(EVALFLEET_WORKDIR=str(folder / "runs"), **(env or {})),
            check=failed,
        )


def scheduler_help(scheduler: str) -> Timing:
    return timed([scheduler, "--help"], env=clean_env())


# click's own group with one command, nothing imported but click: the floor of any
# click CLI's `--help` on this interpreter.
_CLICK_HELP = """
import click

@click.group()
def main():
    "A minimal click CLI."

@main.command()
def hello():
    "Say hello."

main(["--help"], prog_name="minimal")
"""


def click_help() -> Timing:
    return timed([sys.executable, "-c", _CLICK_HELP], env=clean_env())


def shell_loop(runs: int, workers: int) -> Timing:
    """`runs` runs of the three commands by `xargs -P workers`, each in a fresh folder."""
    with tempfile.TemporaryDirectory() as root:
        return timed(
            ["xargs", "-P", str(workers), "-I{}", "bash", "-c", SHELL_RUN],
            stdin="\n".join(str(i) for i in range(runs)) + "\n",
            env={**os.environ, "ROOT": root},
        )


def compile_tree(python: str, folder: Path) -> None:
    """Byte-compile a checkout's packages: where PYTHONDONTWRITEBYTECODE is set, each
    process of an editable install would compile its modules anew."""
    packages = [str(folder / p) for p in ("core", "worker", "scheduler", "evalfleet")]
    subprocess.run(
        [python, "-m", "compileall", "-q", "-j", "0", *[p for p in packages if Path(p).is_dir()]],
        check=True,
        stdout=subprocess.DEVNULL,
    )


@dataclass(frozen=True)
class Pairs:
    a: list[Timing]
    b: list[Timing]

    def ratios(self, what: str = "wall_s") -> list[float]:
        return [getattr(x, what) / getattr(y, what) for x, y in zip(self.a, self.b, strict=True)]

    def line(self, what: str = "wall_s") -> str:
        """The median ratio A/B and each pair's."""
        ratios = self.ratios(what)
        each = ", ".join(f"{r:.2f}" for r in ratios)
        return f"{statistics.median(ratios):.3f}  (pairs: {each})"


def in_pairs(
    a: Callable[[], Timing], b: Callable[[], Timing], pairs: int, warmup: int = 1
) -> Pairs:
    """A and B in turns, A B A B..., after `warmup` runs of each that are not counted."""
    for _ in range(warmup):
        a(), b()
    done = Pairs([], [])
    for _ in range(pairs):
        done.a.append(a())
        done.b.append(b())
    return done


def median(timings: Sequence[Timing], what: str = "wall_s") -> float:
    return float(statistics.median(getattr(t, what) for t in timings))


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} on {os.cpu_count()} CPUs"
