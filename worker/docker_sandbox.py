"""`sandbox: docker`: a command agent, and by default its command gates, in a container of its own.

One container per run, from the agent's `docker.image` (or the image a worker
builds from `docker.build` before its first run), started after the setup
commands and removed once the gates have run:

- the run's workspace bind-mounted at /workspace, the working directory; the
  prompt and events files at /evalfleet/; the experiment folder read-only at
  its own path, so `$EVALFLEET_MATRIX_DIR` means what it means on the host;
- the agent as a non-root user: the worker's own uid (what it writes stays the
  worker's to read and delete), or `nobody` owning the workspace when the worker
  runs as root;
- the environment contract (PROMPT, PROMPT_FILE, EVALFLEET_*, the agent's `env:`,
  whose `${VAR}` build on the image's variables, a preset's variables) plus only the
  worker variables named in `pass_env` and a preset's base URL variable: never the
  worker's environment or its broker URL;
- `network: none` (default: not even loopback to the host) or `bridge`; `cpus`,
  `memory_mb` (no swap beyond it) and `pids` limits; no capabilities and no
  privilege gain (setuid binaries do nothing).

The container's main process only keeps it alive; the agent and each gate are
`docker exec`s into it. When the agent ends or times out, the container is
restarted, which ends everything the agent started in it, before the gates run
in it (they see the tools the agent had). Each container carries the run id,
the worker's host name and the worker process's PID as labels: it is removed,
anonymous volumes included, when its run ends, and `sweep_orphans` (at worker
start and in every recovery sweep) removes those whose worker process died (the
PID and its start time: a restarted worker container reuses the PIDs).

A benchmark task's scenario (one with an `environment`, core.matrix.task) runs in
the task's image: `environment.image`, or the image built from `environment.build`
(tagged `evalfleet-task:<hash of the build context and base image>`, built once per
engine: a lock file per hash in the work folder, and an image already tagged is not
built again;
EVALFLEET_TASK_BASE_IMAGE, when set, is passed as `--build-arg BASE_IMAGE=...`), else
`agent.docker`'s. Its workspace is at `environment.workdir`, seeded from the image's
own files there (`docker create` + `docker cp IMAGE:WORKDIR/.` into the run's
workspace before the container starts: the workspace stays a folder of the run on
this machine, which the gates, the judge and the evidence read, rather than a
volume only the engine holds); the run's logs at /logs; the tests at /tests, a
read-only bind mount of the run's folder that stays empty until the agent has ended
and the container was restarted (nothing of the agent runs when the tests arrive);
the oracle's solution at /solution. Its `cpus` and `memory_mb` are over
`agent.docker`'s, the agent runs as `agent_user` (else as any run) and the
verifier as `verifier_user` (else as the agent). Network: Docker's bridge when the
task allows the internet or a preset CLI must reach its model (as under bwrap,
worker.confinement.needs_network), else none. A preset's home is the run's, bind
mounted at its own path, so the CLI's session record is read as on the host.
The experiment's hidden files (its tests, solutions, rubrics) are masked in the
container, as bwrap masks them.

The engine is driven through the `docker` CLI, not the Docker SDK for Python:
the agent and the gates then go through core.evaluation.shell like every other command
(its timeout, process-group kill and output cap), workers need no extra Python
dependency (nor its version skew with the engine), DOCKER_HOST and docker
contexts work as the user configured them for the CLI, and every step is a
command one can rerun by hand. Values never go into an argv (visible in `ps`):
`--env NAME` takes the value from the docker CLI's own environment.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import logging
import os
import shutil
import socket
import string
import subprocess
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from core.errors import SetupError
from core.evaluation.credentials import RunAs
from core.evaluation.gates import Enclosure
from core.evidence.text import last_line_first, last_lines
from core.files.places import work_root
from core.matrix import (
    LOGS_DIR,
    SOLUTION_DIR,
    TESTS_DIR,
    AgentConfig,
    DockerSandbox,
    Scenario,
    TaskEnvironment,
)
from worker.confinement import needs_network
from worker.workspace import GIT_SYSTEM_CONFIG, RunDir, chown_tree

log = logging.getLogger(__name__)

LABEL_RUN = "org.evalfleet.run-id"
LABEL_HOST = "org.evalfleet.worker-host"
LABEL_PID = "org.evalfleet.worker-pid"
LABEL_STARTED = "org.evalfleet.worker-started"
WORKSPACE = "/workspace"
PROMPT_FILE = "/evalfleet/prompt.txt"
GIT_CONFIG_FILE = "/evalfleet/gitconfig"
EVENTS_FILE = "/evalfleet/events.jsonl"
NOBODY = 65534
_CLI_TIMEOUT_S = 120.0
_BUILD_TIMEOUT_S = 1800.0
# A task's Dockerfile built `FROM ${BASE_IMAGE}` gets this image (`--build-arg`) when set:
# a local image where no registry is reachable (docs/MATRIX.md, environment).
ENV_TASK_BASE_IMAGE = "EVALFLEET_TASK_BASE_IMAGE"


@dataclass(frozen=True)
class Container:
    docker: str  # the CLI's path
    name: str
    env: dict[str, str]  # the agent's environment inside the container
    workdir: str = WORKSPACE  # the workspace's path inside (a task's `workdir`)
    verifier_user: str | None = None  # a task verifier's `--user`; None: the agent's

    def exec_argv(self, user: str | None = None, names: Iterable[str] | None = None) -> list[str]:
        """What goes before `bash -c COMMAND` to run it in the container as the agent
        (or as `user`), with the variables `names` (default: the agent's)."""
        passed = [arg for name in (self.env if names is None else names) for arg in ("--env", name)]
        as_user = ["--user", user] if user else []
        return [self.docker, "exec", "--workdir", self.workdir, *as_user, *passed, self.name]

    @property
    def client_env(self) -> dict[str, str]:
        """The docker CLI's environment for `exec_argv`: where the engine is, plus
        the values `--env NAME` passes in."""
        return {**_client_env(), **self.env}

    def enclosure(self) -> Enclosure:
        return Enclosure(self.exec_argv(), self.client_env)

    def verifier_call(self, env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
        """The argv prefix and the CLI's environment that run a task's verifier in the
        container, as `verifier_user`, with `env` (the agent's variables and the
        verifier's) inside."""
        return self.exec_argv(self.verifier_user, env), {**_client_env(), **env}

    def hand_over(self, paths: Iterable[Path], user: str | None) -> None:
        """On a root worker: `paths` (the run's, bind mounted) made the files of the
        image's `user` (None: the container's own user), whose uid only the image
        knows. A worker that is not root cannot give its files away: they stay its
        uid's (docs/MATRIX.md, environment)."""
        if os.getuid() != 0:
            return
        at = ["--user", user] if user else []
        ids = _cli(self.docker, "exec", *at, self.name, "sh", "-c", "echo $(id -u) $(id -g)")
        try:
            uid, gid = (int(n) for n in ids.split())
        except ValueError as exc:
            raise SetupError(f"the image's user {user!r}: `id` said {ids!r}") from exc
        for top in paths:
            chown_tree(top, RunAs(uid, gid))

    def end_agent(self) -> None:
        """Stop whatever the agent left running (a restart kills every process of the
        container); the gates then run in the same container, on the same files."""
        _quiet(self.docker, "restart", "-t", "0", self.name)


@contextlib.contextmanager
def agent_container(
    agent: AgentConfig,
    run_id: str,
    run_dir: RunDir,
    run_env: Mapping[str, str],
    scenario: Scenario | None = None,
    hidden: Sequence[Path] = (),
) -> Iterator[Container | None]:
    """The run's container while the block runs (None unless `sandbox: docker`);
    always removed afterwards. A benchmark task's (`scenario` with an environment)
    is its image's, at its paths. Raises SetupError when it cannot be started."""
    if agent.sandbox != "docker":
        yield None
        return
    docker = shutil.which("docker")
    if docker is None:
        raise SetupError(
            "the agent asks for `sandbox: docker` but this worker has no docker CLI; "
            "install Docker on it (docs/FLEET.md, `sandbox: docker`)"
        )
    environment = scenario.environment if scenario is not None else None
    image = _image(docker, agent, environment)
    image_env = _image_env(docker, image)
    name = f"evalfleet-{uuid.uuid4().hex[:16]}"
    if environment is not None and (environment.image or environment.build):
        _seed(docker, image, environment.workdir, run_dir.workspace)
    env = container_env(agent, run_env, image_env)
    layout = _Layout.of(agent, scenario, run_dir, hidden)
    workdir = environment.workdir if environment is not None else WORKSPACE
    verifier_user = environment.verifier_user if environment is not None else None
    container = Container(docker, name, env, workdir, verifier_user)
    try:
        _cli(docker, *_run_args(agent, environment, image, run_id, run_dir, run_env, name, layout))
        agent_user = environment.agent_user if environment is not None else None
        if agent_user is not None:
            container.hand_over(layout.agent_owns, None)
        yield container
    finally:
        _quiet(docker, "rm", "--force", "--volumes", name)


def container_env(
    agent: AgentConfig, run_env: Mapping[str, str], image_env: Mapping[str, str]
) -> dict[str, str]:
    """The run's variables with the container's paths, the `pass_env` allow-lists (the
    container's and the agent's), a preset's key and home, and the agent's `env:`
    expanded against the image's variables instead of the worker's."""
    env = {"HOME": "/tmp"}
    preset = agent.preset_spec
    # A preset's provider base URL and key pass into its container as into an unconfined run.
    passed = [
        *(agent.docker.pass_env if agent.docker is not None else ()),
        *agent.pass_env,
        *(preset.base_url_env if preset else ()),
        *([agent.api_key_env] if preset is not None and agent.api_key_env else ()),
    ]
    env.update({name: os.environ[name] for name in passed if name in os.environ})
    if preset is not None:
        # The run's own home, mounted at its own path: the CLI's session record is
        # read from it afterwards for exact figures (worker.workspace.own_home).
        home = ("HOME", "TMPDIR", *(k for k in run_env if k.startswith("XDG_")))
        env.update({k: run_env[k] for k in home if k in run_env})
        env.update(preset.env)
    env.update({k: v for k, v in run_env.items() if k.startswith("EVALFLEET_") or k == "PROMPT"})
    env.update({"PROMPT_FILE": PROMPT_FILE, "EVALFLEET_EVENTS": EVENTS_FILE})
    # The run's default git identity (worker.workspace.git_identity), whose include
    # reads the image's own /etc/gitconfig; unless the image or the agent chose one.
    if not GIT_SYSTEM_CONFIG & {*image_env, *env, *agent.env}:
        env["GIT_CONFIG_SYSTEM"] = GIT_CONFIG_FILE
    base = {**image_env, **env}
    env.update({k: string.Template(v).safe_substitute(base) for k, v in agent.env.items()})
    return env


@dataclass(frozen=True)
class _Layout:
    """The run's folders in its container: `mounts` (docker's `--mount` values), and
    those the agent must own to work (`agent_owns`)."""

    mounts: list[str]
    agent_owns: list[Path]

    @classmethod
    def of(
        cls, agent: AgentConfig, scenario: Scenario | None, run_dir: RunDir, hidden: Sequence[Path]
    ) -> _Layout:
        environment = scenario.environment if scenario is not None else None
        workdir = environment.workdir if environment is not None else WORKSPACE
        run_dir.events_file.touch()  # a bind mount needs the file to exist
        mounts = [
            f"type=bind,src={run_dir.workspace},dst={workdir}",
            f"type=bind,src={run_dir.prompt_file},dst={PROMPT_FILE},readonly",
            f"type=bind,src={run_dir.git_config},dst={GIT_CONFIG_FILE},readonly",
            f"type=bind,src={run_dir.events_file},dst={EVENTS_FILE}",
        ]
        owns = [run_dir.workspace, run_dir.events_file]
        if agent.preset_spec is not None and run_dir.home.is_dir():
            mounts.append(f"type=bind,src={run_dir.home},dst={run_dir.home}")
            owns.append(run_dir.home)
        if environment is not None:
            run_dir.logs.mkdir(exist_ok=True)
            mounts.append(f"type=bind,src={run_dir.logs},dst={LOGS_DIR}")
            owns.append(run_dir.logs)
            if scenario is not None and scenario.tests is not None:
                # Empty while the agent runs; filled once it ended (worker.workspace.with_tests).
                run_dir.tests.mkdir(exist_ok=True)
                mounts.append(f"type=bind,src={run_dir.tests},dst={TESTS_DIR},readonly")
            if run_dir.solution.is_dir():  # the oracle's only (worker.workspace.with_solution)
                mounts.append(f"type=bind,src={run_dir.solution},dst={SOLUTION_DIR},readonly")
        for path in hidden:  # over the experiment's folder, mounted below
            if path.is_dir():
                mounts.append(f"type=tmpfs,dst={path}")
            elif path.exists():
                mounts.append(f"type=bind,src=/dev/null,dst={path},readonly")
        return cls(mounts, owns)


# wide: one caller, whose values these are: an object would be built for this call alone
def _run_args(
    agent: AgentConfig,
    environment: TaskEnvironment | None,
    image: str,
    run_id: str,
    run_dir: RunDir,
    run_env: Mapping[str, str],
    name: str,
    layout: _Layout,
) -> list[str]:
    config = agent.docker or DockerSandbox(image=image)
    user = environment.agent_user if environment is not None else None
    if user is None:
        uid, gid = _agent_user(layout.agent_owns)
        user = f"{uid}:{gid}"
    mounts = list(layout.mounts)
    matrix_dir = run_env.get("EVALFLEET_MATRIX_DIR")
    if matrix_dir and Path(matrix_dir).is_dir():
        mounts.insert(0, f"type=bind,src={matrix_dir},dst={matrix_dir},readonly")
    network = config.network
    cpus, memory_mb = config.cpus, config.memory_mb
    if environment is not None:
        network = "bridge" if needs_network(agent, environment) else "none"
        cpus = environment.cpus or cpus
        memory_mb = environment.memory_mb or memory_mb
    workdir = environment.workdir if environment is not None else WORKSPACE
    memory = f"{memory_mb}m"
    return [
        "run", "--detach", "--init", "--name", name,
        "--label", f"{LABEL_RUN}={run_id}",
        *_owner_labels(),
        "--user", user,
        "--network", network,
        "--cpus", f"{cpus:g}",
        "--memory", memory, "--memory-swap", memory,
        "--pids-limit", str(config.pids),
        "--cap-drop", "ALL",
        "--security-opt", "no-new-privileges",
        *(arg for mount in mounts for arg in ("--mount", mount)),
        "--workdir", workdir,
        "--entrypoint", "sleep", image, "infinity",
    ]  # fmt: skip


def _agent_user(owns: Sequence[Path]) -> tuple[int, int]:
    """The worker's uid and gid; for a root worker, nobody, given the run's files."""
    if os.getuid() != 0:
        return os.getuid(), os.getgid()
    for top in owns:
        chown_tree(top, RunAs(NOBODY, NOBODY))
    return NOBODY, NOBODY


def _image(docker: str, agent: AgentConfig, environment: TaskEnvironment | None) -> str:
    """The run's image: a task's own (pulled, or built from its folder), else the agent's."""
    if environment is not None and environment.image is not None:
        return environment.image
    if environment is not None and environment.build is not None:
        return task_image(docker, environment.build)
    config = agent.docker
    if config is None:  # the matrix refuses this (core.matrix.matrix)
        raise SetupError("`sandbox: docker` without a `docker:` image, for a scenario without one")
    if config.image is not None:
        return config.image
    assert config.build is not None
    return _built(docker, config.build, hashlib.sha256(config.build.read_bytes()).hexdigest())


@functools.lru_cache(maxsize=16)
def _built(docker: str, dockerfile: Path, content: str) -> str:
    """Built once per worker process (Docker's layer cache makes later builds cheap)."""
    tag = f"evalfleet-sandbox:{hashlib.sha256(f'{dockerfile}:{content}'.encode()).hexdigest()[:16]}"
    log.info("building the sandbox image %s from %s", tag, dockerfile)
    _cli(docker, "build", "--quiet", "--tag", tag, "--file", str(dockerfile),
         str(dockerfile.parent), timeout=_BUILD_TIMEOUT_S)  # fmt: skip
    return tag


def task_image(docker: str, context: Path) -> str:
    """The image of a task's build folder (its Dockerfile and context), tagged by the
    hash of their contents and of the base image given: built at most once per
    engine (a lock per hash; an image already tagged is used as it is)."""
    base = os.environ.get(ENV_TASK_BASE_IMAGE) or None
    return _task_built(docker, context, task_tag(context, base), base)


def task_tag(context: Path, base: str | None) -> str:
    """The tag of the image built from a task's build folder `context` with `base` as
    its BASE_IMAGE build argument."""
    return f"evalfleet-task:{_context_hash(context, base)[:20]}"


@functools.lru_cache(maxsize=64)
def _task_built(docker: str, context: Path, tag: str, base: str | None) -> str:
    # In the work folder, not /tmp: worker containers that share the host's engine
    # share the work folder (at the host's path, for its bind mounts) but each has a
    # /tmp of its own, and with locks there every container built each image again.
    locks = work_root() / ".task-images"
    locks.mkdir(parents=True, exist_ok=True)
    fd = os.open(locks / f"{tag.replace(':', '-')}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another worker of this machine may be building it
        if _exists(docker, tag):
            return tag
        log.info("building the task image %s from %s", tag, context)
        base_arg = ["--build-arg", f"BASE_IMAGE={base}"] if base else []
        _cli(docker, "build", "--quiet", "--tag", tag, *base_arg, str(context),
             timeout=_BUILD_TIMEOUT_S)  # fmt: skip
        return tag
    finally:
        os.close(fd)


def _context_hash(context: Path, base: str | None) -> str:
    """A build folder's contents (paths, modes, bytes, links) and the base image."""
    digest = hashlib.sha256(f"base={base}\n".encode())
    for folder, dirs, files in os.walk(context):
        dirs.sort()
        for name in sorted(files):
            path = Path(folder, name)
            digest.update(f"{path.relative_to(context)}\0{path.lstat().st_mode:o}\0".encode())
            if path.is_symlink():
                digest.update(os.readlink(path).encode())
            else:
                digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _exists(docker: str, image: str) -> bool:
    try:
        _cli(docker, "image", "inspect", "--format", "{{.Id}}", image)
    except SetupError:
        return False
    return True


def _seed(docker: str, image: str, workdir: str, workspace: Path) -> None:
    """The image's files at `workdir` copied into the run's workspace (which is then
    bind mounted there, over them): a task's /app as its Dockerfile left it. An image
    without that folder leaves the workspace as it is."""
    name = f"evalfleet-seed-{uuid.uuid4().hex[:16]}"
    _cli(docker, "create", "--name", name, *_owner_labels(), "--entrypoint", "true", image)
    try:
        _cli(docker, "cp", f"{name}:{workdir.rstrip('/')}/.", str(workspace))
    except SetupError as exc:
        if "Could not find" not in str(exc) and "No such" not in str(exc):
            raise
    finally:
        _quiet(docker, "rm", "--force", name)


def _image_env(docker: str, image: str) -> dict[str, str]:
    """The image's own variables (its PATH, for `${PATH}` in the agent's `env:`); an
    image missing here is pulled first, as `docker run` would."""
    try:
        raw = _cli(docker, "image", "inspect", "--format", "{{json .Config.Env}}", image)
    except SetupError:
        _cli(docker, "pull", "--quiet", image, timeout=_BUILD_TIMEOUT_S)
        raw = _cli(docker, "image", "inspect", "--format", "{{json .Config.Env}}", image)
    pairs = (item.partition("=") for item in json.loads(raw) or [])
    return {name: value for name, _, value in pairs}


def sweep_orphans() -> int:
    """Remove this host's containers whose worker process is gone (a killed worker's);
    returns how many. Quiet where there is no docker CLI or engine."""
    docker = shutil.which("docker")
    if docker is None:
        return 0
    try:
        listed = _cli(
            docker, "ps", "--all",
            "--filter", f"label={LABEL_HOST}={socket.gethostname()}",
            "--format",
            f'{{{{.ID}}}} {{{{.Label "{LABEL_PID}"}}}} {{{{.Label "{LABEL_STARTED}"}}}}',
        )  # fmt: skip
    except SetupError as exc:  # a CLI without an engine: every sweep would say so
        log.debug("no sandbox containers swept: %s", exc)
        return 0
    orphans = []
    for line in listed.splitlines():  # an empty label leaves nothing after its space
        container, _, labels = line.partition(" ")
        pid, _, started = labels.partition(" ")
        if not _alive(pid, started):
            orphans.append(container)
    if orphans:
        log.warning("removing %d sandbox containers whose worker died", len(orphans))
        _quiet(docker, "rm", "--force", "--volumes", *orphans)
    return len(orphans)


def _owner_labels() -> list[str]:
    """The labels that tie a container to this worker process: its host name, its PID
    and that PID's start time."""
    pid = os.getpid()
    return [
        "--label", f"{LABEL_HOST}={socket.gethostname()}",
        "--label", f"{LABEL_PID}={pid}",
        "--label", f"{LABEL_STARTED}={_started(str(pid))}",
    ]  # fmt: skip


def _started(pid: str) -> str:
    """A process's start time in clock ticks since boot (/proc/PID/stat, field 22);
    '' where it cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return ""
    fields = stat.rpartition(")")[2].split()  # the name, in parentheses, may hold spaces
    return fields[19] if len(fields) > 19 else ""


def _alive(pid: str, started: str) -> bool:
    """Whether the worker process that labelled a container still runs. Its PID alone
    is not enough: a worker container restarted after a kill numbers its processes
    from 1 again, so the dead worker's PIDs come back as the new worker's, and its
    containers ran on forever; the start time tells them apart (the kernel is the
    host's, shared by its containers). Containers labelled before the start time
    was (an empty `started`) go by their PID."""
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except ValueError:  # no PID label
        return True
    except PermissionError:  # someone else's process: a later one's, perhaps
        pass
    return not started or _started(pid) in ("", started)


def _client_env() -> dict[str, str]:
    """What the docker CLI needs of the worker's environment: where the engine and
    the CLI's configuration are; nothing else."""
    keep = ("HOME", "PATH", "XDG_RUNTIME_DIR")
    return {k: v for k, v in os.environ.items() if k.startswith("DOCKER_") or k in keep}


def _cli(docker: str, *args: str, timeout: float = _CLI_TIMEOUT_S) -> str:
    """A docker command's stdout; SetupError, with docker's words, when it fails."""
    try:
        done = subprocess.run(
            [docker, *args], capture_output=True, text=True, timeout=timeout, env=_client_env()
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SetupError(f"`docker {args[0]}` failed: {exc}") from exc
    if done.returncode != 0:
        # Its last words first (a build's failing step), from a whole line: the head of
        # a cut tail read "acy builder is deprecated".
        tail = last_lines(done.stderr, 500)
        said = last_line_first(tail) if tail else f"exit code {done.returncode}"
        raise SetupError(f"`docker {args[0]}` failed: {said}")
    return done.stdout.strip()


def _quiet(docker: str, *args: str) -> str | None:
    """Clean-up: logged, never raised (the run's result matters more)."""
    try:
        return _cli(docker, *args)
    except SetupError as exc:
        log.warning("%s", exc)
        return None
