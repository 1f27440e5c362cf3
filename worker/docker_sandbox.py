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
start and in every recovery sweep) removes those whose worker process died.

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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from core.errors import SetupError
from core.evaluation.gates import Enclosure
from core.matrix import AgentConfig, DockerSandbox
from worker.workspace import RunDir

log = logging.getLogger(__name__)

LABEL_RUN = "org.evalfleet.run-id"
LABEL_HOST = "org.evalfleet.worker-host"
LABEL_PID = "org.evalfleet.worker-pid"
WORKSPACE = "/workspace"
PROMPT_FILE = "/evalfleet/prompt.txt"
EVENTS_FILE = "/evalfleet/events.jsonl"
NOBODY = 65534
_CLI_TIMEOUT_S = 120.0
_BUILD_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class Container:
    docker: str  # the CLI's path
    name: str
    env: dict[str, str]  # the agent's environment inside the container

    def exec_argv(self) -> list[str]:
        """What goes before `bash -c COMMAND` to run it in the container as the agent."""
        names = [arg for name in self.env for arg in ("--env", name)]
        return [self.docker, "exec", "--workdir", WORKSPACE, *names, self.name]

    @property
    def client_env(self) -> dict[str, str]:
        """The docker CLI's environment for `exec_argv`: where the engine is, plus
        the values `--env NAME` passes in."""
        return {**_client_env(), **self.env}

    def enclosure(self) -> Enclosure:
        return Enclosure(self.exec_argv(), self.client_env)

    def end_agent(self) -> None:
        """Stop whatever the agent left running (a restart kills every process of the
        container); the gates then run in the same container, on the same files."""
        _quiet(self.docker, "restart", "-t", "0", self.name)


@contextlib.contextmanager
def agent_container(
    agent: AgentConfig, run_id: str, run_dir: RunDir, run_env: Mapping[str, str]
) -> Iterator[Container | None]:
    """The run's container while the block runs (None unless `sandbox: docker`);
    always removed afterwards. Raises SetupError when it cannot be started."""
    if agent.sandbox != "docker":
        yield None
        return
    assert agent.docker is not None  # the config refuses sandbox: docker without it
    docker = shutil.which("docker")
    if docker is None:
        raise SetupError(
            "the agent asks for `sandbox: docker` but this worker has no docker CLI; "
            "install Docker on it (docs/FLEET.md, `sandbox: docker`)"
        )
    image = _image(docker, agent.docker)
    image_env = _image_env(docker, image)
    env = container_env(agent, run_env, image_env)
    container = Container(docker, f"evalfleet-{uuid.uuid4().hex[:16]}", env)
    try:
        _cli(docker, *_run_args(agent.docker, image, run_id, run_dir, run_env, container.name))
        yield container
    finally:
        _quiet(docker, "rm", "--force", "--volumes", container.name)


def container_env(
    agent: AgentConfig, run_env: Mapping[str, str], image_env: Mapping[str, str]
) -> dict[str, str]:
    """The run's variables with the container's paths, the `pass_env` allow-lists (the
    container's and the agent's), and the agent's `env:` expanded against the image's
    variables instead of the worker's."""
    assert agent.docker is not None
    env = {"HOME": "/tmp"}
    preset = agent.preset_spec
    # A preset's provider base URL passes into its container as into an unconfined run.
    passed = [*agent.docker.pass_env, *agent.pass_env, *(preset.base_url_env if preset else ())]
    env.update({name: os.environ[name] for name in passed if name in os.environ})
    if preset is not None:
        env.update(preset.env)
    env.update({k: v for k, v in run_env.items() if k.startswith("EVALFLEET_") or k == "PROMPT"})
    env.update({"PROMPT_FILE": PROMPT_FILE, "EVALFLEET_EVENTS": EVENTS_FILE})
    base = {**image_env, **env}
    env.update({k: string.Template(v).safe_substitute(base) for k, v in agent.env.items()})
    return env


def _run_args(
    config: DockerSandbox,
    image: str,
    run_id: str,
    run_dir: RunDir,
    run_env: Mapping[str, str],
    name: str,
) -> list[str]:
    uid, gid = _agent_user(run_dir)
    run_dir.events_file.touch()  # a bind mount needs the file to exist
    mounts = [
        f"type=bind,src={run_dir.workspace},dst={WORKSPACE}",
        f"type=bind,src={run_dir.prompt_file},dst={PROMPT_FILE},readonly",
        f"type=bind,src={run_dir.events_file},dst={EVENTS_FILE}",
    ]
    matrix_dir = run_env.get("EVALFLEET_MATRIX_DIR")
    if matrix_dir and Path(matrix_dir).is_dir():
        mounts.append(f"type=bind,src={matrix_dir},dst={matrix_dir},readonly")
    memory = f"{config.memory_mb}m"
    return [
        "run", "--detach", "--init", "--name", name,
        "--label", f"{LABEL_RUN}={run_id}",
        "--label", f"{LABEL_HOST}={socket.gethostname()}",
        "--label", f"{LABEL_PID}={os.getpid()}",
        "--user", f"{uid}:{gid}",
        "--network", config.network,
        "--cpus", f"{config.cpus:g}",
        "--memory", memory, "--memory-swap", memory,
        "--pids-limit", str(config.pids),
        "--cap-drop", "ALL",
        "--security-opt", "no-new-privileges",
        *(arg for mount in mounts for arg in ("--mount", mount)),
        "--workdir", WORKSPACE,
        "--entrypoint", "sleep", image, "infinity",
    ]  # fmt: skip


def _agent_user(run_dir: RunDir) -> tuple[int, int]:
    """The worker's uid and gid; for a root worker, nobody, given the run's files."""
    if os.getuid() != 0:
        return os.getuid(), os.getgid()
    run_dir.events_file.touch()
    for folder, dirs, files in os.walk(run_dir.workspace):
        for path in (folder, *(os.path.join(folder, n) for n in (*dirs, *files))):
            os.chown(path, NOBODY, NOBODY, follow_symlinks=False)
    os.chown(run_dir.events_file, NOBODY, NOBODY)
    return NOBODY, NOBODY


def _image(docker: str, config: DockerSandbox) -> str:
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
            "--format", f'{{{{.ID}}}} {{{{.Label "{LABEL_PID}"}}}}',
        )  # fmt: skip
    except SetupError as exc:  # a CLI without an engine: every sweep would say so
        log.debug("no sandbox containers swept: %s", exc)
        return 0
    orphans = [
        container
        for container, _, pid in (line.partition(" ") for line in listed.splitlines())
        if not _alive(pid)
    ]
    if orphans:
        log.warning("removing %d sandbox containers whose worker died", len(orphans))
        _quiet(docker, "rm", "--force", "--volumes", *orphans)
    return len(orphans)


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError):  # someone else's process, or no PID label
        return True
    return True


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
        raise SetupError(f"`docker {args[0]}` for the sandbox failed: {exc}") from exc
    if done.returncode != 0:
        raise SetupError(f"`docker {args[0]}` for the sandbox failed: {done.stderr.strip()[-500:]}")
    return done.stdout.strip()


def _quiet(docker: str, *args: str) -> str | None:
    """Clean-up: logged, never raised (the run's result matters more)."""
    try:
        return _cli(docker, *args)
    except SetupError as exc:
        log.warning("%s", exc)
        return None
