"""Reading matrix.yaml: relative paths resolve against the file's folder."""

from __future__ import annotations

from pathlib import Path

from core.matrix.models import Matrix
from core.matrix.yaml_model import load_yaml_model


def load_matrix(path: str | Path) -> Matrix:
    path = Path(path)
    return load_yaml_model(path, Matrix, base_dir=path.resolve().parent)
