"""`python -m worker`: one Celery worker of evalfleet's app, as the embedded mode and
`scheduler worker` start it (scheduler.embedded.worker_command).

The same WorkController that `celery -A worker.app worker` builds (`app.Worker`,
Celery's program class: banner, logging, signal handlers), started without
Celery's command line: that one first imports every `celery` sub-command plugin,
Flower's web stack and a REPL among them, ~0.4 s of a cold start spent on code
a worker never runs. `celery -A worker.app worker -E ...` still works the same.

Mingle and gossip are off: mingle asks the other workers for revoked task ids
(evalfleet revokes nothing; a cancel is a state in Redis) and costs a second at
every start; gossip elects leaders among workers, which nothing here uses.
Heartbeats and task events, what Flower shows, stay on, but for a worker no Flower
can watch (`--without-events`: the embedded mode's, on a Redis of its CLI's own), whose
events, a run's phases among them, were a tenth of a quick run's time.

Once the worker has stopped (its pool joined, its messages acknowledged or
handed back, its logs flushed here), the process
leaves with os._exit: the interpreter's own teardown of Celery's and
pydantic's objects took another 0.2-0.7 s of CPU for nothing.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import shutil
import sys
from multiprocessing.util import get_temp_dir
from typing import NoReturn


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m worker", description=__doc__.splitlines()[0])
    p.add_argument("--concurrency", type=int, required=True, help="pool processes")
    p.add_argument("--queues", required=True, help="comma-separated queue names")
    p.add_argument("--hostname", default=None, help="node name, e.g. ci-3@%%h")
    p.add_argument("--loglevel", default="INFO")
    p.add_argument("--until-idle", type=float, default=None, metavar="SECONDS")
    p.add_argument("--grace", type=float, default=None, metavar="SECONDS")
    p.add_argument(
        "--split",
        action="store_true",
        help="as --concurrency nodes of one pool process each (worker.nodes)",
    )
    p.add_argument(
        "--without-events",
        action="store_true",
        help="send no task events (received, started, phases, succeeded): nothing watches",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from celery.utils.log import mlevel
    from celery.utils.nodenames import default_nodename, host_format

    from core.errors import SettingError
    from core.settings import check_settings
    from fleet.nodes import SPLITS
    from worker import nodes

    try:
        check_settings()
        from worker.app import app

        # Read by the tasks too: a run sends its phases only where events go.
        app.conf.worker_send_task_events = not args.without_events
        hostname, concurrency = host_format(default_nodename(args.hostname)), args.concurrency
        if args.split and concurrency > 1 and SPLITS:
            gc.freeze()  # the imports' heap, shared by the nodes: not copied by a collection
            node = nodes.fork(hostname, concurrency)
            if isinstance(node, nodes.Children):
                return node.wait()
            hostname, concurrency = node, 1
            nodes.label_logs(node)
        worker = app.Worker(
            hostname=hostname,
            concurrency=concurrency,
            queues=args.queues.split(","),
            loglevel=mlevel(args.loglevel.upper()),
            task_events=app.conf.worker_send_task_events,
            without_mingle=True,
            without_gossip=True,
            # evalfleet's own worker options (worker.idle, worker.grace).
            until_idle=args.until_idle,
            grace=args.grace,
        )
    except SettingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    _timeline_marks()
    # What is imported and built stays for the worker's life: the collector need not walk
    # it again, neither before the pool forks each process (Celery collects there, ~60 ms
    # over this heap) nor in a pool process between runs.
    gc.freeze()
    worker.start()
    return int(worker.exitcode or 0)


def _timeline_marks() -> None:
    """The worker's own marks on a cold submit's timeline (core.timeline), when asked."""
    from celery import signals

    from core.timeline import ENV_TIMELINE, mark

    if os.environ.get(ENV_TIMELINE):
        signals.worker_ready.connect(lambda **_: mark("worker: ready"), weak=False)
        signals.task_prerun.connect(lambda **_: mark("run: task started"), weak=False)
        signals.task_postrun.connect(lambda **_: mark("run: task ended"), weak=False)


def preimport() -> None:
    """The bulk of a worker's start, none of it reading the environment: Celery's app,
    worker program and prefork pool, kombu, evalfleet's tasks and models. The app itself
    is built once the broker is known (worker.app)."""
    import celery.apps.worker  # noqa: F401
    import kombu.transport.redis  # noqa: F401

    import worker.celery_app
    import worker.tasks  # noqa: F401


def standby() -> list[str] | None:
    """`python -m worker --standby` (scheduler.standby): the worker's code imported
    first, then its arguments, environment and log file read from stdin, as one JSON
    line. None when stdin ends first: the CLI did not need this worker."""
    preimport()
    from core.timeline import mark

    mark("worker: code imported (standby)")
    line = sys.stdin.readline()
    if not line:
        return None
    order = json.loads(line)
    os.environ.clear()
    os.environ.update(order["env"])
    from fleet.broker import open_log

    log = open_log(order["log"])
    for stream in (1, 2):
        os.dup2(log, stream)
    os.close(log)
    return list(order["argv"])


def run(argv: list[str] | None) -> NoReturn:
    """`main`, then the process ends with os._exit: it skips the interpreter's teardown
    (as the scheduler's console script does); of what that would have run, only
    logging's flush and multiprocessing's temporary folder matter once the pool has
    stopped (billiard's pool keeps each pool process's shared counter in a file of
    that folder: every worker left an empty pymp-* folder in /tmp)."""
    code = main(argv)
    shutil.rmtree(get_temp_dir(), ignore_errors=True)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    argv: list[str] | None = sys.argv[1:]
    if argv == ["--standby"]:
        argv = standby()
        if argv is None:
            os._exit(0)
    run(argv)
