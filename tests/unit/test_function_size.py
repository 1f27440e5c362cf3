"""No function of the product takes over 6 parameters (a method's self or cls aside) or
runs over 80 lines (its def to its last line) unless a comment says why: `# wide: <why>`
for the parameters, `# long: <why>` for the lines, among the comments right above it
(above its decorators) or on its signature's lines. A function back within its limit
loses the comment, so that every such comment still answers for something."""

from __future__ import annotations

import ast
import io
import tokenize
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = {"core", "fleet", "worker", "scheduler", "evalfleet"}

Function = ast.FunctionDef | ast.AsyncFunctionDef


def _parameters(node: Function) -> int:
    arguments = node.args
    named = [*arguments.posonlyargs, *arguments.args]
    static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
    # A method's receiver is no input its callers choose.
    if named and named[0].arg in ("self", "cls") and not static:
        named = named[1:]
    variadic = [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
    return len(named) + len(arguments.kwonlyargs) + len(variadic)


def _lines(node: Function) -> int:
    return (node.end_lineno or node.lineno) - node.lineno + 1


@dataclass(frozen=True)
class Limit:
    marker: str
    most: int
    unit: str
    measure: Callable[[Function], int]


LIMITS = (
    Limit("# wide:", 6, "parameters", _parameters),
    Limit("# long:", 80, "lines", _lines),
)


def _product() -> list[Path]:
    """The modules of the installed packages, as pyproject.toml's package list names them."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = config["tool"]["setuptools"]["packages"]["find"]["include"]
    return [path for pattern in include for path in sorted(ROOT.glob(f"{pattern}/**/*.py"))]


def _comments(text: str) -> dict[int, str]:
    """Each line's comment, by line number (tokenize: a `#` inside a string is none)."""
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    return {t.start[0]: t.string for t in tokens if t.type == tokenize.COMMENT}


def _said(lines: list[str], comments: dict[int, str], node: Function) -> list[str]:
    """The comments that speak for the function: the block right above it (above its
    decorators) and those on its signature, up to its body's first statement."""
    above = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
    block: list[str] = []
    while above >= 1 and above in comments and lines[above - 1].lstrip().startswith("#"):
        block.insert(0, comments[above])
        above -= 1
    signature = range(node.lineno, max(node.lineno, node.body[0].lineno - 1) + 1)
    return block + [comments[n] for n in signature if n in comments]


def problems(paths: Iterable[Path]) -> tuple[list[str], list[str]]:
    """(functions over a limit that do not say why, functions within it that say so)."""
    unexplained, stale = [], []
    for path in paths:
        text = path.read_text()
        lines, comments = text.splitlines(), _comments(text)
        for node in ast.walk(ast.parse(text, str(path))):
            if not isinstance(node, Function):
                continue
            said = _said(lines, comments, node)
            for limit in LIMITS:
                size = limit.measure(node)
                marked = [c for c in said if c.startswith(limit.marker)]
                why = any(c.removeprefix(limit.marker).strip() for c in marked)
                where = f"{path}:{node.lineno} {node.name}: {size} {limit.unit}"
                if size > limit.most and not why:
                    unexplained.append(f"{where} (say why: {limit.marker} ...)")
                elif size <= limit.most and marked:
                    stale.append(f"{where} (drop its {limit.marker!r})")
    return unexplained, stale


def test_no_function_of_the_product_is_wide_or_long_without_saying_why() -> None:
    paths = _product()
    assert {p.relative_to(ROOT).parts[0] for p in paths} == PRODUCT
    unexplained, stale = problems(paths)
    assert not unexplained, "take a parameter object or split these, or say why:\n" + "\n".join(
        unexplained
    )
    assert not stale, "these are within their limit now:\n" + "\n".join(stale)


def test_the_check_counts_from_def_to_last_line_and_reads_the_comment_above_decorators(
    tmp_path: Path,
) -> None:
    body = "".join(f"    x = {i}\n" for i in range(79))  # with the def: 80 lines
    module = tmp_path / "m.py"
    module.write_text(
        f"def fits():\n{body}\n\n"
        f"def long():\n{body}    return x\n\n\n"
        f"# long: a reason\n@staticmethod\ndef said():\n{body}    return x\n\n\n"
        f"# long:\ndef no_reason():\n{body}    return x\n\n\n"
        f"# long: a reason\ndef short():\n    return 1\n"
    )
    unexplained, stale = problems([module])
    assert [w.split(" ")[1] for w in unexplained] == ["long:", "no_reason:"]
    assert [w.split(" ")[1] for w in stale] == ["short:"]


def test_the_check_counts_parameters_but_a_methods_receiver_and_reads_the_signature(
    tmp_path: Path,
) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "def six(a, b, c, d, e, f): ...\n"
        "def seven(a, b, c, /, d, *, e, f, g): ...\n"
        "def variadic(a, b, c, d, e, *args, **kwargs): ...\n"
        "class C:\n"
        "    def method(self, a, b, c, d, e, f): ...\n"
        "    @classmethod\n"
        "    def built(cls, a, b, c, d, e, f): ...\n"
        "    @staticmethod\n"
        "    def static(self, a, b, c, d, e, f): ...\n"
        "def on_the_def(  # wide: a reason\n    a, b, c, d, e, f, g\n): ...\n"
        "def below(\n    a, b, c, d, e, f, g\n):\n    # wide: a reason\n    return a\n"
        "def in_a_string(a, b, c, d, e, f, g='# wide: no comment'): ...\n"
        "def narrow(a):  # wide: a reason\n    return a\n"
    )
    unexplained, stale = problems([module])
    assert {w.split(" ")[1] for w in unexplained} == {
        "seven:",
        "variadic:",
        "static:",
        "in_a_string:",
    }
    assert [w.split(" ")[1] for w in stale] == ["narrow:"]
