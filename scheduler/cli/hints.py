"""The commands the CLI suggests (`scheduler report ID --full`, `e.g. scheduler show RUN`)
made complete for the broker the user named on the command line.

A command given `--broker URL` prints hints that, followed as printed, would go to
the embedded Redis of the current folder (or fail: "no broker given"). Each hint
for a command that talks to a broker gets the same `--broker` (and
`--broker-password-file`) words. A password written inside the URL is never
printed: the hint names the URL without it and a `--broker-password-file FILE`
to fill in, unless the password comes from the environment, which the user's
next command has too. A broker from EVALFLEET_BROKER_URL needs nothing: the
next command reads the same variable.

Only what the CLI prints to the terminal is completed: a report written as
markdown, HTML or for GitHub is a document read elsewhere, by people with a
broker of their own.
"""

from __future__ import annotations

import re
import shlex
from urllib.parse import urlsplit

from core.broker_url import with_password

# The commands that take --broker (tests/unit/scheduler/cli/test_hints.py holds this
# to the CLI's own).
BROKER_COMMANDS = frozenset(
    {
        "submit", "resume", "cancel", "rejudge", "rescore", "list", "status", "report",
        "compare", "show", "delete", "prune", "worker",
    }
)  # fmt: skip
# A hint's command: in backticks, or a line of its own after "e.g. " (the brief
# report's failure reasons); what follows a redirection or a pipe is not its own.
_HINT = re.compile(
    r"(?P<open>`|^[ \t]*e\.g\. )scheduler (?P<name>[a-z][a-z-]*)(?P<args>[^`\n]*?)"
    r"(?P<tail> [>|][^`\n]*)?(?P<close>`|$)",
    re.MULTILINE,
)
# The placeholder a hint writes where any broker will do.
_ANY_BROKER = "--broker URL"
# Where the user is to put the password the hint leaves out.
PASSWORD_FILE = "FILE"


def broker_words(url: str, password_file: str | None, password_in_environment: bool) -> str:
    """The words that name the broker as the user named it: `url` as typed (a valid
    one), without a password; `password_file` as given on the command line (None: not
    given there); `password_in_environment`: the user's variables hold it."""
    words = ["--broker", shlex.quote(with_password(url, None))]
    if password_file is not None:
        words += ["--broker-password-file", shlex.quote(password_file)]
    elif urlsplit(url).password and not password_in_environment:
        words += ["--broker-password-file", PASSWORD_FILE]
    return " ".join(words)


def with_broker(text: str, words: str) -> str:
    """`text` with `words` added to every hinted command that talks to a broker (in
    place of a `--broker URL` placeholder); without words (a broker from the
    environment, or none named), a placeholder is taken out: the next command finds
    the broker as this one did."""

    def completed(hint: re.Match[str]) -> str:
        args = hint["args"]
        if hint["name"] not in BROKER_COMMANDS:
            return hint[0]
        if _ANY_BROKER in args:
            args = (
                args.replace(_ANY_BROKER, words) if words else args.replace(f" {_ANY_BROKER}", "")
            )
        elif words and "--broker" not in args.split():
            args = f"{args} {words}"
        return f"{hint['open']}scheduler {hint['name']}{args}{hint['tail'] or ''}{hint['close']}"

    return _HINT.sub(completed, text)
