"""Reading matrix.yaml and rubric files: the one place the matrix's models are given
what they must not read themselves, the files around the matrix and the environment.
Relative paths resolve against the matrix file's folder. Scenarios naming benchmark
task folders (`task:`, `tasks:`) are expanded here, before validation
(core.matrix.task_folders), so that a stored matrix holds ordinary scenarios."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from core.matrix.judging import Rubric
from core.matrix.matrix import Matrix
from core.matrix.task_folders import expand_tasks
from core.matrix.yaml_model import Placer, Prepared, load_yaml_model


def load_matrix(path: str | Path) -> Matrix:
    path = Path(path)
    base = path.resolve().parent
    context = {"environ": os.environ, "read_rubric": load_rubric}

    def tasks_expanded(data: dict[str, Any], place: Placer) -> Prepared:
        outside = data.get("allow_outside_files") is True
        return expand_tasks(data, base, place, allow_outside=outside)

    return load_yaml_model(path, Matrix, base_dir=base, context=context, prepare=tasks_expanded)


def load_rubric(path: Path) -> Rubric:
    """Read and validate a rubric file; errors name the file."""
    return load_yaml_model(path, Rubric)
