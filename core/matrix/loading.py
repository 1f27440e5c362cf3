"""Reading matrix.yaml and rubric files: the one place the matrix's models are given
what they must not read themselves, the files around the matrix and the environment.
Relative paths resolve against the matrix file's folder. Scenarios naming benchmark
task folders (`task:`, `tasks:`) are expanded here, before validation
(core.matrix.task_folders), so that a stored matrix holds ordinary scenarios."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from core.errors import ConfigError
from core.matrix.judging import Rubric
from core.matrix.matrix import Matrix
from core.matrix.task_folders import expand_tasks
from core.matrix.yaml_model import Placer, Prepared, load_yaml_model


def load_matrix(path: str | Path) -> Matrix:
    path = Path(path)
    base = path.resolve().parent
    # A rubric's problems are said with the matrix's, not instead of them: a raise from
    # inside validation would end it, and the matrix's own problems would take another
    # run of `validate` to see.
    rubrics: dict[Path, list[object]] = {}

    def read_rubric(rubric: Path) -> None:
        if rubric not in rubrics:
            try:
                load_rubric(rubric)
                rubrics[rubric] = []
            except ConfigError as exc:
                rubrics[rubric] = list(exc.problems)

    context = {"environ": os.environ, "read_rubric": read_rubric}

    def tasks_expanded(data: dict[str, Any], place: Placer) -> Prepared:
        outside = data.get("allow_outside_files") is True
        return expand_tasks(data, base, place, allow_outside=outside)

    try:
        matrix = load_yaml_model(
            path, Matrix, base_dir=base, context=context, prepare=tasks_expanded
        )
    except ConfigError as exc:
        raise ConfigError([*_problems_of(rubrics), *exc.problems], unread=True) from None
    if problems := _problems_of(rubrics):
        raise ConfigError(problems, unread=True)
    return matrix


def _problems_of(rubrics: dict[Path, list[object]]) -> list[object]:
    return [problem for problems in rubrics.values() for problem in problems]


def load_rubric(path: Path) -> Rubric:
    """Read and validate a rubric file; errors name the file."""
    return load_yaml_model(path, Rubric)
