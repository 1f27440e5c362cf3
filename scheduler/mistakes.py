"""A new user's costly mistakes, found before anything is queued (`validate`, `submit`).

Each would otherwise show only once money is spent:
- A judged scenario whose judge API key is not set: every agent runs, then each
  judged run becomes an infrastructure error. An error, unless the caller says the
  workers have the key (`--allow-missing-keys`, once `--allow-missing-judge-key`):
  `judge: {enabled: auto}` judges only when the key is set, and the summary's judge
  line says what runs will get.
- An agent (a preset, or any `api_key_env`) whose API key is not set: every run of its
  tiers would end as an agent error ("Not logged in") counted in the tier's pass rate,
  a failure the agent never had a chance at. An error, under the same flag.
- An agent command that runs a file next to the matrix by a relative path
  (`./agent.py`, `agent.py`, `python3 agent.py`): commands run in each run's own
  workspace, a fresh folder, so the file is not there (exit 127, or another file of
  that name). An error, unless the run's workspace gets that file (a tier's
  `files:`, the scenario's `workspace:` template, or a `setup:` command naming it).
  The fix is `$EVALFLEET_MATRIX_DIR/agent.py`, the matrix's folder on every worker.
- A gate's command (every gate type with one, `script` included), a setup command or
  a scenario's `reference:` that names a file under `$EVALFLEET_MATRIX_DIR` which the
  matrix folder lacks (a typo in `checks/test.py`): every run's gate would fail, counted
  as the agent failing, or every setup would. An error naming the file and the fix.
  (`./check.sh` is the workspace's, which the agent or a template may fill: no error.)
- An agent command run by a relative path that is not next to the matrix
  (`./run.sh`): a warning, as the workspace may well hold it; it says where
  commands run.
- An agent command whose program is neither on the agent's PATH here nor a bash
  builtin (`claud -p ...`), or is an absolute path with no program there: every run
  would end "agent could not start (exit 127)". A warning: the workers may have it.
- An agent whose runs' cost cannot be known: its model has no price (`pricing:`
  or built in), or a preset that picks its model itself (Gemini CLI, for each
  request) is given none. A warning: the runs are still worth running, but their
  cost, cost of pass and a budget's count are unknown.
- Agents that would run unconfined (`sandbox: none`, or `auto` on a machine not
  running as root): a warning, since such an agent could rewrite or read what it
  is graded with (worker.confinement); and, for agents that run as a user of their
  own (`auto`, `user`), the matrix file, rubrics, solutions and hidden tests of the
  submitter's folder that other users of this machine may read, which a run user of
  an embedded run (or of a worker on this machine) could: the fixes are `chmod o-rx`
  on the folder, or `sandbox: bwrap`, whose jail masks it.

Only what a command runs is looked at (scheduler.shellwords): the command word of
each simple command and the script an interpreter is given. Its arguments are not:
`touch out.txt` or `my-agent --config conf.yaml` name files the agent writes or
reads in its workspace, which a file of that name beside the matrix says nothing
about; nor is a `case`'s pattern such as `T1/s2)`, nor a word of arithmetic, an
array's value or a `[[ ... ]]` test (`$((RANDOM % 2))`, `arr=(a b)`).

Each problem is a ConfigProblem placed at its key in the matrix file, as the
matrix's validation errors are; errors are raised together as one ConfigError.
"""

from __future__ import annotations

import os
import re
import shutil
import string
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from core.errors import ConfigError
from core.matrix import PRESETS, CommandGate, ConfigProblem, Matrix, Scenario, Tier, problem_at
from core.matrix.suggestions import did_you_mean
from core.metrics.pricing import BUILTIN_PRICES, price_for
from scheduler.shellwords import Run, runs_of, words_of

# One flag for every API key this machine lacks and the workers may hold; the judge's
# own name for it is kept as an alias (scheduler.cli.options).
ALLOW_MISSING_KEYS = "--allow-missing-keys"
_MATRIX_DIR = "$EVALFLEET_MATRIX_DIR"
# The ways a command or a PATH names the matrix's folder.
_MATRIX_DIR_WORDS = (_MATRIX_DIR, "${EVALFLEET_MATRIX_DIR}")


