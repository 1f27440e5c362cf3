""" "Did you mean": the nearest valid keys or values for a mistake in a config file.

Walks a pydantic model's field types along an error's location (the location
pydantic reports, union tags included) to learn what was valid at that place,
and across the whole model to learn where else a misplaced key is valid.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Iterable, Iterator, Sequence
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, Tag


def nearest(word: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """The choices closest to `word`, closest first (none when nothing is close)."""
    choices = sorted(set(choices))
    found = difflib.get_close_matches(word, choices, n=n, cutoff=0.6)
    # A prefix or a part ("preset" for "agent_preset") is a likely meant key, even
    # when difflib finds the rest of the word too far.
    lowered = word.lower()
    found += [c for c in choices if c not in found and len(c) > 2 and (c in lowered)]
    return found[:n]


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """ "did you mean `a` or `b`?", or "" when no choice is close."""
    found = nearest(word, choices)
    if not found:
        return ""
    return "did you mean " + " or ".join(f"`{c}`" for c in found) + "?"


def unknown_key_hint(model: type[BaseModel], loc: Sequence[Any]) -> str:
    """What to say about the unknown key at `loc`: its nearest valid neighbours, or
    where it belongs when it is a valid key elsewhere in `model`."""
    key = str(loc[-1])
    here, parent = _walk(model, loc[:-1])
    valid = {name for tp in here for name in _keys_of(tp)}
    places = [p for p in _places_of(model, key) if p != parent]
    # A key valid just below this place (`gates` under a scenario's `evaluation:`)
    # belongs there; one valid elsewhere entirely is named by its full path.
    below = [p for p in places if p.startswith(f"{parent}.") or (not parent and p)]
    hints = []
    if below:
        nearest_place = min(below, key=len)
        rest = nearest_place.removeprefix(f"{parent}.") if parent else nearest_place
        hints.append(f"`{key}` belongs under `{rest}:`")
    elif places:
        where = " and ".join(f"`{p}`" if p else "the top level" for p in places[:3])
        hints.append(f"`{key}` is a key of {where}, not of this place")
    mean = did_you_mean(key, valid)
    if mean and not below:
        hints.append(mean)
    return "; ".join(hints)


def literal_choices(model: type[BaseModel], loc: Sequence[Any]) -> list[str]:
    """The values a Literal field at `loc` accepts (empty when it is no Literal)."""
    leaves, _ = _walk(model, loc)
    return sorted({str(value) for leaf in leaves if _is_literal(leaf) for value in leaf[1]})


def _places_of(model: type[BaseModel], key: str) -> list[str]:
    """The paths (`scenarios[].evaluation`) of every model in `model` with field `key`."""
    found = []
    for path, sub in _models_below(model, "", set()):
        if key in _keys_of(sub):
            found.append(path)
    return sorted(set(found), key=len)


def _models_below(
    model: type[BaseModel], path: str, seen: set[type[BaseModel]]
) -> Iterator[tuple[str, type[BaseModel]]]:
    if model in seen:
        return
    seen = seen | {model}
    yield path, model
    for name, info in model.model_fields.items():
        key = info.alias or name
        for sub, suffix in _models_in(info.annotation):
            yield from _models_below(sub, (f"{path}.{key}" if path else key) + suffix, seen)


def _models_in(tp: Any, suffix: str = "") -> Iterator[tuple[type[BaseModel], str]]:
    """The models in a field's type, each with how its path goes on from the field's:
    `[]` into a list's items, `.*` into a mapping's values."""
    for leaf in _leaves(tp):
        leaf = _untagged(leaf)
        if isinstance(leaf, type) and issubclass(leaf, BaseModel):
            yield leaf, suffix
        elif isinstance(leaf, tuple) and leaf[0] == "list":
            yield from _models_in(leaf[1], suffix + "[]")
        elif isinstance(leaf, tuple) and leaf[0] == "dict":
            yield from _models_in(leaf[1], suffix + ".*")


def _walk(model: type[BaseModel], loc: Sequence[Any]) -> tuple[list[Any], str]:
    """The types that could hold the value at `loc` (as `_leaves` gives them), and the
    location as `_places_of` writes paths (list indexes as `[]`, no union tags)."""
    current: list[Any] = _leaves(model)
    path = ""
    for part in loc:
        if isinstance(part, str) and part.startswith("function-"):
            continue
        tagged = [leaf for leaf in current if _has_tag(leaf, part)]
        if tagged:  # a discriminated union's tag names the branch
            current = [_untagged(leaf) for leaf in tagged]
            continue
        following: list[Any] = []
        for leaf in map(_untagged, current):
            if isinstance(leaf, type) and issubclass(leaf, BaseModel):
                field = _field(leaf, part)
                if field is not None:
                    following += _leaves(field)
            elif isinstance(leaf, tuple) and leaf[0] == "list" and isinstance(part, int):
                following += _leaves(leaf[1])
            elif isinstance(leaf, tuple) and leaf[0] == "dict":
                following += _leaves(leaf[1])
                part = "*"
        current = following
        if isinstance(part, int):
            path += "[]"
        else:
            path += f".{part}" if path else str(part)
    return [_untagged(leaf) for leaf in current], path


def _untagged(leaf: Any) -> Any:
    return leaf[2] if isinstance(leaf, tuple) and leaf[0] == "tagged" else leaf


def _is_literal(leaf: Any) -> bool:
    return isinstance(leaf, tuple) and leaf[0] == "literal"


def _leaves(tp: Any) -> list[Any]:
    """A type as the plain parts a location steps into: models, ("list", item),
    ("dict", value), ("literal", values) and ("tagged", tag, type)."""
    origin = get_origin(tp)
    if origin is Annotated:
        args = get_args(tp)
        tags = [m.tag for m in args[1:] if isinstance(m, Tag)]
        inner = _leaves(args[0])
        return [("tagged", tags[0], leaf) for leaf in inner] if tags else inner
    if origin in (Union, types.UnionType):
        return [leaf for arg in get_args(tp) for leaf in _leaves(arg)]
    if origin in (list, tuple, set, frozenset):
        return [("list", arg) for arg in get_args(tp)[:1]]
    if origin is dict:
        return [("dict", get_args(tp)[1])]
    if origin is Literal:
        return [("literal", get_args(tp))]
    return [tp]


def _has_tag(tp: Any, part: Any) -> bool:
    if not isinstance(part, str):
        return False
    if isinstance(tp, tuple) and tp[0] == "tagged":
        return bool(tp[1] == part)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        # A union discriminated by a field (the gates' `type`) puts its value in the location.
        discriminator = tp.model_fields.get("type")
        return discriminator is not None and part in get_args(discriminator.annotation)
    return False


def _field(model: type[BaseModel], key: Any) -> Any:
    for name, info in model.model_fields.items():
        if key in (name, info.alias):
            return info.annotation
    return None


def _keys_of(tp: Any) -> set[str]:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return {info.alias or name for name, info in tp.model_fields.items()}
    return set()
