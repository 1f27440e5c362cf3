"""core.wording.plural: a count and its noun as a sentence says them."""

from __future__ import annotations

import pytest

from core.wording import plural


@pytest.mark.parametrize(
    ("n", "noun", "said"),
    [
        (1, "run", "1 run"),
        (0, "run", "0 runs"),
        (2, "delivery", "2 deliveries"),
        (1, "delivery", "1 delivery"),
        (3, "key", "3 keys"),
        (2, "infrastructure error", "2 infrastructure errors"),
    ],
)
def test_a_count_and_its_noun(n: int, noun: str, said: str) -> None:
    assert plural(n, noun) == said
