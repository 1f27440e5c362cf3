"""PEP 561: every installed package says it is typed, and its wheel carries the mark
(setuptools ships a package's non-Python files only when package-data names them)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_installed_package_ships_py_typed() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = [pattern.rstrip("*") for pattern in setuptools["packages"]["find"]["include"]]
    assert {"core", "worker", "scheduler", "evalfleet"} <= set(packages)
    unmarked = [p for p in packages if not (ROOT / p / "py.typed").is_file()]
    unshipped = [p for p in packages if "py.typed" not in setuptools["package-data"].get(p, [])]
    assert unmarked == [], "add an empty py.typed to these packages"
    assert unshipped == [], "name py.typed under [tool.setuptools.package-data] for these"
