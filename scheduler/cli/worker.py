"""`scheduler worker`: this machine joins the fleet (the process becomes a Celery worker)."""

from __future__ import annotations

import os
from urllib.parse import unquote, urlsplit

import click

from core.broker_url import ENV_BROKER, ENV_PASSWORD_FILE, with_password
from core.errors import InputError
from scheduler.cli.context import CLIContext, pass_cli
from scheduler.cli.options import broker_option


# wide: click passes each of the command's options as a parameter
@click.command()
@broker_option
@click.option(
    "--concurrency",
    "-c",
    type=click.IntRange(1, 512),
    default=None,
    help="Runs at once in this worker (default: the CPU count).",
)
@click.option(
    "--queues",
    "-Q",
    default=None,
    help="Comma-separated queues to take runs from (default: EVALFLEET_QUEUE or evalfleet).",
)
@click.option(
    "--until-idle",
    type=click.FloatRange(min=0),
    default=None,
    metavar="SECONDS",
    help="Exit 0 once no task has run and the queues have stayed empty this long "
    "(for CI jobs that should end when the experiment is drained).",
)
@click.option(
    "--grace",
    type=click.FloatRange(min=0),
    default=None,
    metavar="SECONDS",
    help="On SIGTERM, running runs may finish this long; then they go back to the queue "
    "for another worker (default: EVALFLEET_SHUTDOWN_GRACE or 30).",
)
@click.option(
    "--hostname",
    "-n",
    default=None,
    metavar="NAME",
    help="Celery node name shown in Flower, e.g. ci-3@%h (default: evalfleet-<pid>@<host>, "
    "unique among the workers of one machine).",
)
@click.option(
    "--split",
    is_flag=True,
    help="One Celery node per slot (NAME.1@host, NAME.2@host, ... in Flower), each with "
    "one pool process: their hand-overs from one run to the next go on side by side, "
    "which many short runs feel (the embedded mode's local workers run so). Linux; "
    "one Ctrl-C stops them as it stops one worker.",
)
@click.option("--loglevel", default="INFO", show_default=True)
@pass_cli
def worker(
    cli: CLIContext,
    concurrency: int | None,
    queues: str | None,
    until_idle: float | None,
    grace: float | None,
    hostname: str | None,
    split: bool,
    loglevel: str,
) -> None:
    """Start a Celery worker for evalfleet runs on this machine.

    \b
    Examples:
      scheduler worker --broker redis://broker:6379/0 --broker-password-file /run/secrets/redis
      scheduler worker --queues evalfleet,gpu
      scheduler worker --concurrency 2 --until-idle 120 --grace 5    # a CI job
      scheduler worker --concurrency 4 --split    # many short runs: a node per slot
    """
    from fleet.broker import running_embedded_broker
    from fleet.sending import configured_queue
    from scheduler.embedded import worker_command

    url = cli.broker or running_embedded_broker()
    if url is None:
        raise InputError(
            "no broker: pass --broker URL or set EVALFLEET_BROKER_URL (a worker joins the "
            "embedded Redis under ./.evalfleet only while a `scheduler submit` here runs it)"
        )
    # Celery's default, celery@HOST, is the same for every worker of a machine:
    # Flower then shows one. The pid stays the worker's own across the exec below.
    command = worker_command(
        concurrency or os.cpu_count() or 1,
        (queues or configured_queue()).split(","),
        hostname or f"evalfleet-{os.getpid()}@%h",
        loglevel,
    )
    if until_idle is not None:
        command += ["--until-idle", f"{until_idle:g}"]
    if grace is not None:
        command += ["--grace", f"{grace:g}"]
    if split:
        command.append("--split")
    os.execvpe(command[0], command, {**os.environ, **_handed_over(url)})


def _handed_over(url: str) -> dict[str, str]:
    """The variables that give the worker its broker: the URL without its password, and
    the password on a pipe the worker inherits across the exec (read once, then empty):
    in no argument or variable of the worker, whose agents may read them."""
    env = {ENV_BROKER: with_password(url, None)}
    password = urlsplit(url).password
    if password:
        read, write = os.pipe()
        os.write(write, unquote(password).encode() + b"\n")  # far below a pipe's buffer
        os.close(write)
        os.set_inheritable(read, True)
        env[ENV_PASSWORD_FILE] = f"/dev/fd/{read}"
    return env
