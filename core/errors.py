"""Every error evalfleet raises for a caller to see, in one hierarchy with one base.

    EvalfleetError
    ├── InputError ─ bad input, said before anything started (the CLI exits 2)
    │   ├── ConfigError ─ problems in a matrix or rubric file, each with its place
    │   ├── SettingError (ValueError) ─ an EVALFLEET_* number that is not one
    │   ├── BrokerURLError (ValueError) ─ a broker URL Celery and redis-py cannot use
    │   ├── BundleError (ValueError) ─ files that cannot be shipped to the workers
    │   ├── PlanTooLarge (ValueError) ─ more runs than one experiment may have
    │   └── ExperimentNotFound (KeyError) ─ no experiment of that id in the store
    │       ├── ExperimentLost ─ some of its keys are left, its record is not
    │       └── LostInRestart ─ submitted before the broker restarted keeping nothing
    ├── FleetError ─ a good command the fleet could not carry out (the CLI exits 1)
    │   ├── BrokerUnreachable ─ the configured broker does not answer
    │   ├── EmbeddedError (RuntimeError) ─ the embedded Redis would not start
    │   ├── ResumeInProgress ─ another resume of the experiment is sending its runs
    │   ├── PartlySent ─ the broker refused a write part-way through sending runs
    │   └── WorkersDied (RuntimeError) ─ the local workers exited before the report
    ├── LLMError ─ a call to a model failed for good; the message is the reason to record
    │   ├── UnusableURL ─ the URL cannot be requested at all
    │   └── DeadlineExceeded ─ no complete answer before the call's deadline
    ├── AnswerError (ValueError) ─ a judge's answer not in the rubric's format
    ├── WorkspaceTooLarge (ValueError) ─ a workspace above `workspace_archive.max_bytes`
    ├── SetupError ─ a run's workspace could not be prepared (an infrastructure error)
    ├── RetryLater ─ a provider outage: the run goes back to the queue for later
    ├── ExperimentPaused ─ a run of an interrupted experiment: dropped until a resume
    └── RunInProgress ─ a copy of a run that another delivery is running: dropped

The second bases keep the callers that catch ValueError, KeyError or RuntimeError
(pydantic's validators, dict-like lookups) working. InputError and FleetError are
raised themselves where no narrower class says more. A few exceptions stay private
to their module, outside the hierarchy, because no caller ever sees them: they
carry control flow within one function's reach (worker.grace's HandBack, a
BaseException on purpose, and the OpenAI loop's deadline and API signals).

Pure: imports nothing of evalfleet's, so the pure packages raise these too.
"""

from __future__ import annotations

import time
from collections.abc import Sequence


class EvalfleetError(Exception):
    """The base of every error evalfleet raises for a caller to handle."""


class InputError(EvalfleetError):
    """Bad input (a file, an option, an id); nothing was started."""


class FleetError(EvalfleetError):
    """The input was good, but the broker, the embedded Redis or the workers failed it."""


class ConfigError(InputError):
    """One or more problems in a config file. The CLI prints them and exits 2.
    `unread`: the file could not be read into its model, so the checks of what it
    says (its commands, files and keys) are still to come."""

    def __init__(self, problems: Sequence[object], *, unread: bool = False):
        self.problems = list(problems)
        self.unread = unread
        super().__init__("\n".join(str(p) for p in self.problems))


class SettingError(InputError, ValueError):
    """An EVALFLEET_* number that is not one; the message names the variable and the fix."""


class BrokerURLError(InputError, ValueError):
    """A broker URL that Celery and redis-py cannot use; the message names the fix."""


class BundleError(InputError, ValueError):
    """The files cannot be shipped (too large, unreadable): the submit stops, nothing sent."""


class PlanTooLarge(InputError, ValueError):
    """More runs than one experiment may have (EVALFLEET_MAX_RUNS)."""


class ExperimentNotFound(InputError, KeyError):
    """args: the id, then optionally a "did you mean" of the store's nearest ids."""

    def __str__(self) -> str:
        hint = f"; {self.args[1]}" if len(self.args) > 1 and self.args[1] else ""
        return f"no experiment {self.args[0]!r} in this store{hint} (see `scheduler list`)"


