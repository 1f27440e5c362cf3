"""No function of the product runs over 80 lines unless a comment above it says why
(`# Over 80 lines: ...`, above its decorators); a function that shrank loses the
comment. Parameters are ruff's to count (PLR0913, max-args in pyproject.toml)."""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 80
MARK = "# Over 80 lines:"


def _product() -> list[Path]:
    """The modules of the installed packages, as pyproject.toml's package list names them."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = config["tool"]["setuptools"]["packages"]["find"]["include"]
    return [path for pattern in include for path in sorted(ROOT.glob(f"{pattern}/**/*.py"))]


def _comment_above(lines: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """The comment lines right above the function (above its decorators, if any)."""
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
    above: list[str] = []
    for line in reversed(lines[:first]):
        if not line.strip().startswith("#"):
            break
        above.insert(0, line.strip())
    return " ".join(above)


def problems(paths: Iterable[Path]) -> tuple[list[str], list[str]]:
    """(functions over MAX_LINES that do not say why, functions that say so needlessly)."""
    unexplained, stale = [], []
    for path in paths:
        text = path.read_text()
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text, str(path))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            size = (node.end_lineno or node.lineno) - node.lineno + 1
            comment = _comment_above(lines, node)
            reason = comment.split(MARK, 1)[1].strip() if MARK in comment else None
            where = f"{path}:{node.lineno} {node.name}: {size} lines"
            if size > MAX_LINES and not reason:
                unexplained.append(where)
            elif size <= MAX_LINES and reason is not None:
                stale.append(where)
    return unexplained, stale


def test_a_function_over_80_lines_says_why_and_only_such_a_function() -> None:
    paths = _product()
    assert {p.relative_to(ROOT).parts[0] for p in paths} >= {"core", "worker", "scheduler"}
    unexplained, stale = problems(paths)
    assert unexplained == [], f"split these, or say why above them ({MARK} ...)"
    assert stale == [], f"these are {MAX_LINES} lines or fewer now: drop their {MARK!r}"


def test_the_check_counts_from_def_to_last_line_and_reads_the_comment_above_decorators(
    tmp_path: Path,
) -> None:
    body = "".join(f"    x = {i}\n" for i in range(MAX_LINES - 1))  # with the def: 80 lines
    module = tmp_path / "m.py"
    module.write_text(
        f"def fits():\n{body}\n\n"
        f"def long():\n{body}    return x\n\n\n"
        f"{MARK} a reason\n@staticmethod\ndef said():\n{body}    return x\n\n\n"
        f"{MARK}\ndef no_reason():\n{body}    return x\n\n\n"
        f"{MARK} a reason\ndef short():\n    return 1\n"
    )
    unexplained, stale = problems([module])
    assert [w.split(" ")[1] for w in unexplained] == ["long:", "no_reason:"]
    assert [w.split(" ")[1] for w in stale] == ["short:"]
