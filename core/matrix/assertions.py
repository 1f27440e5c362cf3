"""The `command_json_path` assertion language of llm-tool-test's evaluation layers.

Forms: ``exists``, ``equals <value>``, ``contains <substring>``, ``len >= N``,
``len == N``, ``len > N``. Parsed once at load time so a typo is a config error,
not a gate that silently fails on every run.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

_LEN = re.compile(r"^len\s*(>=|==|>)\s*(\d+)$")

FORMS = "exists | equals <value> | contains <substring> | len >= N | len == N | len > N"


class JsonAssertion(BaseModel):
    model_config = ConfigDict(frozen=True)

    op: Literal["exists", "equals", "contains", "len"]
    comparator: Literal[">=", "==", ">"] | None = None
    operand: Any = None

    def check(self, found: bool, value: Any) -> tuple[bool, str]:
        """Apply the assertion to the value at the path; returns (passed, message)."""
        if self.op == "exists":
            ok = found and value is not None
            return ok, "value exists" if ok else "path resolves to nothing (missing or null)"
        if not found:
            return False, "path resolves to nothing"
        if self.op == "equals":
            ok = _equal(value, self.operand)
            return ok, f"value {value!r} {'equals' if ok else 'does not equal'} {self.operand!r}"
        if self.op == "contains":
            if not isinstance(value, str):
                return False, f"contains needs a string value, got {type(value).__name__}"
            ok = str(self.operand) in value
            return ok, f"value {'contains' if ok else 'does not contain'} {self.operand!r}"
        if not isinstance(value, list | dict | str):
            return False, f"len needs an array, object or string, got {type(value).__name__}"
        n, limit = len(value), int(self.operand)
        ok = {">=": n >= limit, "==": n == limit, ">": n > limit}[self.comparator or "=="]
        return ok, f"len {n} {'satisfies' if ok else 'fails'} len {self.comparator} {limit}"


def _equal(value: Any, expected: Any) -> bool:
    # bool is an int in Python; `equals 1` must not match `true`.
    if isinstance(value, bool) or isinstance(expected, bool):
        return type(value) is type(expected) and value == expected
    return bool(value == expected)


def parse_assertion(text: str) -> JsonAssertion:
    """Parse an assertion string; raises ValueError naming the accepted forms."""
    s = text.strip()
    if s == "exists":
        return JsonAssertion(op="exists")
    m = _LEN.match(s)
    if m:
        return JsonAssertion.model_validate(
            {"op": "len", "comparator": m.group(1), "operand": int(m.group(2))}
        )
    head, _, rest = s.partition(" ")
    rest = rest.strip()
    if head == "equals" and rest:
        return JsonAssertion(op="equals", operand=_scalar(rest))
    if head == "contains" and rest:
        return JsonAssertion(op="contains", operand=_unquote(rest))
    raise ValueError(f"unknown assertion {text!r}; expected one of: {FORMS}")


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _scalar(text: str) -> Any:
    """`equals 3` is a number, `equals true` a boolean, `equals "3"` or `equals foo` a string."""
    if text[0] in "'\"":
        return _unquote(text)
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text
