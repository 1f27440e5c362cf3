"""Reading matrix.yaml and rubric files: the one place the matrix's models are given
what they must not read themselves, the files around the matrix and the environment.
Relative paths resolve against the matrix file's folder."""

from __future__ import annotations

import os
from pathlib import Path

from core.matrix.judging import Rubric
from core.matrix.matrix import Matrix
from core.matrix.yaml_model import load_yaml_model


def load_matrix(path: str | Path) -> Matrix:
    path = Path(path)
    context = {"environ": os.environ, "read_rubric": load_rubric}
    return load_yaml_model(path, Matrix, base_dir=path.resolve().parent, context=context)


def load_rubric(path: Path) -> Rubric:
    """Read and validate a rubric file; errors name the file."""
    return load_yaml_model(path, Rubric)