class ExperimentLost(ExperimentNotFound):
    """Keys of the experiment are left but its record is gone: the broker lost it (a
    Redis restarted without persistence, or evicting keys), or runs in flight wrote
    after a delete."""

    def __str__(self) -> str:
        exp_id = self.args[0]
        return (
            f"experiment {exp_id!r} is only partly in this store: its record is gone (a "
            "broker restarted without persistence, or one that evicts keys, loses it); "
            f"`scheduler delete {exp_id} --force --yes` removes what is left, and "
            "submitting the matrix again runs it anew"
        )


class LostInRestart(ExperimentNotFound):
    """args: the id, when it was submitted and when the broker restarted after that,
    keeping nothing on disk: nothing of the experiment is left to find."""

    def __str__(self) -> str:
        exp_id, submitted, restarted = self.args[:3]
        return (
            f"no experiment {exp_id!r} in this store: it was submitted at {_utc(submitted)}, "
            f"and the broker restarted at {_utc(restarted)} keeping nothing on disk, which "
            "lost it; submit the matrix again, and set `appendonly yes` on the broker so "
            "that a restart keeps experiments"
        )


def _utc(when: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(when))


class BrokerUnreachable(FleetError):
    """The configured broker does not answer."""


class ResumeInProgress(FleetError):
    """Another resume of the experiment is working out what to send and sending it:
    two at once would each send the same runs."""

    def __init__(self, exp_id: str, holder: str):
        super().__init__(
            f"experiment {exp_id} is being resumed by another `scheduler resume` ({holder}); "
            "nothing was sent: wait for it, then run `scheduler status` to see what is left"
        )


class PartlySent(FleetError):
    """The broker refused a write (full, or gone) after some of an experiment's runs
    were sent. Its whole plan is recorded first, so a resume sends exactly the rest."""

    def __init__(self, exp_id: str, sent: int, count: int, cause: object):
        super().__init__(
            f"the broker refused a write after {sent:,} of {count:,} runs of experiment "
            f"{exp_id} were sent ({cause}); the experiment and its whole plan are "
            f"recorded: `scheduler resume {exp_id}` sends exactly the runs not sent, once "
            f"the broker takes writes again (`scheduler delete {exp_id} --force --yes` "
            "drops it instead)"
        )


class EmbeddedError(FleetError, RuntimeError):
    """The embedded Redis of ./.evalfleet could not be started."""


class WorkersDied(FleetError, RuntimeError):
    """The local workers exited while an experiment or a report version was followed."""


class LLMError(EvalfleetError):
    """The call failed for good; the message is the reason to record."""


class UnusableURL(LLMError):
    """The URL cannot be requested at all (no scheme, unknown scheme)."""


class DeadlineExceeded(LLMError):
    """The call's deadline passed before a complete answer arrived."""


class AnswerError(EvalfleetError, ValueError):
    """The judge's answer does not match the required format; the message says how."""


class WorkspaceTooLarge(EvalfleetError, ValueError):
    """The compressed workspace is above the matrix's `workspace_archive.max_bytes`."""


class SetupError(EvalfleetError):
    """The workspace could not be prepared: an infrastructure error, not the agent's."""


class RetryLater(EvalfleetError):
    """The run met a provider outage and has deliveries left: send it again in `wait_s`.
    `holder`: the lease this delivery keeps through the wait, which the next one takes."""

    def __init__(self, wait_s: float, outages: list[str], holder: str = ""):
        super().__init__(f"retry in {wait_s:g} s after: {outages[-1]}")
        self.wait_s = wait_s
        self.outages = outages
        self.holder = holder


class ExperimentPaused(EvalfleetError):
    """The run's experiment is interrupted (an embedded submit stopped by Ctrl-C): its
    message is dropped, nothing recorded; `scheduler resume` sends the run again."""

    def __init__(self, exp_id: str, run_id: str):
        super().__init__(
            f"run {run_id} dropped: experiment {exp_id} was interrupted; "
            f"`scheduler resume {exp_id}` sends it again"
        )


class RunInProgress(EvalfleetError):
    """Another delivery of the run holds its live lease: this copy of its message (a
    broker's restore, a resend racing the run) is dropped; if that delivery dies, its
    lease lapses and the sweep sends the run again."""

    def __init__(self, run_id: str, lease_left_s: float, holder: str = ""):
        super().__init__(
            f"run {run_id} is in progress elsewhere (its lease runs {lease_left_s:.0f} s more)"
        )
        self.holder = holder
