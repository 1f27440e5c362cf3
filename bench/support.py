"""What the benchmarks share: a private fleet, matrices, submitting, waiting, measuring.

Every benchmark runs against its own Redis (the embedded mode's redis-server,
under a temporary folder) and its own local workers, so it neither disturbs
nor is disturbed by anything else using the machine's Redis, and cleaning up
is stopping what it started.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from core.files.bundle import collect
from core.matrix import load_matrix
from core.store import Store
from fleet.app import fleet_app
from fleet.sending import configured_queue
from scheduler.dispatch import start
from scheduler.embedded import EmbeddedRedis, LocalWorkers
from scheduler.plan import new_experiment_id

ROOT = Path(__file__).resolve().parent.parent
# The scheduler's console script next to this interpreter (the project's venv).
SCHEDULER = str(Path(sys.executable).parent / "scheduler")


@dataclass
class Fleet:
    folder: Path
    redis: EmbeddedRedis
    store: Store
    pools: list[LocalWorkers] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.redis.url

    @property
    def workers(self) -> LocalWorkers | None:
        return self.pools[0] if self.pools else None

    def start_workers(self, concurrency: int, processes: int = 1) -> LocalWorkers:
        """`processes` local workers of `concurrency` slots each on the default queue,
        returned (the first) once Celery says every one is ready."""
        for i in range(processes):
            workers = LocalWorkers(self.redis, concurrency, [configured_queue()], name=f"bench{i}")
            workers.log_path = self.folder / f"worker{i}.log"
            workers.start()
            self.pools.append(workers)
        deadline = time.monotonic() + 120
        for workers in self.pools:
            while "ready." not in _read(workers.log_path):
                if not workers.alive() or time.monotonic() > deadline:
                    raise RuntimeError(f"workers did not start: {_read(workers.log_path)[-2000:]}")
                time.sleep(0.1)
        return self.pools[0]

    def stop_workers(self) -> None:
        for workers in self.pools:
            workers.stop()
        self.pools.clear()


@contextlib.contextmanager
def bench_folder(prefix: str = "evalfleet-bench-") -> Iterator[Path]:
    """A temporary folder that run users may pass: as root, a worker runs each agent as a
    user of its own (worker.confinement), which reaches its run's files by their paths."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        os.chmod(tmp, 0o711)
        yield Path(tmp)


@contextlib.contextmanager
def private_fleet() -> Iterator[Fleet]:
    """A private Redis under a temporary folder (the working directory meanwhile, as the
    embedded mode's state lives in ./.evalfleet); workers are started on demand."""
    home = os.getcwd()
    with bench_folder() as folder:
        os.environ["EVALFLEET_WORKDIR"] = str(folder / "runs")
        redis_server = EmbeddedRedis(folder / ".evalfleet")
        os.chdir(folder)
        try:
            redis_server.start()
            fleet = Fleet(folder, redis_server, Store.from_url(redis_server.url))
            try:
                yield fleet
            finally:
                fleet.stop_workers()
        finally:
            redis_server.stop()
            os.chdir(home)


def write_matrix(
    folder: Path,
    *,
    command: str,
    runs: int,
    tiers: int = 1,
    scenarios: int = 1,
    gates: str = "[]",
    name: str = "bench",
    extra: str = "",
) -> Path:
    """`extra`: more top-level YAML (say `evidence: {max_item_kb: 512}`)."""
    path = folder / f"{name}.yaml"
    tier_list = ", ".join(f"{{id: T{i}}}" for i in range(tiers))
    scenario_list = "\n".join(
        f"  - {{id: s{i}, prompt: go, evaluation: {{gates: {gates}}}}}" for i in range(scenarios)
    )
    path.write_text(
        f"name: {name}\n"
        f"runs_per_tier: {runs}\n"
        f"agent: {{kind: command, command: {command!r}, timeout_s: 120}}\n"
        f"tiers: [{tier_list}]\n"
        f"scenarios:\n{scenario_list}\n"
        f"{extra}\n"
    )
    return path


def submit(fleet: Fleet, matrix_file: Path) -> str:
    """What `scheduler submit --broker URL` does, in this process: plan, store, send."""
    matrix = load_matrix(matrix_file)
    exp_id = new_experiment_id(matrix)
    start(fleet_app(fleet.url), fleet.store, matrix, exp_id, collect(matrix))
    return exp_id


@dataclass(frozen=True)
class Finish:
    runs_done_at: float  # time.monotonic() when the last run's result was counted
    report_at: float  # time.monotonic() when the report was there


def wait_for_report(store: Store, exp_id: str, timeout_s: float, poll_s: float = 0.02) -> Finish:
    deadline = time.monotonic() + timeout_s
    done_at = None
    while time.monotonic() < deadline:
        info = store.experiments.info(exp_id)
        if done_at is None and info.completed_runs >= info.total_runs:
            done_at = time.monotonic()
        if done_at is not None and store.reports.get(exp_id) is not None:
            return Finish(done_at, time.monotonic())
        time.sleep(poll_s)
    raise TimeoutError(f"experiment {exp_id} has no report after {timeout_s:.0f} s")


class PeakMemory(threading.Thread):
    """Samples the resident memory of a process group (a worker and its pool processes)."""

    def __init__(self, group: int, interval_s: float = 0.2):
        super().__init__(daemon=True)
        self.group, self.interval_s = group, interval_s
        self.peak_total_kb = 0
        self.peak_process_kb = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self.interval_s):
            sizes = [_rss_kb(pid) for pid in _group_members(self.group)]
            self.peak_total_kb = max(self.peak_total_kb, sum(sizes))
            self.peak_process_kb = max(self.peak_process_kb, *sizes, 0)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def group_cpu_s(group: int) -> float:
    """CPU seconds of a process group's live members, with the children each has reaped
    (a worker's pool processes count their agents' and gates' bash processes)."""
    ticks = 0
    for pid in _group_members(group):
        with contextlib.suppress(OSError, IndexError, ValueError):
            # After the command name: utime, stime, cutime, cstime are fields 11-14.
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += sum(int(f) for f in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def redis_cpu_s(store: Store) -> float:
    info = store.redis.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def _group_members(group: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                # Fields after the command name (which may hold spaces): state, ppid, pgrp.
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[2]) == group:
                    members.append(int(entry.name))
    return members


def _rss_kb(pid: int) -> int:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def show(title: str, figures: dict[str, str]) -> None:
    print(f"\n{title}")
    width = max(len(k) for k in figures)
    for key, value in figures.items():
        print(f"  {key:<{width}}  {value}")


def require_bash() -> None:
    if shutil.which("bash") is None or shutil.which("xargs") is None:
        sys.exit("these benchmarks need bash and xargs on PATH")


def shell_loop(script: str, runs: int, workers: int) -> float:
    """Seconds for `runs` runs of a bash `script` by `xargs -P workers`: the bare loop
    evalfleet is measured against ($ROOT: a fresh folder for the runs' own)."""
    with tempfile.TemporaryDirectory() as root:
        started = time.perf_counter()
        subprocess.run(
            ["xargs", "-P", str(workers), "-I{}", "bash", "-c", script],
            input="\n".join(str(i) for i in range(runs)) + "\n",
            text=True,
            check=True,
            env={**os.environ, "ROOT": root},
        )
        return time.perf_counter() - started