def refuse_mistakes(
    matrix: Matrix, matrix_file: str | Path, *, allow_missing_keys: bool = False
) -> list[ConfigProblem]:
    """Raise ConfigError with every mistake that would waste the experiment; return the
    warnings (what may be a mistake but need not be)."""
    path = Path(matrix_file)
    errors = _relative_files(matrix, path) + _missing_matrix_files(matrix, path)
    if not allow_missing_keys:
        errors += _missing_agent_keys(matrix, path) + _missing_judge_key(matrix, path)
    if errors:
        raise ConfigError(errors)
    return (
        _relative_programs(matrix, path)
        + _off_path(matrix, path)
        + _unknown_costs(matrix, path)
        + _unrecorded_costs(matrix, path)
        + _unconfined(matrix, path)
        + _images_without_docker(matrix, path)
        + _host_gates(matrix, path)
    )


def _images_without_docker(matrix: Matrix, path: Path) -> list[ConfigProblem]:
    """A tier that would run benchmark tasks needing their own image on the worker's
    system: each such run an infrastructure error (worker.confinement), not judged on
    the wrong system. A warning: the tier's other tasks run."""
    imaged = [s.id for s in matrix.scenarios if s.has_image]
    if not imaged:
        return []
    named = ", ".join(imaged[:5]) + (f" and {len(imaged) - 5} more" if len(imaged) > 5 else "")
    local = [
        (index, tier, sandbox)
        for index, tier in enumerate(matrix.tiers)
        if (sandbox := matrix.agent_for(tier).sandbox) != "docker"
    ]
    if not local:
        return []
    index, first, _ = local[0]
    own = first.agent is not None and first.agent.sandbox is not None
    sandboxes = ", ".join(sorted({f"`sandbox: {sandbox}`" for _, _, sandbox in local}))
    return [
        problem_at(
            path,
            ("tiers", index, "agent", "sandbox") if own else ("tiers", index),
            f"{_tiers([t.id for _, t, _ in local])} run under {sandboxes}, but {named} "
            f"{'needs its' if len(imaged) == 1 else 'need their'} own image "
            "(`environment.image` or a Dockerfile to build): every such run would be an "
            "infrastructure error; set `sandbox: docker` on the agent (the matrix's or the "
            "tier's)",
        )
    ]


def _host_gates(matrix: Matrix, path: Path) -> list[ConfigProblem]:
    """A gate that says `where: host` in an experiment with `sandbox: docker` tiers runs
    on the worker as the worker's user, outside the run's container and its user: what
    the agent left and the gate runs (its module, its tests, its scripts) would run with
    the worker's rights (root's on a root worker)."""
    if not any(matrix.agent_for(tier).sandbox == "docker" for tier in matrix.tiers):
        return []
    return [
        problem_at(
            path,
            ("scenarios", index, "evaluation", "gates", number, "where"),
            "`where: host` runs this gate on the worker as the worker's user (root on a "
            "root worker), outside the run's container: a command that runs what the agent "
            "left (imports its module, runs its tests or scripts) gives the agent's code the "
            "worker's rights. Remove `where: host` (the gate then runs in the run's "
            "container) unless the command only reads the workspace's files",
        )
        for index, scenario in enumerate(matrix.scenarios)
        for number, gate in enumerate(scenario.evaluation.gates)
        if getattr(gate, "where", None) == "host"
    ]


def _missing_judge_key(matrix: Matrix, path: Path) -> list[ConfigProblem]:
    judged = [s.id for s in matrix.scenarios if s.evaluation.judge_enabled]
    key = matrix.judge.api_key_env if matrix.judge is not None else None
    if not judged or not key or os.environ.get(key):
        return []
    return [
        problem_at(
            path,
            ["judge", "api_key_env"],
            f"{key} is not set, and {_scenarios(judged)} judged: every agent would run, then "
            f"each judged run would end as an infrastructure error for want of the key. Set "
            f"{key}, or give the scenario's judge `enabled: auto` (judged only when the key "
            f"is set); if the workers have the key and this machine has not, pass "
            f"{ALLOW_MISSING_KEYS}",
        )
    ]


