"""A benchmark task's image is built once per engine (worker.docker_sandbox.task_image),
also by workers that share the engine but not a /tmp: the compose workers, each in a
container of its own, drive the host's engine through its socket and share the work
folder (docker-compose.docker-sandbox.yml).

The engine is a stand-in `docker` executable (its state in DOCKER_STUB_STATE: the
worker passes the CLI only DOCKER_* variables) that records each build and takes a
second over it, so that two workers asking at once overlap."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

DOCKER = """#!/bin/bash
tag=${@: -1}
case "$1 $2" in
    "image inspect")
        [ -e "$DOCKER_STUB_STATE/built-$tag" ] && { echo sha256:0; exit 0; }
        echo "Error: No such image: $tag" >&2; exit 1 ;;
esac
if [ "$1" = build ]; then
    while [ "$1" != --tag ]; do shift; done
    echo "$2" >> "$DOCKER_STUB_STATE/builds"
    sleep 1
    touch "$DOCKER_STUB_STATE/built-$2"
    exit 0
fi
echo "unexpected: $*" >&2; exit 2
"""

ASK = """
import sys
from pathlib import Path
from worker.docker_sandbox import task_image
print(task_image(sys.argv[1], Path(sys.argv[2])))
"""


def test_workers_with_a_tmp_each_but_one_work_folder_build_a_task_image_once(
    tmp_path: Path,
) -> None:
    docker = tmp_path / "docker"
    docker.write_text(DOCKER)
    docker.chmod(0o755)
    context = tmp_path / "task" / "environment"
    context.mkdir(parents=True)
    (context / "Dockerfile").write_text("FROM scratch\n")
    state = tmp_path / "engine"
    state.mkdir()
    workers = []
    for name in ("worker-1", "worker-2"):
        own_tmp = tmp_path / name / "tmp"
        own_tmp.mkdir(parents=True)
        env = {
            "PATH": os.environ["PATH"],
            "PYTHONPATH": str(ROOT),
            "DOCKER_STUB_STATE": str(state),
            "TMPDIR": str(own_tmp),
            "EVALFLEET_WORKDIR": str(tmp_path / "shared-runs"),
        }
        workers.append(
            subprocess.Popen(
                [sys.executable, "-c", ASK, str(docker), str(context)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    tags = []
    for worker in workers:
        out, err = worker.communicate(timeout=60)
        assert worker.returncode == 0, err
        tags.append(out.strip())
    assert tags[0] == tags[1] and tags[0].startswith("evalfleet-task:")
    assert (state / "builds").read_text().splitlines() == [tags[0]]
