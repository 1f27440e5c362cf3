"""Benchmark task folders read into scenarios: matrix.yaml's `scenarios:` entries
`{task: DIR}` (one task) and `{tasks: GLOB}` (every task folder the glob matches), in
either published format, told apart by its files (docs/TASKS.md):

- Harbor: task.toml, instruction.md, tests/test.sh, solution/solve.sh, and
  environment/ (its Dockerfile) or `[environment] docker_image`.
- Terminal-Bench 1: task.yaml (its `instruction`), Dockerfile, solution.sh, tests/,
  and run-tests.sh at the task's root (else pytest on tests/test_outputs.py).

The expansion happens before the matrix is validated (core.matrix.loading): each task
becomes an ordinary scenario, stored with the experiment and read by workers as any
other, and the matrix's other keys of the entry override what the task gives. Errors
name the task's file and line (a TOML or YAML error, a bad value), or the task folder
and what it lacks, or the matrix's entry (a glob matching no task, two tasks of one id).
Pure: reads the task folders, as the loading step reads the matrix, nothing else.
"""

from __future__ import annotations

import dataclasses
import glob
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ValidationError

from core.errors import ConfigError
from core.matrix.task import TESTS_DIR, TaskEnvironment, Verifier
from core.matrix.yaml_model import ConfigProblem, Loc, Placer, Prepared, yaml_syntax_problem

TaskFormat = Literal["harbor", "terminal-bench"]
HARBOR: TaskFormat = "harbor"
TERMINAL_BENCH: TaskFormat = "terminal-bench"
# The file that makes a folder a task of each format.
FORMAT_FILES: dict[TaskFormat, str] = {HARBOR: "task.toml", TERMINAL_BENCH: "task.yaml"}
TASK_KEYS = ("task", "tasks")
# A task's own keys an entry's mappings are merged into key by key (`environment:
# {cpus: 4}` keeps the task's image).
MERGED_KEYS = ("environment", "verifier")
_MEMORY_UNITS = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}
_TOML_PLACE = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")


def task_format(folder: Path) -> TaskFormat | None:
    """The format of the task in `folder`, by its files; None: no task folder."""
    for kind, name in FORMAT_FILES.items():
        if (folder / name).is_file():
            return kind
    return None


def read_task(folder: Path) -> dict[str, Any]:
    """The scenario keys the task in `folder` gives (its id the folder's name, paths
    absolute); ConfigError naming its file and line, or what it lacks."""
    folder = folder.resolve()
    kind = task_format(folder)
    if kind is None:
        raise ConfigError(
            [_lacks(folder, "has neither task.toml (Harbor) nor task.yaml (Terminal-Bench)")]
        )
    fields = _harbor(folder) if kind == HARBOR else _terminal_bench(folder)
    return {"id": task_id(folder.name), "task": str(folder), **fields}


def task_id(name: str) -> str:
    """A folder's name as a scenario id (core.matrix.fields.Identifier)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).lstrip("_.-")[:64] or "task"


# --- the matrix's entries --------------------------------------------------------------------


@dataclass(frozen=True)
class _Source:
    """Where an expanded scenario comes from: its entry in the file, the key that named
    the task (None: a scenario written out), the task folder and the entry's own keys."""

    index: int
    key: str | None = None
    folder: Path | None = None
    overrides: frozenset[str] = frozenset()


