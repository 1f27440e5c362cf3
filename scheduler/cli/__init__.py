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

from scheduler.cli.context import Commands
from scheduler.interrupt import catch, interrupted, raise_if_lost

# Each command's module is imported only when that command runs (or `--help` lists
# them all): `scheduler status` need not import Celery, the preflight or the model
# server, a fifth of a cold start, and the tests start the CLI hundreds of times.
COMMANDS = {
    "validate": "validate:validate",
    "preflight": "preflight:preflight",
    "schema": "validate:schema",
    "submit": "running:submit",
    "resume": "running:resume",
    "cancel": "running:cancel",
    "rejudge": "versions:rejudge",
    "rescore": "versions:rescore",
    "list": "reading:list_",
    "status": "reading:status",
    "report": "report:report",
    "compare": "reading:compare",
    "show": "show:show",
    "delete": "deletion:delete",
    "prune": "deletion:prune",
    "worker": "worker:worker",
    "model-server": "model_server:model_server",
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
