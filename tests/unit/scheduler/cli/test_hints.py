"""scheduler.cli.hints: the commands the CLI suggests, completed for the broker given."""

from __future__ import annotations

import click

from scheduler.cli import COMMANDS, main
from scheduler.cli.hints import BROKER_COMMANDS, broker_words, with_broker

WORDS = "--broker redis://h:6379/0"


def test_the_commands_completed_are_those_that_take_a_broker() -> None:
    with click.Context(main) as ctx:
        commands = {name: main.get_command(ctx, name) for name in COMMANDS}
    taking = {
        name
        for name, command in commands.items()
        if command is not None and any("--broker" in p.opts for p in command.params)
    }
    assert taking == BROKER_COMMANDS


def test_every_form_of_hint_gets_the_broker_where_the_command_still_reads() -> None:
    text = (
        "see `scheduler report EXP --format json --runs > FILE`; start one with "
        "`scheduler worker --broker URL --queues q`; `scheduler schema` lists keys; "
        "`scheduler resume` sends it; `--format html > report.html`\n"
        "      e.g. scheduler show a:T0:s1:2"
    )
    assert with_broker(text, WORDS) == (
        f"see `scheduler report EXP --format json --runs {WORDS} > FILE`; start one with "
        f"`scheduler worker {WORDS} --queues q`; `scheduler schema` lists keys; "
        f"`scheduler resume {WORDS}` sends it; `--format html > report.html`\n"
        f"      e.g. scheduler show a:T0:s1:2 {WORDS}"
    )
    # A broker from the environment: the next command reads it too; the placeholder goes.
    assert with_broker(text, "") == text.replace("worker --broker URL --queues", "worker --queues")


def test_a_password_in_the_url_is_left_out_and_asked_for_by_file() -> None:
    url = "redis://user:s3cret@h:6379/0"
    assert broker_words(url, None, False) == (
        "--broker redis://user@h:6379/0 --broker-password-file FILE"
    )
    # The user's variables hold it: their next command reads them too.
    assert broker_words(url, None, True) == "--broker redis://user@h:6379/0"
    assert broker_words("redis://h:6379/0", "/run/my pw", False) == (
        "--broker redis://h:6379/0 --broker-password-file '/run/my pw'"
    )
    assert broker_words("rediss://h:6380/0?ssl_ca_certs=/ca.pem&x=1", None, False) == (
        "--broker 'rediss://h:6380/0?ssl_ca_certs=/ca.pem&x=1'"
    )