def expand_tasks(
    data: dict[str, Any], base_dir: Path, place: Placer, *, allow_outside: bool = False
) -> Prepared:
    """`data` (a matrix file's) with its `task`/`tasks` scenario entries replaced by the
    scenarios of their task folders; ConfigError with every problem found."""
    entries = data.get("scenarios")
    if not isinstance(entries, list) or not any(_names_tasks(e) for e in entries):
        return Prepared(data)
    base = base_dir.resolve()
    scenarios: list[Any] = []
    sources: list[_Source] = []
    problems: list[ConfigProblem] = []
    named: dict[str, _Source] = {}
    for index, entry in enumerate(entries):
        if not _names_tasks(entry):
            scenarios.append(entry)
            sources.append(_Source(index))
            if isinstance(entry, dict) and isinstance(entry.get("id"), str):
                named.setdefault(entry["id"], _Source(index))
            continue
        key = "tasks" if "tasks" in entry else "task"
        if "task" in entry and "tasks" in entry:
            problems.append(
                place(
                    ("scenarios", index, key),
                    "give `task` (one folder) or `tasks` (a glob), not both",
                )
            )
            continue
        try:
            folders = _folders(entry[key], key, base)
        except ValueError as exc:
            problems.append(place(("scenarios", index, key), str(exc)))
            continue
        overrides = {k: v for k, v in entry.items() if k not in TASK_KEYS}
        for folder in folders:
            if not allow_outside and not folder.is_relative_to(base):
                problems.append(
                    place(
                        ("scenarios", index, key),
                        f"{folder} is outside the matrix folder {base}: every path the matrix "
                        "names is shipped to the workers; move it in, or set "
                        "`allow_outside_files: true` at the top level",
                    )
                )
                break
            try:
                scenario = _merged(read_task(folder), overrides)
            except ConfigError as exc:
                problems += [p for p in exc.problems if isinstance(p, ConfigProblem)]
                continue
            source = _Source(index, key, folder, frozenset(overrides))
            sid = scenario["id"]
            if isinstance(sid, str) and sid in named:
                problems.append(
                    place(("scenarios", index, key), _collision(sid, named[sid], source))
                )
            elif isinstance(sid, str):
                named[sid] = source
            scenarios.append(scenario)
            sources.append(source)
    if problems:
        raise ConfigError(problems)
    return Prepared({**data, "scenarios": scenarios}, _origin(sources))


def _names_tasks(entry: Any) -> bool:
    return isinstance(entry, dict) and any(key in entry for key in TASK_KEYS)


def _folders(value: Any, key: str, base: Path) -> list[Path]:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a {'folder' if key == 'task' else 'glob'} as a string")
    path = Path(value).expanduser()
    pattern = path if path.is_absolute() else base / path
    if key == "task":
        if not pattern.is_dir():
            raise ValueError(f"folder not found: {pattern}")
        if task_format(pattern) is None:
            raise ValueError(_not_a_task(pattern.resolve()))
        return [pattern.resolve()]
    # A matched file (a dataset's README) is no task and no mistake; a matched folder
    # that is not a task is refused: a silently dropped task would shrink the
    # experiment unseen, so the glob must match task folders only.
    folders = sorted(Path(p).resolve() for p in glob.glob(str(pattern)) if Path(p).is_dir())
    if not folders:
        raise ValueError(f"{value!r} matches no folder (from {base})")
    strays = [f for f in folders if task_format(f) is None]
    if strays:
        more = f" and {len(strays) - 1} more" if len(strays) > 1 else ""
        raise ValueError(
            f"{value!r} matches {strays[0]}{more}, not a task folder (neither task.toml nor "
            "task.yaml): narrow the glob to the task folders (e.g. `tb/task-*`) or move it out"
        )
    return folders


def _not_a_task(folder: Path) -> str:
    return (
        f"{folder} is not a task folder: it has neither task.toml (Harbor) nor task.yaml "
        "(Terminal-Bench)"
    )


def _collision(sid: str, first: _Source, second: _Source) -> str:
    where = str(first.folder) if first.folder else f"scenarios[{first.index}]"
    return (
        f"two scenarios would have the id {sid!r}: {where} and {second.folder}; give the "
        "task its own `id:` in a `task:` entry, or rename one of the folders"
    )


