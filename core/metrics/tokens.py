"""Token tracking by prompt component (ProjectScylla's T2 skills vs T3 tooling analysis).

Components are parts of the prompt (system prompt, skills, tool schemas, ...),
so their tokens are priced as input tokens. Skill tokens are the T2 guidance:
SKILL_PROMPT plus DOMAIN_EXPERTISE, both "T2" components in ProjectScylla's table.
"""

from __future__ import annotations

from collections.abc import Iterable

from core.matrix import ModelPrice
from core.metrics.pricing import cost_usd
from core.results.run import TokenMetrics
from core.results.transcript import ComponentTokens, ComponentType

SKILL_COMPONENTS = frozenset({ComponentType.SKILL_PROMPT, ComponentType.DOMAIN_EXPERTISE})


def token_metrics(components: list[ComponentTokens], price: ModelPrice | None) -> TokenMetrics:
    """Per-component sums, their input-token cost (empty when the price is unknown)
    and share of all component tokens in percent (0..100), plus ProjectScylla's
    schema overhead, skill efficiency and token efficiency ratio."""
    by_component = _sums(components)
    schema = by_component.get(ComponentType.TOOL_SCHEMA, 0)
    skill = sum(tokens for kind, tokens in by_component.items() if kind in SKILL_COMPONENTS)
    total = sum(by_component.values())
    return TokenMetrics(
        schema_overhead=schema,
        skill_tokens=skill,
        skill_efficiency=skill / (skill + schema) if skill + schema else None,
        token_efficiency_ratio=schema / skill if skill else None,
        by_component=by_component,
        cost_by_component=(
            {}
            if price is None
            else {kind: cost_usd(tokens, 0, price) for kind, tokens in by_component.items()}
        ),
        percentage_by_component=(
            {kind: 100.0 * tokens / total for kind, tokens in by_component.items()} if total else {}
        ),
    )


def _sums(components: Iterable[ComponentTokens]) -> dict[ComponentType, int]:
    """Token sums in ProjectScylla's component order, only the components present."""
    sums = dict.fromkeys(ComponentType, 0)
    present: set[ComponentType] = set()
    for part in components:
        sums[part.component] += part.tokens
        present.add(part.component)
    return {kind: tokens for kind, tokens in sums.items() if kind in present}