def _missing_agent_keys(matrix: Matrix, path: Path) -> list[ConfigProblem]:
    """Each agent API key variable unset here, once, at the first key that names it
    (the preset, or `api_key_env`), with every tier whose agent reads it."""
    tiers: dict[str, list[str]] = {}
    where: dict[str, tuple[str | int, ...]] = {}
    for index, tier in enumerate(matrix.tiers):
        key = matrix.agent_for(tier).api_key_env
        if not key or os.environ.get(key):
            continue
        tiers.setdefault(key, []).append(tier.id)
        # A preset fills in its key: then the preset is what the matrix says.
        if tier.agent is not None and (tier.agent.api_key_env or tier.agent.preset):
            field = "api_key_env" if tier.agent.api_key_env else "preset"
            loc: tuple[str | int, ...] = ("tiers", index, "agent", field)
        else:
            filled = "api_key_env" in matrix.agent.preset_filled()
            loc = ("agent", "preset" if filled else "api_key_env")
        where.setdefault(key, loc)
    return [
        problem_at(
            path,
            where[key],
            f"{key} is not set, and the agent of {_tiers(ids)} reads it: every run would end "
            f"as an agent error (not logged in), counted in the pass rate. Set {key}; if the "
            f"workers have it and this machine has not, pass {ALLOW_MISSING_KEYS}",
        )
        for key, ids in tiers.items()
    ]


def _unknown_costs(matrix: Matrix, path: Path) -> list[ConfigProblem]:
    """Each agent model without a price, and each preset left to pick its model itself,
    once, at the first key that names it, with every tier it leaves without a cost."""
    tiers: dict[tuple[str, str], list[str]] = {}
    where: dict[tuple[str, str], tuple[str | int, ...]] = {}
    for index, tier in enumerate(matrix.tiers):
        agent = matrix.agent_for(tier)
        preset = agent.preset_spec
        model = agent.model or (preset.default_model if preset is not None else None)
        if model is not None and price_for(model, matrix.pricing) is None:
            found = ("model", model)
        elif model is None and preset is not None and preset.model_choice is not None:
            found = ("preset", str(agent.preset))
        else:
            continue
        tiers.setdefault(found, []).append(tier.id)
        own = tier.agent is not None and getattr(tier.agent, found[0]) is not None
        where.setdefault(found, ("tiers", index, "agent", found[0]) if own else ("agent", found[0]))
    problems = []
    for (key, name), ids in tiers.items():
        unknown = (
            f"so {'its' if len(ids) == 1 else 'their'} runs' cost and cost of pass will be unknown"
        )
        if key == "model":
            # A typo of a priced model is fixed at the model, not with a second price.
            typo = did_you_mean(name, [*matrix.pricing, *BUILTIN_PRICES])
            message = (
                f"{_tiers(ids)}: model {name!r} has no price, {unknown}; "
                + (f"{typo} Else add" if typo else "add")
                + f" it under `pricing:` in the matrix ({name}: {{input: ..., output: ...}}, "
                "$ per 1M tokens)"
            )
        else:
            message = (
                f"{_tiers(ids)}: no `model:` is set and {PRESETS[name].model_choice}, {unknown}; "
                "set `model:` on the agent (the matrix's or the tier's: the CLI is then given "
                "--model), and add its price under `pricing:` if it has no built-in one"
            )
        problems.append(problem_at(path, where[key, name], message))
    return problems


def _unrecorded_costs(matrix: Matrix, path: Path) -> list[ConfigProblem]:
    """Tiers whose agent names a model but reads a plain transcript, which carries no
    usage: their runs' cost is unknown, priced or not (core.metrics.limits)."""
    tiers: list[str] = []
    where: tuple[str | int, ...] = ("agent", "transcript")
    for index, tier in enumerate(matrix.tiers):
        agent = matrix.agent_for(tier)
        if agent.model is None or agent.transcript != "plain":
            continue
        if not tiers and getattr(tier.agent, "transcript", None) is not None:
            where = ("tiers", index, "agent", "transcript")
        tiers.append(tier.id)
    if not tiers:
        return []
    return [
        problem_at(
            path,
            where,
            f"{_tiers(tiers)}: the agent has a model but a plain transcript, which records no "
            f"token usage, so {'its' if len(tiers) == 1 else 'their'} runs' cost and cost of "
            "pass will be unknown (not $0); write events.jsonl with llm_call events, or use "
            "a CLI's transcript format",
        )
    ]