def _merged(task: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    merged = dict(task)
    if "prompt" in overrides or "prompt_file" in overrides:  # one prompt: the entry's
        merged.pop("prompt", None)
        merged.pop("prompt_file", None)
    for key, value in overrides.items():
        own = merged.get(key)
        if key in MERGED_KEYS and isinstance(value, dict) and isinstance(own, dict):
            if key == "environment" and {"image", "build"} & value.keys():
                own = {k: v for k, v in own.items() if k not in ("image", "build")}
            merged[key] = {**own, **value}
        else:
            merged[key] = value
    return merged


def _origin(sources: list[_Source]) -> Any:
    def origin(loc: Loc) -> tuple[Loc, str]:
        if len(loc) < 2 or loc[0] != "scenarios" or not isinstance(loc[1], int):
            return loc, ""
        if loc[1] >= len(sources):
            return loc[:1], ""
        source, rest = sources[loc[1]], loc[2:]
        if source.key is None or (rest and rest[0] in source.overrides):
            return ("scenarios", source.index, *rest), ""
        # A value the task gave: the entry that named the task, and which task.
        field = ".".join(str(part) for part in rest)
        return (
            "scenarios",
            source.index,
            source.key,
        ), f"task {source.folder}: {field + ': ' if field else ''}"

    return origin


# --- Harbor ----------------------------------------------------------------------------------


def _harbor(folder: Path) -> dict[str, Any]:
    toml = _Toml.read(folder / "task.toml")
    lacking = [
        what
        for what, present in (
            ("instruction.md (the prompt)", (folder / "instruction.md").is_file()),
            ("tests/test.sh (the verifier)", (folder / "tests" / "test.sh").is_file()),
        )
        if not present
    ]
    solution = folder / "solution"
    if solution.is_dir() and not (solution / "solve.sh").is_file():
        lacking.append("solution/solve.sh (solution/ holds no solve.sh)")
    if lacking:
        toml.problems.append(_lacks(folder, f"has no {' and no '.join(lacking)}"))
    agent, verifier, env = toml.table("agent"), toml.table("verifier"), toml.table("environment")
    sources: dict[str, tuple[str, str]] = {}

    def take(
        target: dict[str, Any], field: str, table: dict[str, Any], section: str, key: str
    ) -> None:
        if key in table:
            target[field] = table[key]
            sources[field] = (section, key)

    environment: dict[str, Any] = {}
    for field, key in (("image", "docker_image"), ("workdir", "workdir"), ("cpus", "cpus")):
        take(environment, field, env, "environment", key)
    take(environment, "memory_mb", env, "environment", "memory_mb")
    if "memory" in env and (memory_mb := toml.memory_mb(env["memory"])) is not None:
        environment["memory_mb"] = memory_mb
        sources["memory_mb"] = ("environment", "memory")
    take(environment, "allow_internet", env, "environment", "allow_internet")
    take(environment, "agent_user", agent, "agent", "user")
    take(environment, "verifier_user", verifier, "verifier", "user")
    fields: dict[str, Any] = {
        "prompt_file": str(folder / "instruction.md"),
        "tests": str(folder / "tests"),
    }
    context = folder / "environment"
    if "image" not in environment and (context / "Dockerfile").is_file():
        environment["build"] = str(context)
    elif context.is_dir() and not (context / "Dockerfile").is_file():
        fields["workspace"] = str(context)  # no image to build: its files are the workspace
    toml.check(TaskEnvironment, environment, sources)
    checked: dict[str, Any] = {"command": f"bash {TESTS_DIR}/test.sh", "reward": "file"}
    take(checked, "timeout_s", verifier, "verifier", "timeout_sec")
    take(checked, "env", verifier, "verifier", "env")
    toml.check(Verifier, checked, sources)
    fields |= {"environment": environment, "verifier": checked}
    if solution.is_dir():
        fields["solution"] = str(solution)
    if "timeout_sec" in agent:
        timeout = toml.positive(agent["timeout_sec"], "agent", "timeout_sec")
        if timeout is not None:
            fields["agent_timeout_s"] = timeout
    if toml.problems:  # every one at once: a task with three took three runs of validate
        toml.problems.sort(key=lambda p: p.line or 0)
        raise ConfigError(toml.problems)
    return fields


@dataclass(frozen=True)
class _Toml:
    """A task.toml, and the problems found in it so far (`refuse`)."""

    path: Path
    text: str
    data: dict[str, Any]
    problems: list[ConfigProblem] = dataclasses.field(default_factory=list)

    @classmethod
    def read(cls, path: Path) -> _Toml:
        text = _text(path)
        try:
            return cls(path, text, tomllib.loads(text))
        except tomllib.TOMLDecodeError as exc:
            message = str(exc)
            found = _TOML_PLACE.search(message)
            line, column = (int(found[1]), int(found[2])) if found else (None, None)
            message = _TOML_PLACE.sub("", message)
            raise ConfigError(
                [
                    ConfigProblem(
                        file=str(path),
                        line=line,
                        column=column,
                        message=f"TOML syntax error: {message}",
                    )
                ]
            ) from None

    def table(self, name: str) -> dict[str, Any]:
        value = self.data.get(name, {})
        if not isinstance(value, dict):
            self.refuse(None, name, f"`{name}` must be a table ([{name}])")
            return {}
        return value

    def line_of(self, section: str | None, key: str) -> int | None:
        """The line of `key` in table `section` (None: the top level), or of the table's
        header when the key is not written there."""
        current: str | None = None
        header = None
        for number, raw in enumerate(self.text.splitlines(), start=1):
            line = raw.strip()
            table = re.match(r"^\[\s*([^\]]+?)\s*\]", line)
            if table:
                current = table[1].strip('"')
                header = number if current == section else header
            elif current == section and re.match(rf'^"?{re.escape(key)}"?\s*=', line):
                return number
        return header

    def refuse(self, section: str | None, key: str, message: str) -> None:
        """A problem at `key` of table `section`, said with the others at the end."""
        self.problems.append(
            ConfigProblem(
                file=str(self.path),
                line=self.line_of(section, key),
                field=f"{section}.{key}" if section else key,
                message=message,
            )
        )

    def positive(self, value: Any, section: str, key: str) -> float | None:
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            self.refuse(section, key, f"expected a number of seconds > 0, got {value!r}")
            return None
        return float(value)

    def memory_mb(self, value: Any) -> int | None:
        found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt])i?b?\s*", str(value), re.IGNORECASE)
        if isinstance(value, bool) or found is None:
            self.refuse(
                "environment", "memory", f'expected a size such as "2G" or "512M", got {value!r}'
            )
            return None
        return round(float(found[1]) * _MEMORY_UNITS[found[2].lower()])

    def check(
        self, model: type[BaseModel], values: dict[str, Any], sources: dict[str, tuple[str, str]]
    ) -> None:
        """`values` as `model` reads them, each bad one refused at the task's line of it."""
        for name, message in _refused(model, values):
            if name in sources:
                self.refuse(*sources[name], message)


