"""Prices of models, per million tokens (input, output), for the budget's cost counter.

The table is a default; override it per step (``agent_step(prices=...)``) or for the process
(``longtask.steps.PRICES[...] = ...``). A model the table does not know is not charged to
the budget; its ``model.call`` events, and the ``agent.run.completed`` of a run that called
it, say ``"cost": null`` (unknown).
"""

from __future__ import annotations

from collections.abc import Mapping

PRICES: dict[str, tuple[float, float]] = {
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4o": (2.50, 10.00),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "o3": (2.00, 8.00),
    "o4-mini": (1.10, 4.40),
    "gpt-5": (1.25, 10.00),
    "gpt-5-mini": (0.25, 2.00),
    "gpt-5-nano": (0.05, 0.40),
}


def cost_of(
    model: str,
    tokens_in: int,
    tokens_out: int,
    overrides: Mapping[str, tuple[float, float]] | None = None,
) -> float | None:
    """Cost of one call; the longest matching name wins, so that a dated model the server
    reports (``gpt-4o-mini-2024-07-18``) is priced like its family."""
    table = {**PRICES, **(overrides or {})}
    names = [n for n in table if model == n or model.startswith(n + "-")]
    if not names:
        return None
    price_in, price_out = table[max(names, key=len)]
    return (tokens_in * price_in + tokens_out * price_out) / 1_000_000