def _tiers(ids: list[str]) -> str:
    return f"tier {ids[0]}" if len(ids) == 1 else f"tiers {', '.join(ids)}"


def _scenarios(ids: list[str]) -> str:
    return f"scenario {ids[0]} is" if len(ids) == 1 else f"scenarios {', '.join(ids)} are"


@dataclass(frozen=True)
class _Command:
    """One tier's agent command and the key of the matrix that sets it."""

    tier: Tier
    loc: tuple[str | int, ...]
    text: str
    runs: list[Run]
    path_has_matrix_dir: bool


def _commands(matrix: Matrix) -> list[_Command]:
    found = []
    for index, tier in enumerate(matrix.tiers):
        agent = matrix.agent_for(tier)
        if agent.kind != "command" or not agent.command:
            continue
        own = tier.agent is not None and tier.agent.command is not None
        loc: tuple[str | int, ...] = (
            ("tiers", index, "agent", "command") if own else ("agent", "command")
        )
        entries = agent.env.get("PATH", "").split(":")
        on_path = any(e in _MATRIX_DIR_WORDS for e in entries)
        found.append(_Command(tier, loc, agent.command, runs_of(agent.command), on_path))
    return found


def _candidates(command: _Command) -> list[tuple[str, bool]]:
    """The files the command runs, as it names them by a relative path, each with
    whether it is the command word itself (else an interpreter's script). A command that
    goes into the matrix's folder (`cd "$EVALFLEET_MATRIX_DIR" && ./agent.py`) runs its
    files by such paths rightly: only its bare program names, which PATH finds, are kept."""
    into_matrix = _INTO_MATRIX_DIR.search(command.text) is not None
    return [
        (run.word, run.program)
        for run in command.runs
        if not run.word.startswith(("/", "~", "-"))
        and "$" not in run.word
        and not (into_matrix and ("/" in run.word or not run.program))
    ]


_INTO_MATRIX_DIR = re.compile(
    r"\b(cd|pushd)\s+[\"']?\$\{?EVALFLEET_MATRIX_DIR\}?[\"']?(\s|;|&|\||$)"
)


def _relative_files(matrix: Matrix, path: Path) -> list[ConfigProblem]:
    if matrix.base_dir is None:
        return []
    problems: dict[tuple[tuple[str | int, ...], str], ConfigProblem] = {}
    for command in _commands(matrix):
        for word, program in _candidates(command):
            if program and "/" not in word and command.path_has_matrix_dir:
                continue  # found on PATH, which holds the matrix folder
            if not (matrix.base_dir / word).is_file():
                continue
            if all(_in_workspace(word, command.tier, s) for s in matrix.scenarios):
                continue
            problems.setdefault(
                (command.loc, word), problem_at(path, command.loc, _move_message(command, word))
            )
    return list(problems.values())


def _move_message(command: _Command, word: str) -> str:
    name = PurePosixPath(word).as_posix()
    fixed = f'"{_MATRIX_DIR}/{name}"'
    suggestion = command.text.replace(word, fixed, 1) if word in command.text else fixed
    return (
        f"{word!r} is a file next to the matrix, but agent commands run in each run's own "
        f"workspace (a fresh folder), where there is no {name}: name it {fixed}, the "
        f"matrix's folder on every worker (command: {suggestion}), or copy it into the "
        f"workspace with the tier's `files: {{{name}: {name}}}`"
    )


def _in_workspace(word: str, tier: Tier, scenario: Scenario) -> bool:
    """Whether a run of `tier` x `scenario` has `word` in its workspace when it starts."""
    name = PurePosixPath(word)
    if any(PurePosixPath(dest) == name for dest in tier.files):
        return True
    if scenario.workspace is not None and (scenario.workspace / name).exists():
        return True
    return any(str(name) in setup for setup in scenario.setup)