# --- Terminal-Bench --------------------------------------------------------------------------


def _yaml_mapping(path: Path) -> tuple[yaml.Node | None, dict[str, Any]]:
    """A task.yaml's node tree (for the lines of its keys) and its mapping."""
    text = _text(path)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        raise ConfigError([yaml_syntax_problem(path, text, exc)]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([ConfigProblem(file=str(path), message=f"YAML error: {exc}")]) from None
    if not isinstance(data, dict):
        raise ConfigError(
            [ConfigProblem(file=str(path), line=1, message="expected a mapping of keys")]
        )
    return root, data


def _terminal_bench(folder: Path) -> dict[str, Any]:
    path = folder / "task.yaml"
    root, data = _yaml_mapping(path)
    problems: list[ConfigProblem] = []

    def refuse(key: str, message: str) -> None:
        line = None
        if isinstance(root, yaml.MappingNode):
            line = next((k.start_mark.line + 1 for k, _ in root.value if k.value == key), None)
        problems.append(ConfigProblem(file=str(path), line=line or 1, field=key, message=message))

    instruction = data.get("instruction", _base_description(data))
    if not isinstance(instruction, str) or not instruction.strip():
        refuse("instruction", "expected the task's instruction (the prompt) as a non-empty string")
    parser = data.get("parser_name", "pytest")
    if parser != "pytest":
        refuse(
            "parser_name",
            f"parser {parser!r} is not supported: only pytest's (pass when every test passes)",
        )
    runner = folder / "run-tests.sh"
    tests = folder / "tests"
    lacking = []
    if not tests.is_dir():
        lacking.append("tests/ (the tests)")
    elif not runner.is_file() and not (tests / "test_outputs.py").is_file():
        lacking.append("run-tests.sh nor tests/test_outputs.py (what runs the tests)")
    if lacking:
        problems.append(_lacks(folder, f"has no {' and no '.join(lacking)}"))
    environment: dict[str, Any] = {}
    if (folder / "Dockerfile").is_file():
        environment["build"] = str(folder)
    elif any((folder / name).is_file() for name in ("docker-compose.yaml", "docker-compose.yml")):
        problems.append(
            _lacks(
                folder,
                "has a docker-compose file but no Dockerfile: tasks of several "
                "containers are not supported",
            )
        )
    workdir = environment.get("workdir", "/app")
    verifier: dict[str, Any] = {"reward": "exit_code", "env": {"TEST_DIR": TESTS_DIR}}
    if runner.is_file():
        verifier |= {"command": f"bash {TESTS_DIR}/run-tests.sh", "runner": str(runner)}
    else:
        verifier["command"] = f"cd {workdir} && python3 -m pytest -q {TESTS_DIR}/test_outputs.py"
    if "max_test_timeout_sec" in data:
        verifier["timeout_s"] = data["max_test_timeout_sec"]
    for name, message in _refused(Verifier, verifier):
        if name == "timeout_s":
            refuse("max_test_timeout_sec", message)
    fields: dict[str, Any] = {
        "prompt": instruction,
        "tests": str(tests),
        "environment": environment,
        "verifier": verifier,
    }
    if (folder / "solution.sh").is_file():
        fields["solution"] = str(folder / "solution.sh")
    if "max_agent_timeout_sec" in data:
        value = data["max_agent_timeout_sec"]
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            refuse("max_agent_timeout_sec", f"expected a number of seconds > 0, got {value!r}")
        else:
            fields["agent_timeout_s"] = float(value)
    if problems:  # every one at once, in the file's order
        problems.sort(key=lambda p: p.line or 0)
        raise ConfigError(problems)
    return fields


def _base_description(data: dict[str, Any]) -> Any:
    # Terminal-Bench's older layout: `descriptions: [{key: base, description: ...}]`.
    for item in data.get("descriptions") or []:
        if isinstance(item, dict) and item.get("key") == "base":
            return item.get("description")
    return None


# --- shared ----------------------------------------------------------------------------------


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([ConfigProblem(file=str(path), message=f"cannot read: {exc}")]) from None


def _lacks(folder: Path, what: str) -> ConfigProblem:
    return ConfigProblem(file=f"{folder}/", message=f"this task folder {what}")


def _refused(model: type[BaseModel], values: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, message) of each of `values` that `model` refuses. Early, where the task's
    own line is known; the scenario validates them again (with the matrix's paths
    context) once the entry's overrides are in."""
    try:
        model.model_validate(values, context={"check_files": False})
    except ValidationError as exc:
        return [
            (
                str(err["loc"][0]) if err["loc"] else "",
                str(err["msg"]).removeprefix("Value error, "),
            )
            for err in exc.errors()
        ]
    return []
