"""core.store.judgments: the judgment cache the judge reads and fills."""

from __future__ import annotations

from core.evaluation.judge import CachedJudgment
from core.store import Store


def test_an_answer_is_kept_by_its_key_and_the_later_one_wins(store: Store) -> None:
    assert store.judgments.get("k") is None
    store.judgments.put("k", CachedJudgment(raw_answer="first"))
    store.judgments.put("k", CachedJudgment(raw_answer="second"))
    assert store.judgments.get("k") == CachedJudgment(raw_answer="second")
    assert store.redis.hlen(store.keys.judgments()) == 1
