"""Per-run limits (`limits: {max_cost_usd, max_tokens, max_llm_calls}`): what a run
has spent so far, and the first limit it crossed.

One reckoning for every place that asks: the worker while a streaming CLI runs
(its stdout parsed as it arrives), the built-in agent between its LLM calls, and
the evaluation of the finished run (which gives the run its `limit` status).
Spend is counted like the run's own figures (core.evaluation.evaluate): the CLI's reported
totals over summed calls, the matrix's price over a reported cost. A cost that
cannot be known (no price, none reported) cannot cross `max_cost_usd`.

A transcript that records no usage at all (no LLM call, no token or cost figure) is
not a run that spent nothing when its agent has a model: a plain transcript cannot
carry usage, and an events-jsonl agent may not have written its llm_call events.
Its cost is unknown; only an agent without a model (a script) costs 0 (docs/ARCHITECTURE.md,
glossary, "cost").
"""

from __future__ import annotations

from dataclasses import dataclass

from core.matrix import Limits, ModelPrice
from core.metrics.pricing import cost_usd
from core.results.transcript import Transcript


@dataclass(frozen=True)
class Spend:
    llm_calls: int
    tokens: int
    cost_usd: float | None
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    recorded: bool  # whether the transcript recorded any usage (a call, a figure)


def spend_of(
    transcript: Transcript, price: ModelPrice | None, *, model: str | None = None
) -> Spend:
    """The run's figures: the CLI's reported totals win over summed calls (Claude's
    per-call output tokens are placeholders); the matrix's price over a reported cost.
    `model`, the run's: with one, no usage recorded is an unknown cost, not 0 (a limit
    check mid-run may leave it out, as neither can cross `max_cost_usd`)."""
    calls = transcript.llm_calls
    totals = (
        transcript.reported_input_tokens,
        transcript.reported_output_tokens,
        transcript.reported_cache_read_tokens,
        transcript.reported_cache_write_tokens,
        transcript.reported_cost_usd,
        transcript.reported_llm_calls,
    )
    recorded = bool(calls) or any(total is not None for total in totals)
    figures = []
    for reported, per_call in (
        (transcript.reported_input_tokens, "input_tokens"),
        (transcript.reported_output_tokens, "output_tokens"),
        (transcript.reported_cache_read_tokens, "cache_read_tokens"),
        (transcript.reported_cache_write_tokens, "cache_write_tokens"),
    ):
        figures.append(
            reported if reported is not None else sum(getattr(c, per_call) for c in calls)
        )
    input_tokens, output_tokens, cache_read, cache_write = figures
    cost: float | None
    if not recorded:
        cost = None if model else 0.0
    elif price is not None:
        cost = cost_usd(input_tokens, output_tokens, price, cache_read, cache_write)
    elif transcript.reported_cost_usd is not None:
        cost = transcript.reported_cost_usd
    elif not calls and input_tokens == 0 and output_tokens == 0:
        cost = 0.0  # usage reported, and none: nothing to price
    else:
        cost = None
    return Spend(
        llm_calls=max(len(calls), transcript.reported_llm_calls or 0),
        tokens=sum(figures),
        cost_usd=cost,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
        recorded=recorded,
    )


def crossed(limits: Limits, spend: Spend) -> str | None:
    """Which limit `spend` went past, and at what figure; None within every limit."""
    cost, max_cost = spend.cost_usd, limits.max_cost_usd
    if max_cost is not None and cost is not None and cost > max_cost:
        calls = spend.llm_calls
        return f"limit max_cost_usd {max_cost:g} crossed: ${cost:.6g} after {calls} LLM calls"
    if limits.max_tokens is not None and spend.tokens > limits.max_tokens:
        return (
            f"limit max_tokens {limits.max_tokens} crossed: {spend.tokens} tokens "
            f"after {spend.llm_calls} LLM calls"
        )
    if limits.max_llm_calls is not None and spend.llm_calls > limits.max_llm_calls:
        return f"limit max_llm_calls {limits.max_llm_calls} crossed: {spend.llm_calls} LLM calls"
    return None
