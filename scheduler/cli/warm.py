"""`scheduler warm`: this user's warm processes (scheduler.warm), and stopping them."""

from __future__ import annotations

import click


@click.command("warm")
@click.option("--stop", is_flag=True, help="Stop this Python's (the next command runs cold).")
@click.option(
    "--all",
    "every",
    is_flag=True,
    help="With --stop: every one of this user's, another checkout's or venv's too.",
)
def warm(stop: bool, every: bool) -> None:
    """Show this user's warm processes, which run commands without a cold start.

    After a command that ran cold, one is left for the next (EVALFLEET_WARM=0:
    never). It leaves by itself after EVALFLEET_WARM_IDLE_S seconds (default 900)
    with nothing to do, and when the code it imported changes.

    \b
    Examples:
      scheduler warm
      scheduler warm --stop
      scheduler warm --stop --all
    """
    from scheduler import warm as warm_processes

    if every and not stop:
        raise click.UsageError("--all goes with --stop")
    if stop:
        stopped, left = warm_processes.stop(every)
        click.echo(f"stopped {len(stopped)} warm process(es)" + _pids(stopped))
        if left:
            click.echo(
                f"left {len(left)} of another Python or settings running" + _pids(left)
                + ": `scheduler warm --stop --all` stops them too"
            )  # fmt: skip
        return
    found = warm_processes.running()
    if not found:
        off = " (EVALFLEET_WARM=0: none is used or started)" if not warm_processes.enabled() else ""
        click.echo(f"no warm process{off}")
    for path, pid, mine, answers in found:
        whose = "this Python's" if mine else "another Python's or settings'"
        state = "" if answers else ", starting"
        click.echo(f"pid {pid}  {path}  ({whose}{state})")


def _pids(pids: list[int]) -> str:
    return f": pid {', '.join(map(str, pids))}" if pids else ""
