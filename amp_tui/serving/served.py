"""Search for what is served: the placement of most predicted decode tokens/s (or within latency bounds).

Candidates race on the serving model's prediction (model/predict.py): the disjoint pipelines of
pipelines.py, the shared paths of stages.py, the max-flow solver's placement (solver.py) and the
baselines. The max flow prices neither pipeline depth nor KV room, so it is kept as a bound on
tokens/s and for routing, not as the objective. The time limit is polled between evaluations (each a few tens of milliseconds) and
handed down to the max-flow solver, which polls inside its own loops.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from amp_tui.core.base.errors import Cancelled
from amp_tui.serving import pipelines, stages
from amp_tui.serving.model.predict import Prediction, admitted_routing, predict
from amp_tui.serving.model.roundtrip import RoundTrip
from amp_tui.serving.model.window import benchmark_window
from amp_tui.serving.model.routing import Routing, routing
from amp_tui.serving.network import Flow, Network, max_flow
from amp_tui.serving.placement import Placement
from amp_tui.serving.spec import ServingScenario, serving_profile_of

PIPELINES_KEPT = 6       # disjoint-pipeline candidates evaluated (pipelines.py's screening picks them)
STAGES_KEPT = 10         # shared-path candidates evaluated (stages.py's screening picks them)
WINDOW_FINALISTS = 5     # candidates whose benchmark window is predicted: the best by the ramp-held
                         # estimate and by the steady state, in turn


@dataclass(frozen=True)
class Served:
    placement: Placement
    flow: Flow
    routing: Routing
    prediction: Prediction
    window: tuple[float, float] | None     # (decode, prompt) tokens/s over serving.benchmark's window

    @property
    def decode_tokens_per_s(self) -> float:
        """What the scenario asks to be measured: the benchmark window's average, else the steady state."""
        return self.window[0] if self.window is not None else self.prediction.decode_tokens_per_s

    @property
    def prompt_tokens_per_s(self) -> float:
        return self.window[1] if self.window is not None else self.prediction.prompt_tokens_per_s


def machine_profiles(scenario: ServingScenario, net: Network) -> list:
    model = scenario.serving_model
    by_group = [serving_profile_of(g, model, scenario.serving.precision) for g in scenario.groups]
    return [by_group[int(g)] for g in net.machine_group]


def evaluate(scenario: ServingScenario, net: Network, placement: Placement, profiles=None,
             window: bool = True) -> Served:
    """The placement's max flow, routes and predicted figures."""
    profiles = profiles if profiles is not None else machine_profiles(scenario, net)
    model = scenario.serving_model
    first, count = placement.arrays()
    flow = max_flow(net, first, count)
    route, admitted = admitted_routing(routing(net, flow, first, count, model.activation_bytes_per_token), profiles,
                                       first, count, model.num_layers, scenario.serving)
    trip = RoundTrip(route, profiles, count, scenario.serving, model.activation_bytes_per_token)
    prediction = predict(route, profiles, first, count, model.num_layers, scenario.serving,
                         model.activation_bytes_per_token, trip, admitted)
    figures = None
    if window and scenario.serving.benchmark is not None and prediction.decode_tokens_per_s > 0:
        warmup, span, initial = scenario.serving.benchmark
        figures = benchmark_window(trip, scenario.serving, prediction.admission_tokens, warmup, span, initial)
        figures = (float(figures[0]), float(figures[1]))
    return Served(placement, flow, route, prediction, figures)


class Outcome(NamedTuple):
    served: Served | None
    evaluations: int
    stopped_by: str
    lowest_tpot_s: float
    lowest_ttft_s: float


def _meets(served: Served, max_tpot_s: float | None, max_ttft_s: float | None) -> bool:
    p = served.prediction
    return ((max_tpot_s is None or p.tpot_s <= max_tpot_s) and (max_ttft_s is None or p.ttft_s <= max_ttft_s)
            and p.decode_tokens_per_s > 0)