def _relative_programs(matrix: Matrix, path: Path) -> list[ConfigProblem]:
    problems: dict[tuple[tuple[str | int, ...], str], ConfigProblem] = {}
    for command in _commands(matrix):
        for word, program in _candidates(command):
            if not program or "/" not in word:
                continue
            if all(_in_workspace(word, command.tier, s) for s in matrix.scenarios):
                continue
            name = PurePosixPath(word).as_posix()
            message = (
                f"{word!r} is run by a relative path: agent commands run in each run's own "
                "workspace, so it must be there when the agent starts (put there by a "
                "scenario's `workspace:` or `setup:`, or a tier's `files:`); a file next to "
                f'the matrix is "{_MATRIX_DIR}/{name}"'
            )
            problems.setdefault((command.loc, word), problem_at(path, command.loc, message))
    return list(problems.values())


# What bash runs without a program (`compgen -b -k` of bash 5.2).
_BASH_WORDS = (
    ". : [ alias bg bind break builtin caller cd command compgen complete compopt continue "
    "declare dirs disown echo enable eval exec exit export false fc fg getopts hash help "
    "history jobs kill let local logout mapfile popd printf pushd pwd read readarray "
    "readonly return set shift shopt source suspend test times trap true type typeset "
    "ulimit umask unalias unset wait if then else elif fi case esac for select while "
    "until do done in function time { } ! [[ ]] coproc"
)
_BASH_OWN = frozenset(_BASH_WORDS.split())


def _off_path(matrix: Matrix, path: Path) -> list[ConfigProblem]:
    problems: dict[tuple[tuple[str | int, ...], str], ConfigProblem] = {}
    for command in _commands(matrix):
        agent = matrix.agent_for(command.tier)
        if agent.preset is not None or agent.sandbox == "docker":
            continue  # a preset's CLI is checked as such; a container has its own programs
        search = _agent_path(matrix, command.tier, command.text)
        for run in command.runs:
            word = run.word
            shipped = _in_matrix_dir(matrix, word)
            if shipped is not None:
                if not shipped.exists():
                    message = (
                        f"{word!r} is run by the agent's command, but the matrix folder has no "
                        f"{shipped.relative_to(matrix.base_dir or '/')}: every run would fail "
                        "to find it; correct the name"
                    )
                    problems.setdefault((command.loc, word), problem_at(path, command.loc, message))
                continue
            if not run.program or word in _BASH_OWN or "$" in word or _defines(command, word):
                continue
            if word.startswith("/"):
                if os.access(word, os.X_OK):
                    continue
                where, fix = "there is no program there on this machine", "correct the path"
            elif "/" in word or search is None or shutil.which(word, path=search):
                continue  # a relative path is _relative_programs'; an unknown PATH, unknown
            else:
                where = "it is not on the agent's PATH on this machine"
                fix = "install it, or name it by its full path"
            message = (
                f"{word!r} is run by the agent's command, but {where}: every run would end "
                f'"agent could not start (exit 127)" on a worker without it; {fix}'
            )
            problems.setdefault((command.loc, word), problem_at(path, command.loc, message))
    return list(problems.values())


def _graders(scenario: Scenario) -> list[tuple[tuple[str | int, ...], str, str]]:
    """The scenario's commands besides the agent's, each with its key and what a run
    gets when it cannot run as written."""
    failing_gate = "every run's gate would fail for it, counted as the agent failing"
    found: list[tuple[tuple[str | int, ...], str, str]] = [
        (("evaluation", "gates", index, "command"), gate.command, failing_gate)
        for index, gate in enumerate(scenario.evaluation.gates)
        if isinstance(gate, CommandGate)
    ]
    found += [
        (("setup", index), command, "every run's setup would fail (an infrastructure error)")
        for index, command in enumerate(scenario.setup)
    ]
    if scenario.reference is not None:
        found.append((("reference",), scenario.reference, "the preflight's reference would fail"))
    return found


