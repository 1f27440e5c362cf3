"""The judgment cache: ``judgments``, shared by every experiment under the prefix,
the judge's cache key -> a CachedJudgment JSON (the JudgmentCache the judge
reads and fills). A key names everything an answer's meaning depends on, prompt
version included, so no entry goes stale; two judges asking at once both write,
and the later answer is kept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.store.client import TextClient
from core.store.keys import Keys

# The judge (and through it HTTP and the matrix's models) is imported by a cache read,
# not by every command that opens the store.
if TYPE_CHECKING:
    from core.evaluation.judge import CachedJudgment


class Judgments:
    def __init__(self, client: TextClient, keys: Keys):
        self.redis = client
        self.keys = keys

    def get(self, key: str) -> CachedJudgment | None:
        from core.evaluation.judge import CachedJudgment

        raw = self.redis.hget(self.keys.judgments(), key)
        return CachedJudgment.model_validate_json(raw) if raw else None

    def put(self, key: str, judgment: CachedJudgment) -> None:
        self.redis.hset(self.keys.judgments(), key, judgment.model_dump_json())


class Refreshed:
    """The judgment cache, asked nothing: every judgment is asked anew, and its answer
    replaces the one kept (`rejudge --fresh`, after a judge that answered wrongly was
    mended)."""

    def __init__(self, kept: Judgments):
        self.kept = kept

    def get(self, key: str) -> CachedJudgment | None:
        return None

    def put(self, key: str, judgment: CachedJudgment) -> None:
        self.kept.put(key, judgment)
