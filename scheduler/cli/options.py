"""The options several commands share, defined once: each keeps its value on the
command's CLIContext (`_kept`) or is passed to the command as usual."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from core.broker_url import ENV_BROKER, ENV_PASSWORD, ENV_PASSWORD_FILE
from core.stats.choices import CORRECTIONS, PLANNING_ICC
from scheduler.cli.context import CLIContext
from scheduler.cli.hints import broker_words
from scheduler.report.formats import FORMATS, NONFINITE

F = TypeVar("F", bound=Callable[..., Any])


def _kept(
    name: str, *decls: str, check: Callable[[Any], object] | None = None, **options: Any
) -> Callable[[F], F]:
    """A click option whose value the command finds on its CLIContext as `name`, not as
    a parameter; `check` sees the value first (and raises to stop the command before
    it starts)."""

    def keep(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if check is not None:
            check(value)
        setattr(ctx.ensure_object(CLIContext), name, value)

    return click.option(*decls, expose_value=False, callback=keep, **options)


def _take_broker(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """The broker's URL with its password, kept on the CLIContext and blanked at once
    wherever this process shows it (fleet.broker.take_broker); a malformed URL, or an
    unreadable password file, stops the command before it starts. A broker named on
    the command line is named again in the commands the CLI suggests."""
    from fleet.broker import take_broker

    cli = ctx.ensure_object(CLIContext)
    # Read before take_broker takes the password's variables out of the environment.
    in_environment = any(os.environ.get(name) for name in (ENV_PASSWORD, ENV_PASSWORD_FILE))
    cli.broker = take_broker(value, cli.broker_password_file)
    if value and ctx.get_parameter_source("broker") is ParameterSource.COMMANDLINE:
        given = ctx.get_parameter_source("broker_password_file") is ParameterSource.COMMANDLINE
        password_file = cli.broker_password_file if given else None
        cli.broker_words = broker_words(value, password_file, in_environment)


_broker_url = click.option(
    "--broker",
    expose_value=False,
    callback=_take_broker,
    envvar=ENV_BROKER,
    default=None,
    metavar="URL",
    help="Shared Redis broker (redis://, rediss:// or redis+socket://), best without its "
    f"password (--broker-password-file, or {ENV_PASSWORD}). Default: {ENV_BROKER}, "
    "else the embedded Redis under ./.evalfleet (`scheduler worker` joins it only while "
    "it runs).",
)
_broker_password_file = _kept(
    "broker_password_file",
    "--broker-password-file",
    # Read before --broker's callback, wherever it is on the command line: that one
    # puts the two together.
    is_eager=True,
    envvar=ENV_PASSWORD_FILE,
    type=click.Path(dir_okay=False),
    default=None,
    metavar="FILE",
    help="The broker's password, the first line of FILE (kept out of the command line "
    "and the environment, where other processes can read it).",
)


def broker_option(command: F) -> F:
    return _broker_url(_broker_password_file(command))


workers_option = _kept(
    "workers",
    "--workers",
    type=click.IntRange(1, 512),
    default=None,
    help="Embedded mode: runs at once, each slot a local worker of its own (default: the "
    "CPU count; a submit or resume starts no more than it has runs to run).",
)
nonfinite_option = _kept(
    "nonfinite",
    "--json-nonfinite",
    type=click.Choice(NONFINITE),
    default="string",
    show_default=True,
    help='JSON: write Infinity and NaN as the strings "Infinity"/"NaN", or as null '
    "(for jq, pandas and other readers of strict JSON numbers).",
)


# Formats without the table's sections: --full has nothing to add to them (markdown,
# html and json hold every section anyway).
_WITHOUT_SECTIONS = {
    "github": "a pull request's summary, which leaves the sections out: --format markdown "
    "has every one",
    "csv": "rows of figures, without sections (--runs gives a row per run)",
}


def format_option(choices: tuple[str, ...] = FORMATS) -> Callable[[F], F]:
    fmt = _kept("fmt", "--format", type=click.Choice(choices), default="table", show_default=True)
    if choices != FORMATS:  # a comparison: one table, nothing to shorten
        return fmt
    full = _kept(
        "full",
        "--full",
        is_flag=True,
        help="The table format with every section (default: one screen: each tier's "
        "verdict, the most common failure reasons, where the rest is); markdown, html and "
        "json have every section anyway, github and csv none.",
    )
    return lambda command: fmt(full(_formats_agree(command)))


def json_option(help_text: str) -> Callable[[F], F]:
    """`--json`, the same as `--format json` (a command with format_option)."""
    return _kept("as_json", "--json", is_flag=True, help=help_text)


def _formats_agree(command: F) -> F:
    """`command`, refusing format options that say different things (a usage error, exit
    2: one of them would be ignored without a word), and with `--json` as --format json."""

    @functools.wraps(command)
    def checked(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        cli = ctx.ensure_object(CLIContext)
        given = ctx.get_parameter_source("format") is ParameterSource.COMMANDLINE
        if cli.as_json:
            if given and cli.fmt != "json":
                raise click.UsageError(
                    f"--json is --format json: it cannot go with --format {cli.fmt}; leave "
                    "out one of them"
                )
            cli.fmt = "json"
        if cli.full and cli.fmt in _WITHOUT_SECTIONS:
            raise click.UsageError(
                f"--full gives every section of the report, and --format {cli.fmt} is "
                f"{_WITHOUT_SECTIONS[cli.fmt]}; leave out --full"
            )
        return command(*args, **kwargs)

    return checked  # type: ignore[return-value]


def wait_option(help_text: str) -> Callable[[F], F]:
    return _kept("wait", "--wait", is_flag=True, help=help_text)


allow_missing_keys_option = click.option(
    "--allow-missing-keys",
    # The name it had while only the judge's key was checked, kept for scripts that use it.
    "--allow-missing-judge-key",
    "allow_missing_keys",
    is_flag=True,
    help="Go on although an API key the matrix needs (an agent's, the judge's) is not set "
    "here (when the workers have it); without it that is an error, as every run that "
    "needs the key would fail.",
)


icc_option = click.option(
    "--icc",
    type=click.FloatRange(0, 1),
    default=PLANNING_ICC,
    show_default=True,
    help="Intra-scenario correlation the planning assumes (a report's "
    "'implied intra-scenario correlation' measures it).",
)


def budget_option(help_text: str) -> Callable[[F], F]:
    return click.option(
        "--budget",
        type=click.FloatRange(min=0, min_open=True),
        default=None,
        metavar="USD",
        help=help_text,
    )


def correction_option(default: str | None, default_help: str = "") -> Callable[[F], F]:
    return click.option(
        "--correction",
        type=click.Choice(CORRECTIONS),
        default=default,
        show_default=default is not None,
        help=" ".join(
            [
                "Multiple-comparison correction of every test: holm (family-wise error rate),",
                "bh (Benjamini-Hochberg, false discovery rate) or none.",
                *([default_help] if default_help else []),
            ]
        ),
    )