def _missing_matrix_files(matrix: Matrix, path: Path) -> list[ConfigProblem]:
    """Each file a gate's, a setup's or a reference's command names under
    $EVALFLEET_MATRIX_DIR that the matrix folder lacks: the folder is shipped as it is,
    read-only, so no run can have it."""
    problems: dict[tuple[tuple[str | int, ...], str], ConfigProblem] = {}
    for number, scenario in enumerate(matrix.scenarios):
        for key, command, outcome in _graders(scenario):
            loc = ("scenarios", number, *key)
            for word in words_of(command):
                # `--check=$EVALFLEET_MATRIX_DIR/x.py`, `.../test_x.py::test_y` (pytest's)
                named = word.partition("=")[2] if word.startswith("-") else word
                shipped = _in_matrix_dir(matrix, named.partition("::")[0])
                if shipped is None or shipped.exists() or any(c in named for c in "*?["):
                    continue
                relative = shipped.relative_to(matrix.base_dir or "/")
                message = (
                    f"{word!r} names {relative}, which the matrix folder "
                    f"({matrix.base_dir}) does not have: {outcome}. Correct the name, or add "
                    f"{relative} to the matrix folder"
                )
                problems.setdefault((loc, word), problem_at(path, loc, message))
    return list(problems.values())


def _in_matrix_dir(matrix: Matrix, word: str) -> Path | None:
    """The file of the matrix folder that `word` names (`$EVALFLEET_MATRIX_DIR/agent.py`),
    None for any other word."""
    if matrix.base_dir is None:
        return None
    for folder in _MATRIX_DIR_WORDS:
        rest = word.removeprefix(f"{folder}/")
        if rest != word and "$" not in rest:  # another variable: only a run knows
            return matrix.base_dir / rest
    return None


def _agent_path(matrix: Matrix, tier: Tier, command: str) -> str | None:
    """The PATH the tier's agent gets on this machine (worker.run.agent_env: the
    worker's, or the agent's `env:` built on it), None where it names a variable only
    a run has, or where the command sets its own (`PATH=... agent`, `export PATH`)."""
    if re.search(r"(^|[\s;&|(])(export\s+)?PATH=", command):
        return None
    worker_path = os.environ.get("PATH", os.defpath)
    declared = matrix.agent_for(tier).env.get("PATH")
    if declared is None:
        return worker_path
    known = {"PATH": worker_path, "EVALFLEET_MATRIX_DIR": str(matrix.base_dir or "")}
    built = string.Template(declared).safe_substitute(known)
    return None if "$" in built else built


def _defines(command: _Command, word: str) -> bool:
    """Whether the command line defines `word` as a function (`f() { ...; }; f`) or an
    alias, wherever in it."""
    text = command.text
    return (
        f"{word}()" in text.replace(" ", "")
        or f"function {word}" in text
        or re.search(rf"\balias\s+{re.escape(word)}=", text) is not None
    )


def _unconfined(matrix: Matrix, path: Path) -> list[ConfigProblem]:
    # Tiers whose agents would run unconfined, by the key that makes them so.
    unconfined: dict[tuple[str | int, ...], list[str]] = {}
    why = {}
    for index, tier in enumerate(matrix.tiers):
        agent = matrix.agent_for(tier)
        if agent.sandbox == "none" or (agent.sandbox == "auto" and os.geteuid() != 0):
            own = tier.agent is not None and "sandbox" in tier.agent.model_fields_set
            loc: tuple[str | int, ...] = ("tiers", index, "agent") if own else ("agent",)
            unconfined.setdefault(loc, []).append(tier.id)
            # The reason, and what confines them instead.
            why[loc] = (
                (
                    "`sandbox: none`",
                    "Remove it (`sandbox: auto` gives each run a user of its own on a root "
                    "worker) or set `sandbox: bwrap`",
                )
                if agent.sandbox == "none"
                # The workers decide (a compose worker is root in its container); this
                # machine, not root, would be such a worker itself in embedded mode.
                else (
                    "`sandbox: auto` on a worker not running as root, as this machine is not",
                    "Run workers as root (`sandbox: auto` then gives each run a user of its "
                    "own) or set `sandbox: bwrap`",
                )
            )
    problems = [
        problem_at(
            path,
            loc,
            f"{'tiers' if len(tiers) > 1 else 'tier'} {', '.join(tiers)}: agents would run "
            f"unconfined ({why[loc][0]}): an "
            "agent could read the scenarios' hidden tests and the matrix, and reach the "
            "worker's processes and local services; a change to the files it is graded with "
            f"is still caught (status tampered). {why[loc][1]}",
        )
        for loc, tiers in unconfined.items()
    ]
    return problems + _readable_to_run_users(matrix, path)


