"""`scheduler`: validate, submit, follow and report evalfleet experiments.

With --broker URL (or EVALFLEET_BROKER_URL) every command talks to that shared
Redis; without, to the embedded Redis of ./.evalfleet, started on demand. One
small module per command or group of commands, each doing options, prompts and
printing over what the Python API (evalfleet) publishes: the Fleet's methods, and
validate and prepare; what they share is scheduler.cli.context.
"""

from __future__ import annotations

import signal
import sys

import click

from scheduler.cli.context import Command, Commands
from scheduler.cli.deferred import defer
from scheduler.interrupt import catch, interrupted, raise_if_lost

# The CLI talks to Redis through redis-py's blocking client only.
defer("redis.asyncio")

# Each command's module is imported only when that command runs, and `--help` lists
# them from here: `scheduler status` need not import Celery, the preflight or the
# model server, nor `scheduler --help` anything but click (a cold start's imports
# were most of its time, and the tests start the CLI hundreds of times). The line
# here is each command's short help, in `--help` of the group as in its own.
COMMANDS = {
    "validate": Command("validate:validate", "Check a matrix and say what it can detect."),
    "preflight": Command("preflight:preflight", "Run each tier x scenario once, locally."),
    "schema": Command("validate:schema", "Print the JSON Schema of matrix.yaml."),
    "submit": Command("running:submit", "Validate a matrix and run every run of it."),
    "resume": Command("running:resume", "Re-send an experiment's runs that have no result."),
    "cancel": Command("running:cancel", "Cancel an experiment's runs not yet started."),
    "rejudge": Command("versions:rejudge", "Judge a finished experiment's runs again."),
    "rescore": Command("versions:rescore", "Run a finished experiment's gates again."),
    "list": Command("reading:list_", "List experiments, with what each takes in Redis."),
    "status": Command("reading:status", "Progress of an experiment (default: the latest)."),
    "report": Command("report:report", "Print an experiment's report."),
    "compare": Command("reading:compare", "Compare experiment B against A."),
    "show": Command("show:show", "Show one run with its evidence."),
    "delete": Command("deletion:delete", "Delete an experiment and all stored with it."),
    "prune": Command("deletion:prune", "Delete the experiments older than an age."),
    "worker": Command("worker:worker", "Start a Celery worker on this machine."),
    "model-server": Command("model_server:model_server", "Answer agent CLIs from a script."),
    "warm": Command("warm:warm", "Show or stop the processes that run commands warm."),
}


@click.group(
    cls=Commands,
    lazy_commands=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
def main() -> None:
    """Run AI-agent evaluation experiments over a Celery worker fleet.

    \b
    Examples:
      scheduler validate examples/matrix.yaml
      scheduler submit examples/matrix.yaml             # embedded: no servers needed
      scheduler submit matrix.yaml --broker redis://host:6379/0 --wait
      scheduler report EXP --format markdown
    """


def run() -> int:
    """`main` as the `scheduler` console script runs it; its exit status.

    TERM (a cancelled CI job, `kill`) and HUP (a closed terminal) stop a command as
    Ctrl-C does: an embedded experiment's workers and Redis run in sessions of their
    own, out of the signal's reach, and only the command's own clean-up (its
    CLIContext's) stops them."""
    catch(signal.SIGTERM, signal.SIGHUP)
    code: object
    try:
        # Not standalone: click would end an interrupt outside a command (parsing its
        # options) as "Aborted!", exit 1.
        code = main.main(standalone_mode=False) or 0
        raise_if_lost()  # the command ended, but so had the user asked
    except click.ClickException as exc:
        exc.show()
        code = exc.exit_code
    except SystemExit as exc:
        code = exc.code
    except BaseException as exc:
        if not (isinstance(exc, click.Abort) or interrupted(exc)):
            raise
        print("\ninterrupted", file=sys.stderr)
        code = 130
    if isinstance(code, str):  # what sys.exit would print
        print(code, file=sys.stderr)
    return code if isinstance(code, int) else int(code is not None)
