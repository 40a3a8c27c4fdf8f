"""What `plan` ranks by: iteration time, cost per token, or time among strategies within a budget.

On one set of nodes every strategy costs the same per hour, so the fastest is also the cheapest
per token; the objectives differ only in which nodes a strategy uses (see subclusters.py). The cost
per token of a strategy is price_per_hour x iteration_time / (tokens per iteration x 3600), so a
part of the cluster is ranked, and its lower bound scaled, by price_per_hour x time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from amp_tui.core.base.errors import SpecError
from amp_tui.core.costmodel.prediction import Prediction
from amp_tui.core.spec.scenario import Scenario

OBJECTIVES = ("time", "cost")


@dataclass(frozen=True)
class Objective:
    kind: str = "time"                       # time | cost
    budget_usd_per_hour: float | None = None  # strategies above it are left out

    def __post_init__(self):
        if self.kind not in OBJECTIVES:
            raise SpecError("objective", self.kind, f"expected one of {', '.join(OBJECTIVES)}")
        if self.budget_usd_per_hour is not None and not self.budget_usd_per_hour > 0:
            raise SpecError("budget", self.budget_usd_per_hour, "must be a positive number of dollars per hour")

    @property
    def needs_prices(self) -> bool:
        return self.kind == "cost" or self.budget_usd_per_hour is not None

    def check(self, scenario: Scenario) -> None:
        """Cost and budgets need a price on every node group: SpecError naming the first without."""
        if not self.needs_prices:
            return
        for i, group in enumerate(scenario.cluster.nodes):
            if group.price_per_hour is None:
                what = "--objective cost" if self.kind == "cost" else "--budget"
                raise SpecError(f"cluster.nodes[{i}].price_per_hour", None,
                                f"{what} needs a price for every node group ({group.label} has none)")

    def admits(self, price_per_hour: float | None) -> bool:
        """Within the budget (always, without one)."""
        return self.budget_usd_per_hour is None or (price_per_hour is not None
                                                    and price_per_hour <= self.budget_usd_per_hour * (1 + 1e-12))

    def scale(self, price_per_hour: float | None) -> float:
        """What one second of iteration time weighs on nodes costing `price_per_hour`."""
        return price_per_hour if self.kind == "cost" and price_per_hour is not None else 1.0

    def weights(self, prices: np.ndarray) -> np.ndarray:
        """`scale` of each price (nan: unknown)."""
        if self.kind == "cost":
            return np.where(np.isnan(prices), 1.0, prices)
        return np.ones(len(prices))

    def within_budget(self, prices: np.ndarray) -> np.ndarray:
        """`admits` of each price (nan: unknown)."""
        if self.budget_usd_per_hour is None:
            return np.ones(len(prices), dtype=bool)
        return ~np.isnan(prices) & (np.nan_to_num(prices, nan=np.inf) <= self.budget_usd_per_hour * (1 + 1e-12))

    def key(self, prediction: Prediction) -> tuple:
        """Sort key, best first; ties on cost go to the faster strategy."""
        if self.kind == "cost":
            cost = prediction.cost_per_million_tokens_usd
            return (cost if cost is not None else float("inf"), prediction.iteration_time_s)
        return (prediction.iteration_time_s,)

    def rank(self, predictions) -> list[Prediction]:
        """The predictions within the budget, best first (a stable sort: equal keys keep their order)."""
        return sorted((p for p in predictions if self.admits(p.cost_per_hour_usd)), key=self.key)

    def describe(self) -> str:
        text = "cost per token" if self.kind == "cost" else "iteration time"
        if self.budget_usd_per_hour is not None:
            text += f" within ${self.budget_usd_per_hour:,.2f}/hour"
        return text