def _readable_to_run_users(matrix: Matrix, path: Path) -> list[ConfigProblem]:
    """What grades the runs, as the submitter's folder holds it, where any user of this
    machine may read it: a run's own user (a root worker's `sandbox: auto`) is such a
    user, and an agent of an embedded run, or of a worker beside the submitter, finds
    the folder (its embedded socket's path is in /proc/net/unix) and reads the gates,
    the reference and the rubric it is graded with, or the tests. bwrap's jail masks
    the folder (worker.sandbox), docker's never shows it."""
    exposed = [t.id for t in matrix.tiers if matrix.agent_for(t).sandbox in ("auto", "user")]
    if not exposed:
        return []
    fix = "or set `sandbox: bwrap` on the agent, whose jail masks the folder"
    problems = []
    readable_tasks = []
    for index, scenario in enumerate(matrix.scenarios):
        if scenario.task is not None and scenario.tests is not None:
            # A task folder's: one warning for them all (a dataset has a hundred), at
            # `scenarios` (the entry that named them is not known after loading).
            if _others_read(scenario.tests):
                readable_tasks.append(scenario.task)
            continue
        if scenario.tests is not None and _others_read(scenario.tests):
            problems.append(
                problem_at(
                    path,
                    ("scenarios", index, "tests"),
                    f"{scenario.tests} may be read by other users of this machine, which a "
                    "run's own user is: an embedded run's agent could read its tests here. "
                    f"`chmod o-rx {scenario.tests}` (or a folder above it), {fix}",
                )
            )
    if readable_tasks:
        top = Path(os.path.commonpath(readable_tasks))
        problems.append(
            problem_at(
                path,
                ("scenarios",),
                f"the tests of {len(readable_tasks)} task folders (e.g. "
                f"{readable_tasks[0] / 'tests'}) may be read by other users of this machine, "
                "which a run's own user is: an embedded run's agent could read them here. "
                f"`chmod o-rx {top}` (or a folder above it)",
            )
        )
    # What a run is graded with that its agent must not read: the matrix file when it
    # holds gates or a reference, a judged scenario's rubric, a solution.
    grades = any(s.evaluation.gates or s.reference for s in matrix.scenarios)
    graders = {path.resolve(): "the matrix file"} if grades else {}
    for scenario in matrix.scenarios:
        judge = scenario.evaluation.judge
        if scenario.evaluation.judge_enabled and judge is not None and judge.rubric is not None:
            graders.setdefault(judge.rubric.resolve(), "the rubric")
        if scenario.solution is not None:
            graders.setdefault(scenario.solution.resolve(), "the solution")
    readable = {file: what for file, what in graders.items() if _others_read_file(file)}
    if readable:
        folder = Path(os.path.commonpath([f.parent for f in readable]))
        named = ", ".join(f"{what} {file}" for file, what in readable.items())
        problems.append(
            problem_at(
                path,
                (),
                f"{named} may be read by other users of this machine, a run's own user "
                f"included (the agents of {_tiers(exposed)} run as one on a root worker): an "
                "agent of an embedded run, or of a worker on this machine, could find this "
                "folder and read what it is graded with (the gates, the `reference:`, the "
                "rubrics). "
                f"`chmod o-rx {folder}` (or a folder above it), {fix}",
            )
        )
    return problems


def _others_read_file(path: Path) -> bool:
    """Whether other users may read `path` (a file, or a folder's entries): every folder
    above it lets them pass, and it lets them read."""
    try:
        if path.is_dir():
            return _others_read(path)
        passable = all(p.stat().st_mode & 0o001 for p in path.parents)
        return passable and bool(path.stat().st_mode & 0o004)
    except OSError:
        return False


def _others_read(folder: Path) -> bool:
    """Whether other users may open `folder`'s entries: it and every folder above it
    let them pass, and it lets them list."""
    passable = all(p.stat().st_mode & 0o001 for p in [folder, *folder.parents])
    return passable and bool(folder.stat().st_mode & 0o004)
