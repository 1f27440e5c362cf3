"""Model prices ($ per 1M tokens) and what a run's tokens cost.

A model is priced only by its exact name, or by that name without a release
date suffix (`claude-sonnet-4-20250514`, `gpt-4o-2024-08-06`) or without the
provider OpenCode puts before it (`anthropic/claude-sonnet-4`). Never by prefix:
`gpt-4o-audio-preview` is not `gpt-4o` and must stay unpriced rather than be
charged at another model's price. An unpriced model leaves the cost unknown
(docs/ARCHITECTURE.md, glossary: cost). The default judge (gpt-4o-mini) is priced,
so that a budget counts its spend, and so are the model of each preset's example in
the README (`claude-sonnet-4`, `claude-sonnet-4-5`, `gpt-5-codex`, `gemini-2.5-pro`)
and the model each pinned CLI asks for when the matrix names none (a preset's
`default_model`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from core.matrix import ModelPrice

_OPUS_4_5 = ModelPrice(input=15.0, output=75.0)

BUILTIN_PRICES: Mapping[str, ModelPrice] = {
    "claude-opus-4-5": _OPUS_4_5,
    "claude-opus-4.5": _OPUS_4_5,
    "claude-sonnet-4": ModelPrice(input=3.0, output=15.0),
    "claude-sonnet-4-5": ModelPrice(input=3.0, output=15.0),
    "gpt-4o": ModelPrice(input=5.0, output=15.0),
    "gpt-4o-mini": ModelPrice(input=0.15, output=0.6, cache_read=0.075),
    # OpenAI's list price, https://developers.openai.com/api/docs/models/gpt-5-codex
    "gpt-5-codex": ModelPrice(input=1.25, output=10.0, cache_read=0.125),
    # Google's list price for prompts up to 200k tokens (longer ones cost more: an
    # agent's turns are rarely that long), https://ai.google.dev/gemini-api/docs/pricing
    "gemini-2.5-pro": ModelPrice(input=1.25, output=10.0),
    # Anthropic's list price (cache writes: the 5-minute ones), Claude Code's default,
    # https://platform.claude.com/docs/en/models/opus-5-5/overview
    "claude-opus-5-5": ModelPrice(input=4.0, output=20.0, cache_read=0.2, cache_write=5.0),
    # OpenAI's list price for prompts up to 272k tokens, Codex's default,
    # https://developers.openai.com/api/docs/models/gpt-6.1-sol
    "gpt-6.1-sol": ModelPrice(input=2.0, output=10.0, cache_read=0.1),
}

# Anthropic dates its releases -YYYYMMDD, OpenAI -YYYY-MM-DD.
_DATE_SUFFIX = re.compile(r"-(?:\d{8}|\d{4}-\d{2}-\d{2})$")

_PRICE_UNIT_TOKENS = 1_000_000  # prices are per 1M tokens


def price_for(model: str | None, overrides: Mapping[str, ModelPrice]) -> ModelPrice | None:
    """The price of `model`: the matrix's `pricing:` first, then the built-ins."""
    if not model:
        return None
    named = model.rsplit("/", 1)[-1]  # OpenCode's provider/model
    names = (model, _DATE_SUFFIX.sub("", model), named, _DATE_SUFFIX.sub("", named))
    for name in dict.fromkeys(names):
        for table in (overrides, BUILTIN_PRICES):
            if name in table:
                return table[name]
    return None


def cost_usd(
    input_tokens: int,
    output_tokens: int,
    price: ModelPrice,
    cache_read_tokens: int = 0,
    cache_write_tokens: int = 0,
) -> float:
    """Dollars for these tokens. Cache reads and writes cost the input price unless
    the price says otherwise; `input_tokens` are the uncached ones."""
    counts = (input_tokens, output_tokens, cache_read_tokens, cache_write_tokens)
    if min(counts) < 0:
        raise ValueError(f"token counts must not be negative, got {counts}")
    cache_read = price.input if price.cache_read is None else price.cache_read
    cache_write = price.input if price.cache_write is None else price.cache_write
    weighted_tokens = (
        input_tokens * price.input
        + output_tokens * price.output
        + cache_read_tokens * cache_read
        + cache_write_tokens * cache_write
    )
    return weighted_tokens / _PRICE_UNIT_TOKENS
