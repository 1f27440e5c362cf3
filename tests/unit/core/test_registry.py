"""core.registry: names kept in registration order, a second registration refused."""

from __future__ import annotations

import pytest

from core.registry import Registry


def test_things_are_found_by_name_in_the_order_they_were_registered() -> None:
    registry: Registry[int] = Registry("toy")
    assert registry.add("b", 2) == 2
    registry.add("a", 1)
    assert registry.names() == ("b", "a") == tuple(registry)
    assert registry["a"] == 1 and registry.get("c") is None
    assert "b" in registry and len(registry) == 2


def test_a_name_registered_twice_is_refused_and_the_first_kept() -> None:
    registry: Registry[int] = Registry("toy")
    registry.add("a", 1)
    with pytest.raises(ValueError, match="toy 'a' is registered twice"):
        registry.add("a", 2)
    assert registry["a"] == 1


def test_an_unknown_name_says_what_is_registered() -> None:
    registry: Registry[int] = Registry("toy")
    registry.add("a", 1)
    registry.add("b", 2)
    with pytest.raises(KeyError, match="unknown toy 'c': registered are a, b"):
        registry["c"]
