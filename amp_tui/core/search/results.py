"""What a search returns: the ranked strategies, the candidates no partition fits, the best even
split, and the statistics that say how exact the ranking is."""

from __future__ import annotations

import math
from dataclasses import dataclass

from amp_tui.core.costmodel.prediction import Prediction
from amp_tui.core.spec.scenario import Scenario
from amp_tui.core.spec.strategy import Strategy


@dataclass(frozen=True)
class Infeasible:
    strategy: Strategy
    reason: str

    def to_dict(self) -> dict:
        return {**self.strategy.to_dict(), "reason": self.reason}


@dataclass(frozen=True)
class SearchStats:
    candidates: int       # (tp, pp, dp, micro-batch size, placement) combinations
    pruned: int           # skipped: a lower bound proved them out of the top N
    evaluated: int        # partition search run
    infeasible: int       # no partition fits in memory (pruned or not)
    solves: int           # partition solves: DPs, plus one per one- or two-stage enumeration
    node_orders: int      # orders of node groups along the pipeline
    all_node_orders: bool  # False: too many distinct orders; rank order and by GPU speed only
    search_time_s: float
    # Not every order searched: a lower bound on every candidate of an order left out (inf: none
    # can beat the N-th best found, so the ranking is exact all the same).
    orders_floor: float = math.inf
    # Stopped at its deadline: a lower bound on every candidate it left unsettled (inf: none of
    # them could enter the top N, so the ranking is exact all the same).
    open_floor: float = math.inf

    @property
    def exact(self) -> bool:
        """Whether the ranking is the best over every node order and every candidate."""
        return (self.all_node_orders or self.orders_floor == math.inf) and self.open_floor == math.inf

    @property
    def out_of_time(self) -> bool:
        """Whether the deadline cut the search short of proving its top N."""
        return self.open_floor < math.inf

    def orders_gap(self, best: float | None) -> float | None:
        """Not exact: the most the best found (`best` seconds) can be above the optimum, over the
        orders left out and the candidates left unsettled."""
        if self.exact or best is None:
            return None
        floor = min(self.open_floor, math.inf if self.all_node_orders else self.orders_floor)
        return max(best / floor - 1.0, 0.0) if floor > 0 else math.inf

    def to_dict(self) -> dict:
        return {"candidates": self.candidates, "pruned": self.pruned, "evaluated": self.evaluated,
                "infeasible": self.infeasible, "solves": self.solves, "node_orders": self.node_orders,
                "all_node_orders": self.all_node_orders, "exact": self.exact,
                "orders_floor": None if self.all_node_orders or self.orders_floor == math.inf else self.orders_floor,
                "out_of_time": self.out_of_time, "open_floor": self.open_floor if self.out_of_time else None,
                "search_time_s": self.search_time_s}


@dataclass(frozen=True)
class SearchResult:
    scenario: Scenario
    strategies: tuple[Prediction, ...]     # feasible, best first
    infeasible: tuple[Infeasible, ...]
    baseline: Prediction | None            # best even split in rank order
    stats: SearchStats

    @property
    def speedup_vs_baseline(self) -> float | None:
        if not self.strategies or self.baseline is None:
            return None
        return self.baseline.iteration_time_s / self.strategies[0].iteration_time_s

    def to_dict(self, top: int | None = None) -> dict:
        """Everything, with the best `top` strategies (default: all that were ranked)."""
        return {
            "scenario": self.scenario.name,
            "search_time_s": self.stats.search_time_s,
            "candidates": self.stats.candidates,
            "statistics": self.stats.to_dict(),
            "strategies": [{"rank": i + 1, **p.to_dict()} for i, p in enumerate(self.strategies[:top])],
            "infeasible": [entry.to_dict() for entry in self.infeasible],
            "baseline": self.baseline.to_dict() if self.baseline else None,
            "speedup_vs_baseline": self.speedup_vs_baseline,
        }
