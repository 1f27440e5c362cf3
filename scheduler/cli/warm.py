"""`scheduler warm`: this user's warm processes (scheduler.warm), and stopping them."""

from __future__ import annotations

import click


@click.command("warm")
@click.option("--stop", is_flag=True, help="Stop them (the next command runs cold).")
def warm(stop: bool) -> None:
    """Show this user's warm processes, which run commands without a cold start.

    After a command that ran cold, one is left for the next (EVALFLEET_WARM=0:
    never). It leaves by itself after EVALFLEET_WARM_IDLE_S seconds (default 900)
    with nothing to do, and when the code it imported changes.

    \b
    Examples:
      scheduler warm
      scheduler warm --stop
    """
    from scheduler import warm as warm_processes

    if stop:
        stopped = warm_processes.stop_all()
        click.echo(f"stopped {len(stopped)} warm process(es)" + _pids(stopped))
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