def search(scenario: ServingScenario, net: Network, *, time_limit_s: float, starts: list[Placement],
           max_tpot_s: float | None = None, max_ttft_s: float | None = None,
           progress: Callable[[float], None] | None = None,
           should_cancel: Callable[[], bool] | None = None) -> "Outcome":
    """The best placement's evaluation (None if none meets the bounds), the evaluations, what stopped it, and the
    lowest TPOT and TTFT predicted for any candidate (what a bound nothing meets can be relaxed to).

    Bounded by work, so that the same input gives the same pick however busy the machine is: the pool
    (PIPELINES_KEPT + STAGES_KEPT candidates and the starts) is evaluated at steady state, then the
    WINDOW_FINALISTS best are ranked by the benchmark window the scenario names. The time limit is a
    safety net, polled between evaluations (each well under a second): past it the search returns the
    best it has, and says so ("time limit")."""
    started = time.perf_counter()
    profiles = machine_profiles(scenario, net)

    def stop() -> bool:
        if should_cancel is not None and should_cancel():
            raise Cancelled()
        return time.perf_counter() - started >= time_limit_s

    shared = stages.candidates(net, profiles, scenario.serving, keep=STAGES_KEPT, stop=stop)
    pool = (list(starts) + [placement for _, placement in pipelines.candidates(net, profiles, scenario.serving,
                                                                               keep=PIPELINES_KEPT)] + shared)
    pool = list({(p.first, p.count): p for p in pool}.values())
    finalists = scenario.serving.benchmark is not None
    total = len(pool) + (WINDOW_FINALISTS if finalists else 0)
    evaluated: list[Served] = []
    stopped_by = "converged"
    for i, placement in enumerate(pool):
        if evaluated and stop():
            stopped_by = "time limit"     # (the first is evaluated whatever the time: an answer to give)
            break
        evaluated.append(evaluate(scenario, net, placement, profiles, window=False))
        if progress is not None:
            progress((i + 1) / total)
    served_any = [s for s in evaluated if s.prediction.decode_tokens_per_s > 0]
    lowest = (min((s.prediction.tpot_s for s in served_any), default=math.inf),
              min((s.prediction.ttft_s for s in served_any), default=math.inf))
    feasible = [s for s in evaluated if _meets(s, max_tpot_s, max_ttft_s)]
    if not feasible:
        return Outcome(None, len(evaluated), stopped_by, *lowest)
    by_steady = sorted(feasible, key=lambda s: -s.prediction.decode_tokens_per_s)
    if not finalists:
        return Outcome(by_steady[0], len(evaluated), stopped_by, *lowest)
    by_ramp = sorted(feasible, key=lambda s: -ramp_estimate(s, scenario.serving))
    chosen: list[Served] = []
    for pair in zip(by_ramp, by_steady):
        for served in pair:
            if len(chosen) < WINDOW_FINALISTS and all(served is not c for c in chosen):
                chosen.append(served)
    windows = []
    for served in chosen:
        if windows and stop():
            stopped_by = "time limit"
            break
        windows.append(evaluate(scenario, net, served.placement, profiles))
        if progress is not None:
            progress((len(evaluated) + len(windows)) / total)
    best = max(windows, key=lambda s: s.decode_tokens_per_s)
    return Outcome(best, len(evaluated) + len(windows), stopped_by, *lowest)


def ramp_estimate(served: Served, serving) -> float:
    """The steady state's decode tokens/s, held to the requests a young run has in flight by the middle of
    its window (window.py's ramp: the initial requests' prompts, each taking TTFT, launch one request each)."""
    p = served.prediction
    if p.admitted_requests <= 0 or not math.isfinite(p.ttft_s):
        return 0.0
    warmup, window, initial = serving.benchmark
    held = initial * (1 + (warmup + window / 2) / p.ttft_s)
    return p.decode_tokens_per_s * min(1.0, held / p.admitted_requests)


def depth(placement: Placement) -> int:
    """Machines holding layers."""
    return int(np.count_nonzero(placement.count))
