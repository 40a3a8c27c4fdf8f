"""Lower bounds on a candidate's iteration time over every partition of its layers, and on its
memory, before any partition is searched: what lets the search (search.py) visit candidates
best-first and prune the rest exactly.

The bound (time_floors) relaxes the pipeline to fractional layers on each stage's GPUs, then
tightens it with whole layers (the bottleneck holds whole core layers, every stage one of its own),
the cheapest sends, and the tail's all-reduce and optimizer step, coupled with the bottleneck
where a low bottleneck leaves the slow stages many parameters to all-reduce.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from amp_tui.core.base.errors import Cancelled
from amp_tui.core.base.units import format_bytes
from amp_tui.core.costmodel.cost import Candidate

FLOOR_BATCH = 64   # candidates bounded in one vectorised pass, between cancellation polls (fewer when deeper)


REFINE_BATCH = 16  # candidates at the head of the queue given the refined bound together


REFINE_MIN_LAYERS = 64   # ... on models this deep (on shallower ones the partition solve is cheaper)


COUPLED_RANGES = 6       # ranges of the bottleneck over which the coupled floor bounds the tail (_coupled_floors)


BISECTIONS = 20          # halvings of the interval holding that tail (_held_tails)


def memory_shortfall(candidate: Candidate) -> str | None:
    """Why no partition can fit, from two necessary conditions, or None if both hold.

    The fullest stage holds at least an even share of the weights, gradients and optimizer state
    (or the largest layer's). And stage s, holding its in-flight micro-batches' activations, has room
    for at most (capacity_s - reserve) / in_flight_s bytes per micro-batch of them, so the stages
    together must have room for every layer's activations plus the state.
    """
    reserve = float(candidate.stage_reserve.min())
    state_sum, state_max, capacity_max, room, in_flight_max = _memory_totals(candidate)
    state = max(state_sum / candidate.pp, state_max)
    if state + reserve > capacity_max:
        return f"weights, gradients and optimizer state need at least {format_bytes(state)} per GPU"
    act_prefix, _, _ = candidate.memory_arrays
    need = float(act_prefix[-1]) + state_sum / in_flight_max
    if need > room:
        return (f"activations of micro-batch {candidate.mbs} and the state need {format_bytes(need)} of room "
                f"per micro-batch in flight; the stages have {format_bytes(room)}")
    return None


def _memory_totals(candidate: Candidate) -> tuple[float, float, float, float, float]:
    """(all state bytes, the largest layer's, the largest stage capacity, the stages' room per
    micro-batch in flight, the most micro-batches in flight), each cached as far as it is shared."""
    cost, layout = candidate.cost, candidate.layout
    cache = cost.floor_cache
    state_key = ("state", candidate.tp, candidate.dp, candidate.pp)
    if state_key not in cache:
        # per GPU and layer (the memory terms' count: 1/ep of each MoE layer's experts, their state
        # sharded over the expert data-parallel group)
        state = np.diff(candidate.state_prefix)
        cache[state_key] = (float(state.sum()), float(state.max()))
    in_flight = candidate.memory_arrays[2]
    room_key = ("room", layout.tp, layout.pp, layout.dp, layout.order, in_flight.tobytes())
    if room_key not in cache:
        capacity = layout.stage_capacity
        room = np.sum((capacity - candidate.stage_reserve) / in_flight)
        cache[room_key] = (float(capacity.max()), float(room), float(in_flight.max()))
    return cache[state_key] + cache[room_key]


def time_floors(candidates: list[Candidate], cancel: Callable[[], bool], refine: bool = True,
                 limit: float | None = None) -> list[float]:
    """A lower bound on each candidate's iteration time over every partition (terms as in cost.py).

    With b_l a layer's time on the fastest GPU serving the pipeline, rho_s the least slow-down of
    stage s's GPUs against b, and f_s the cheapest sends on either side of stage s, a stage's busy
    time is tau_s >= C_s + f_s with C_s >= rho_s x (its share of sum b). Then
      (B - 1) max tau + sum C >= min over M of (B - 1) M + S(M), where S(M) fills stages fastest
        first, each up to C_s = M - f_s, until all of sum b is placed (a fractional relaxation),
        and M >= ceil(k / pp) x (k-th largest b) since k layers that slow must share pp stages,
        M >= one_layer_each (every stage holds a layer) and, refined, M >= whole_layers_floor
        (no stage holds part of a layer, on its own GPUs' times) and M >= the cheapest layer each
        stage must hold (_lone_layers);
      fill adds the cheapest cut at every boundary; tail >= all parameters / sum_s (1 / e_coef_s).
    Candidates with the same pp are solved together, up to FLOOR_BATCH at a time (8 FLOOR_BATCH
    stages: their arrays grow with pp, e.g. (pp, L) layer times per candidate); `cancel` is
    polled between batches. Without `refine`, only this bound (cheaper); with it, the strongest
    of the variants in pipeline_floor below and the exposed all-reduce; with a `limit` too (the
    search's), and without interleaving, the bound that couples the bottleneck with the tail
    (_coupled_floors: whole layers, so a low bottleneck leaves the slow stages many layers to
    all-reduce) where the others are still below it. That one costs about a millisecond per
    batch: it pays where a family's orders are bounded (expand_family, hundreds of candidates
    whose solves it saves), not in the search queue's few at a time.
    """
    floors = [0.0] * len(candidates)
    by_pp: dict[int, list[int]] = {}
    for index, candidate in enumerate(candidates):
        by_pp.setdefault(candidate.pp, []).append(index)
    size = {pp: max(1, min(FLOOR_BATCH, 8 * FLOOR_BATCH // pp)) for pp in by_pp}
    batches = [(pp, members[i:i + size[pp]]) for pp, members in by_pp.items()
               for i in range(0, len(members), size[pp])]
    for pp, members in batches:
        if cancel():
            raise Cancelled
        group = [candidates[index] for index in members]
        layout_terms = [_layout_floor_terms(c) for c in group]
        times = [_fastest_times(c, terms[2]) for c, terms in zip(group, layout_terms)]
        slowdown = np.array([t[1] for t in times])                       # (n, node groups)
        descending = np.array([t[3] for t in times])                     # (n, L)
        work = np.array([t[2] for t in times])
        mbs = np.array([c.mbs for c in group], dtype=np.float64)
        cheapest_cut = (np.array([t[0][0] for t in layout_terms]).reshape(len(group), pp - 1) * mbs[:, None]
                        + np.array([t[0][1] for t in layout_terms]).reshape(len(group), pp - 1))
        tail = np.array([t[1] for t in layout_terms])
        serves = np.array([c.layout.serves for c in group])             # (n, pp, node groups)
        rho = np.where(serves, slowdown[:, None, :], 0.0).max(axis=2)
        sends = np.zeros((len(group), pp))
        sends[:, :-1] += cheapest_cut
        sends[:, 1:] += cheapest_cut
        k = np.arange(1, descending.shape[1] + 1)
        m_floor = np.maximum((np.ceil(k / pp)[None, :] * descending).max(axis=1),
                             one_layer_each(rho, descending[:, ::-1]))
        if refine:      # on the stage's own GPUs (the slowest serving type's, its tp link included)
            if cancel():        # (the refined terms take tens of ms on 1,000 layers)
                raise Cancelled
            core = group[0].cost.floor_cache["core layers"]
            stage_times = np.array([c.stage_layer_times[0] for c in group])               # (n, pp, L)
            thresholds = layer_thresholds(stage_times[:, :, core], sends + _end_layers(stage_times, core))
            if cancel():
                raise Cancelled
            m_floor = np.maximum.reduce([m_floor, whole_layers_floor(thresholds),
                                         (sends + _lone_layers(stage_times)).max(axis=1)])
        B = np.array([c.num_micro_batches for c in group], dtype=np.float64)
        v = np.array([c.knobs.virtual_stages for c in group], dtype=np.float64)
        core_rho = np.where(serves, np.array([t[4] for t in times])[:, None, :], 0.0).max(axis=2)
        other = np.array([t[5] for t in times])
        core_work = work - other
        plain = v == 1
        caps = np.array([_stage_caps(c, t[3]) for c, t in zip(group, times)]) if refine and plain.any() else None
        if refine and cancel():
            raise Cancelled

        def pipeline_floor(steps: np.ndarray) -> np.ndarray:
            """min over M of steps x M + S(M) / v, the strongest of the variants below."""
            # With v interleaved chunks the fill and drain count 1/v: steps M + S / v is
            # ((v steps + 1 - 1) M + S) / v, the same problem with more micro-batches.
            out = pipeline_floors(rho, sends, work, m_floor, v * steps + 1) / v
            if not refine:
                return out
            # The same with the least slow-down over the core layers only (the most common kind,
            # e.g. transformer blocks; an embedding may run nearly as fast on a slow GPU): a
            # stage's C_s is at least rho'_s x (its share of sum b less the other layers' b, E),
            # so the stages must absorb work - E at the pace rho'; the other layers' time (at least
            # E) adds to the stages' sum wherever they lie.
            out = np.maximum(out, (pipeline_floors(core_rho, sends, core_work, m_floor, v * steps + 1) + other) / v)
            # Memory caps the layers a stage can hold (a slow GPU with little memory often holds
            # fewer layers than its speed would give it, and the others must take the rest): with
            # interleaving a stage's layers are spread over its chunks, so only without it.
            if caps is not None and (caps < work[:, None] * (1 - 1e-9)).any():     # else no cap binds
                capped = np.maximum(_capped_floors(rho, sends, work, caps, steps + 1),
                                    _capped_floors(core_rho, sends, core_work, caps, steps + 1) + other)
                out = np.where(plain, np.maximum(out, capped), out)
            return out

        base = pipeline_floor(B - 1)
        pipeline = base + tail
        # Where backward hides part of the all-reduce, E_s >= e_s P_s + latency - h C_s with
        # C_s <= max tau = M: the tail is at least all parameters / sum_s (1 / e_s) less h M, so
        # the steady state counts B - 1 - h bottlenecks and the full tail is added (while B - 1 >= h).
        exposed = [_exposed_tail_terms(c) for c in group] if refine else [(0.0, 0.0)] * len(group)
        hidden = np.array([t[0] for t in exposed])
        steps = B - 1 - hidden
        hidden_base = base
        if refine and (hidden > 0).any() and (steps >= 0).any():
            if cancel():
                raise Cancelled
            full_tail = np.array([t[1] for t in exposed])
            hidden_base = pipeline_floor(np.maximum(steps, 0.0))
            pipeline = np.where((hidden > 0) & (steps >= 0), np.maximum(pipeline, hidden_base + full_tail), pipeline)
        if refine and limit is not None and (reach := plain & (pipeline + cheapest_cut.sum(axis=1) / v < limit)).any():
            rows = np.flatnonzero(reach)
            # Its ranges' pipeline floors: the core layers' variant from each range's bottleneck up
            # (on the benchmarks the one that binds there; the others are in hidden_base).
            coupled = _coupled_floors(
                lambda moves, lowest, at: pipeline_floors(core_rho[rows[at]], sends[rows[at]], core_work[rows[at]],
                                                           lowest, moves + 1) + other[rows[at]],
                hidden_base[rows], [group[i] for i in rows], thresholds[rows], core, m_floor[rows], steps[rows])
            pipeline[rows] = np.maximum(pipeline[rows], coupled)
        for index, value in zip(members, pipeline + cheapest_cut.sum(axis=1) / v):
            floors[index] = float(value)
    return floors


def pipeline_floors(rho: np.ndarray, sends: np.ndarray, work: np.ndarray, m_floor: np.ndarray,
                     B: np.ndarray) -> np.ndarray:
    """Per row (candidate), min over M of (B - 1) M + S(M) (see time_floors). S is convex and
    piecewise linear in M, so the minimum sits at the smallest allowed M or where one more stage
    (in order of speed) fills up. Arrays: rho, sends (n, pp); work, m_floor, B (n,)."""
    n, pp = rho.shape
    order = np.argsort(rho, axis=1, kind="stable")
    rho = np.take_along_axis(rho, order, axis=1)
    sends = np.take_along_axis(sends, order, axis=1)
    inverse = np.cumsum(1.0 / rho, axis=1)          # work the first k stages absorb per unit of M
    offset = np.cumsum(sends / rho, axis=1)         # ... less what their sends take
    lowest = np.maximum.reduce([m_floor, sends.max(axis=1), (work + offset[:, -1]) / inverse[:, -1]])
    m = np.concatenate([lowest[:, None], (work[:, None] + offset) / inverse], axis=1)   # (n, pp + 1)
    # Stages filled to M before the rest fits: the first k whose capacity m inverse_k - offset_k
    # reaches the work, by a binary search per M (capacity grows with k where M is above every
    # stage's sends, i.e. at M >= lowest, the only M kept): O(n pp log pp) work and O(n pp)
    # memory, not (n, pp + 1, pp) arrays (134 MB for 64 candidates of 512 stages).
    rows = np.arange(n)[:, None]
    full, high = np.zeros(m.shape, dtype=np.int64), np.full(m.shape, pp)
    while (full < high).any():
        middle = np.minimum((full + high) // 2, pp - 1)
        short = m * inverse[rows, middle] - offset[rows, middle] < work[:, None]
        searching = full < high
        full, high = np.where(searching & short, middle + 1, full), np.where(searching & ~short, middle, high)
    last = np.maximum(full - 1, 0)
    placed = np.where(full > 0, m * inverse[rows, last] - offset[rows, last], 0.0)
    filled = np.where(full > 0, full * m - np.take_along_axis(np.cumsum(sends, axis=1), last, axis=1), 0.0)
    next_rho = np.take_along_axis(rho, np.minimum(full, pp - 1), axis=1)
    rest = np.where(full < pp, (work[:, None] - placed) * next_rho, 0.0)
    total = (B[:, None] - 1) * m + filled + np.maximum(rest, 0.0)
    return np.where(m >= lowest[:, None], total, np.inf).min(axis=1)


def layer_thresholds(core_times: np.ndarray, sends: np.ndarray) -> np.ndarray:
    """(n, pp, C): per row and stage, the least busy time at which it holds k + 1 of the C layers
    of the most common kind (the core layers, e.g. transformer blocks; `core_times`: (n, pp, C),
    each stage's time for each of them, or a lower bound on it), `sends` (n, pp): what the stage
    is busy with whatever it holds (its cheapest sends) plus its k + 1 cheapest core layers,
    wherever they lie. Ascending along the last axis."""
    return np.cumsum(np.sort(core_times, axis=2), axis=2) + sends[:, :, None]


def whole_layers_floor(thresholds: np.ndarray) -> np.ndarray:
    """Per row, a floor on the bottleneck's busy time that counts whole core layers
    (`thresholds`: layer_thresholds's): with every stage busy at most M, stage s holds at most
    K_s(M) of them, the count of its thresholds at or below M. The stages hold all C core layers
    between them, so sum_s K_s(M) >= C: M is at least the C-th smallest of the thresholds over
    every stage. Contiguity, memory and the other layers are relaxed; what it keeps that the
    fractional floors lose is that a stage cannot hold part of a layer."""
    count = thresholds.shape[2]
    if not count:
        return np.zeros(len(thresholds))
    return np.partition(thresholds.reshape(len(thresholds), -1), count - 1, axis=1)[:, count - 1]


def _end_layers(stage_times: np.ndarray, core: np.ndarray) -> np.ndarray:
    """Per row and stage, the time of the layers it holds in every partition that are not core
    layers: the first stage holds the first layer, the last stage the last (`stage_times`: (n, pp,
    L), each stage's time for each layer; `core`: (L,), which layers are core). Added to a stage's
    sends, whole_layers_floor's thresholds still bound the stage's busy time from below."""
    out = np.zeros(stage_times.shape[:2])
    last = stage_times.shape[2] - 1
    if not core[0]:
        out[:, 0] += stage_times[:, 0, 0]
    if last > 0 and not core[last]:
        out[:, -1] += stage_times[:, -1, last]
    return out


def _lone_layers(stage_times: np.ndarray) -> np.ndarray:
    """Per row and stage, the least time of a layer it holds in every partition (`stage_times`:
    (n, pp, L), each stage's time for each layer): the first stage holds the first layer, the last
    stage the last, and stage s, with s stages before it and pp - 1 - s after it, each holding a
    layer, holds one of layers s ... L - pp + s. A slow GPU in the middle of the pipeline bounds
    the bottleneck by its cheapest core layer, where one_layer_each may give it the embedding."""
    n, pp, layers = stage_times.shape
    stages = np.arange(pp)[:, None]
    if 2 * (pp - 1) < layers:   # every window holds layers pp - 1 ... L - pp, and s ... pp - 2, L - pp + 1 ... L - pp + s
        edges = np.arange(pp - 1)[None, :]
        out = np.minimum.reduce([stage_times[:, :, pp - 1:layers - pp + 1].min(axis=2),
                                 np.where(edges >= stages, stage_times[:, :, :pp - 1], np.inf).min(axis=2, initial=np.inf),
                                 np.where(edges < stages, stage_times[:, :, layers - pp + 1:], np.inf).min(axis=2, initial=np.inf)])
    else:
        out = stage_times[:, stages, stages + np.arange(layers - pp + 1)[None, :]].min(axis=2)
    out[:, 0] = np.maximum(out[:, 0], stage_times[:, 0, 0])
    out[:, -1] = np.maximum(out[:, -1], stage_times[:, -1, -1])
    return out


def one_layer_each(rho: np.ndarray, ascending: np.ndarray) -> np.ndarray:
    """Per row, a floor on the bottleneck stage's compute: every stage holds a layer of its own,
    and a stage at slow-down rho takes at least rho x that layer's fastest time, so the bottleneck
    is at least the least, over the ways of giving each stage a distinct layer, of the largest
    rho x b; the slowest stage with the cheapest layer, the next with the next, and so on, gives
    that least (exchanging two stages' layers never lowers the larger product). Arrays: rho
    (n, pp), the stages' slow-downs; ascending (n, L), the layers' fastest times, ascending."""
    count = min(rho.shape[1], ascending.shape[1])
    slowest_first = -np.sort(-rho, axis=1)[:, :count]
    return (slowest_first * ascending[:, :count]).max(axis=1) if count else np.zeros(len(rho))


def _stage_caps(candidate: Candidate, descending: np.ndarray) -> np.ndarray:
    """Per stage, the most work (in the fastest serving GPU's layer times) any partition can give
    it without overfilling its memory: at most the k largest layer times (`descending`: the
    fastest serving GPU's layer times, largest first), k its _stage_layer_caps."""
    return np.concatenate([[0.0], np.cumsum(descending)])[_stage_layer_caps(candidate)]


def _stage_layer_caps(candidate: Candidate) -> np.ndarray:
    """Per stage, the most layers any partition can give it without overfilling its memory: a
    stage holding k layers holds at least the k with the least memory there (weights, gradients,
    optimizer state and activations in flight; the transient peak is at least the smallest
    layer's), so k is at most the count of those that fit."""
    layout = candidate.layout
    key = ("caps", candidate.tp, candidate.pp, candidate.dp, candidate.mbs, candidate.num_micro_batches,
           layout.stage_capacity.tobytes(), candidate.stage_reserve.tobytes())
    cache = candidate.cost.floor_cache
    if key not in cache:
        act_prefix, peak, in_flight = candidate.memory_arrays
        room = layout.stage_capacity - candidate.stage_reserve - float(peak.min())
        state = _memory_totals(candidate)[0]
        if state + float(in_flight.max()) * float(act_prefix[-1]) <= float(room.min()):
            cache[key] = np.full(candidate.pp, candidate.num_layers)     # every stage holds every layer
        else:
            params = np.diff(candidate.state_prefix)        # (L,) state bytes per layer
            acts = np.diff(act_prefix)
            need = np.sort(params[None, :] + in_flight[:, None] * acts[None, :], axis=1)     # (pp, L)
            cache[key] = (np.cumsum(need, axis=1) <= room[:, None]).sum(axis=1)
    return cache[key]


def _coupled_floors(pipeline_floor: Callable, base: np.ndarray, candidates: list[Candidate], thresholds: np.ndarray,
                    core: np.ndarray, lowest: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Per candidate (without interleaving), a floor on steps x M + fill + the tail that couples
    the bottleneck M with the tail: a low M caps the core layers the fast stages can hold, so the
    slow ones must take the rest, and their parameters' all-reduce and optimizer step.

    With every stage busy at most M, stage s holds at most K_s(M) core layers, the count of its
    `thresholds` (layer_thresholds's, the end layers it always holds, _end_layers, among its
    sends) at or below M, and at most its memory's count (_stage_layer_caps). Holding n of them,
    its tail is at least c_s + e_s x (its end layers' parameters and the n fewest of a core
    layer's), c_s its constant (the last bucket's latency and the iteration's fixed cost). The
    stages hold all C core layers, so the largest tail is at least the least E at which
    sum_s min(K_s(M), #{n: c_s + e_s P(n) <= E}) reaches C (_held_tails; inf if the stages
    cannot hold C), and at least max c_s. K only changes at the thresholds: over M in
    [t_i, t_i+1) the tail is at least E(K(t_i)) and the pipeline at least pipeline_floor(steps,
    t_i); the floor is the least over the first COUPLED_RANGES - 1 ranges from `lowest` (the
    bottleneck's floor) and the rest, M >= t, with the memory counts alone. Where backward hides
    up to h x C_s <= h M of the all-reduce, `steps` is B - 1 - h as in time_floors (no floor, -inf,
    where it is negative) and e the all-reduce's and the optimizer's coefficients together.
    `pipeline_floor(steps, lowest, rows)` bounds steps x M + S(M) over M >= lowest for those
    rows, and `base` over M >= `lowest` (a variant for any M, as the memory caps', may be in it,
    so each range takes the larger). Arrays: `thresholds` (n, pp, C), the others (n,)."""
    n, pp, count = thresholds.shape
    if not count:
        return np.full(n, -np.inf)
    # The R - 1 least thresholds above `lowest` are among each stage's next R - 1 ones.
    below = (thresholds <= lowest[:, None, None]).sum(axis=2)                                     # (n, pp)
    padded = np.concatenate([thresholds, np.full((n, pp, COUPLED_RANGES - 1), np.inf)], axis=2)
    after = np.take_along_axis(padded, below[:, :, None] + np.arange(COUPLED_RANGES - 1), axis=2)  # (n, pp, R - 1)
    flat = after.reshape(n, -1)
    if flat.shape[1] > COUPLED_RANGES - 1:
        flat = np.partition(flat, COUPLED_RANGES - 2, axis=1)[:, :COUPLED_RANGES - 1]
    starts = np.concatenate([lowest[:, None], np.sort(flat, axis=1)], axis=1)                      # (n, R)
    ranges, exists = starts.shape[1], np.isfinite(starts)
    memory = np.array([_stage_layer_caps(c) for c in candidates])                                  # (n, pp)
    held = below[:, None, :] + (after[:, None, :, :] <= starts[:, :-1, None, None]).sum(axis=3)   # (n, R - 1, pp)
    held = np.minimum(np.concatenate([held, memory[:, None, :]], axis=1), memory[:, None, :])      # (n, R, pp)
    layer_params = candidates[0].cost._params              # per layer; a GPU holds 1 / tp of them (param_prefix)
    tp = np.array([c.tp for c in candidates], dtype=np.float64)
    per_gpu = layer_params[None, None, :] / tp[:, None, None]
    end_params = _end_layers(np.broadcast_to(per_gpu, (n, pp, len(layer_params))), core)      # (n, pp)
    core_params = np.cumsum(np.sort(layer_params[core]))
    fixed = np.array([c.last_bucket_latency + c.iteration_overhead for c in candidates])           # (n, pp)
    coef = np.array([c.e_coef for c in candidates])
    tails = _held_tails(held, fixed + coef * end_params, coef / tp[:, None], core_params)            # (n, R)
    pipelines = pipeline_floor(np.repeat(np.maximum(steps, 0.0), ranges), np.where(exists, starts, lowest[:, None]).ravel(),
                               np.repeat(np.arange(n), ranges)).reshape(n, ranges)
    pipelines = np.where(exists, np.maximum(pipelines, base[:, None]), np.inf)   # (no range: fewer thresholds)
    return np.where(steps >= 0, (pipelines + tails).min(axis=1), -np.inf)


def _held_tails(held: np.ndarray, const: np.ndarray, coef: np.ndarray, params: np.ndarray) -> np.ndarray:
    """Per row and column, a floor on max_s (const_s + coef_s x P_s) when the stages hold the C
    core layers between them, stage s at most held[., ., s] of them, and P_s >= params[n - 1]
    with n of them (`params`: (C,), ascending): the least E at which
    sum_s min(held_s, #{k: const_s + coef_s params[k - 1] <= E}) reaches C (each stage's count
    rises with E), by bisection (the lower end of the last interval, a hair lower against
    rounding), and at least max_s const_s; inf where the stages cannot hold C. Arrays: held
    (n, R, pp); const, coef (n, pp)."""
    n, ranges, pp = held.shape
    count = len(params)
    low = np.broadcast_to(const.max(axis=1)[:, None], (n, ranges)).copy()
    top = const[:, None, :] + coef[:, None, :] * params[np.clip(held - 1, 0, count - 1)]
    high = np.maximum(np.where(held > 0, top, -np.inf).max(axis=2), low)
    enough = held.sum(axis=2) >= count

    # The values tried are at least max_s const_s, so a stage with coef 0 holds any count there.
    positive = coef > 0
    inverse = (np.where(positive, 1.0 / np.where(positive, coef, 1.0), 0.0))[:, None, :]
    free = np.where(positive, 0.0, np.inf)[:, None, :]
    shift = const[:, None, :]

    def holding(value: np.ndarray) -> np.ndarray:
        """(n, R): sum_s min(held_s, #{k: const_s + coef_s params[k - 1] <= value})."""
        room = (value[:, :, None] - shift) * inverse + free
        return np.minimum(np.searchsorted(params, room, side="right"), held).sum(axis=2)

    done = holding(low) >= count
    for _ in range(BISECTIONS):
        middle = (low + high) / 2
        reach = holding(middle) >= count
        low, high = np.where(reach | done, low, middle), np.where(reach & ~done, middle, high)
    return np.where(enough, low * (1.0 - 1e-12), np.inf)


def _capped_floors(rho: np.ndarray, sends: np.ndarray, work: np.ndarray, caps: np.ndarray,
                   B: np.ndarray) -> np.ndarray:
    """Per row, a lower bound on (B - 1) M + S with each stage's work also capped by memory
    (`caps`, see _stage_caps): M is at least the least bottleneck at which the stages can take
    all the work, sum_s min((M - f_s) / rho_s, cap_s) >= work, and S at least the cheapest fill
    of the work into the caps, fastest stages first; inf where the caps cannot hold the work."""
    n, pp = rho.shape
    need = work * (1.0 - 1e-9)          # rounding must not make the bound overshoot
    fits = caps.sum(axis=1) >= need
    # g(M) = sum_s min((M - f_s)+ / rho_s, cap_s) is piecewise linear and rising, with kinks at
    # M = f_s and M = f_s + rho_s cap_s: find the kink where it first reaches the work and go back
    # along the segment before it.
    kinks = np.sort(np.concatenate([sends, sends + rho * caps], axis=1), axis=1)       # (n, 2 pp)
    with np.errstate(divide="ignore", invalid="ignore"):
        reach = np.minimum(np.maximum(kinks[:, :, None] - sends[:, None, :], 0.0) / rho[:, None, :],
                           caps[:, None, :]).sum(axis=2)                                # (n, 2 pp)
    at = np.minimum(np.argmax(reach >= need[:, None], axis=1), kinks.shape[1] - 1)
    before = np.maximum(at - 1, 0)
    pick = lambda a, i: np.take_along_axis(a, i[:, None], axis=1)[:, 0]                 # noqa: E731
    m0, m1, g0, g1 = pick(kinks, before), pick(kinks, at), pick(reach, before), pick(reach, at)
    with np.errstate(divide="ignore", invalid="ignore"):
        slope = np.where(g1 > g0, (m1 - m0) / (g1 - g0), 0.0)
    lo = np.where((at > 0) & (g0 < need), m0 + (need - g0) * slope, m1) * (1.0 - 1e-12)
    order = np.argsort(rho, axis=1, kind="stable")
    rho_sorted = np.take_along_axis(rho, order, axis=1)
    caps_sorted = np.take_along_axis(caps, order, axis=1)
    before = np.cumsum(caps_sorted, axis=1) - caps_sorted
    placed = np.clip(need[:, None] - before, 0.0, caps_sorted)
    fill = (placed * rho_sorted).sum(axis=1)
    return np.where(fits, (B - 1) * lo + fill, np.inf)


def _layout_floor_terms(candidate: Candidate) -> tuple[tuple[np.ndarray, np.ndarray], float, float]:
    """((cheapest send per boundary per sample of micro-batch, latency left out; that latency),
    all-reduce floor, fastest tensor-parallel link's seconds per byte): they depend on the layout
    alone, so candidates differing only in micro-batch size share them. (Scaling the latency
    with the micro-batch too overstated the floor of a larger micro-batch.)"""
    layout = candidate.layout
    key = ("layout", layout.tp, layout.pp, layout.dp, layout.order)
    cache = candidate.cost.floor_cache
    if key not in cache:
        # the bytes part scales with the micro-batch, the per-message latency does not
        unit_cut, latency = np.zeros(0), np.zeros(0)
        if layout.pp > 1:
            latency = candidate.cut_latency
            unit_cut = (candidate.cheapest_cut - latency) / candidate.mbs
        cache[key] = ((unit_cut, latency), candidate.tail_floor, float(layout.stage_tp_seconds_per_byte.min()))
    return cache[key]


def _exposed_tail_terms(candidate: Candidate) -> tuple[float, float]:
    """(the share of a stage's compute that hides its all-reduce, the all-reduce floor were none
    of it hidden): per layout, as _layout_floor_terms."""
    layout = candidate.layout
    key = ("exposed tail", layout.tp, layout.pp, layout.dp, layout.order)
    cache = candidate.cost.floor_cache
    if key not in cache:
        coef = candidate.e_coef
        full_tail = (float(candidate.param_prefix[-1]) / float(np.sum(1.0 / coef)) if np.all(coef > 0) else 0.0) \
            + float(candidate.last_bucket_latency.min()) + candidate.iteration_overhead
        cache[key] = (float(candidate.hidden_share), full_tail)
    return cache[key]


def _fastest_times(candidate: Candidate, spb: float
                   ) -> tuple[np.ndarray, np.ndarray, float, np.ndarray, np.ndarray, float]:
    """Per layer, the fastest serving GPU's time; per node group, its least slow-down against
    that (0 if it serves no stage); their sum; the times in descending order; per node group, its
    least slow-down over the core layers (those of the most common kind), and the sum of the
    other layers' fastest times. Shared by every
    candidate with the same tp, micro-batch, serving groups and tensor-parallel link (`spb`, the
    fastest one's s/byte)."""
    cost, layout = candidate.cost, candidate.layout
    key = (candidate.tp, candidate.mbs, layout.serving_groups, spb)
    cache = cost.floor_cache
    if key not in cache:
        times = []
        for g in layout.serving_groups:
            times.append(cost.bound_times(g, candidate.tp, candidate.mbs, spb * cost.tp_exposed))
        times = np.array(times)
        fastest = times.min(axis=0)
        busy = fastest > 0
        slowdown = np.zeros(len(cost.gpus))    # per node group; 0 where the group serves no stage
        slowdown[list(layout.serving_groups)] = (times[:, busy] / fastest[busy]).min(axis=1) if busy.any() else 1.0
        if "core layers" not in cache:
            kinds = [layer.kind for layer in cost.model.layers]
            common = max(dict.fromkeys(kinds), key=kinds.count)
            cache["core layers"] = np.array([kind == common for kind in kinds])
        core = cache["core layers"] & busy
        core_slowdown = np.zeros(len(cost.gpus))
        core_slowdown[list(layout.serving_groups)] = (times[:, core] / fastest[core]).min(axis=1) if core.any() else 1.0
        rest = float(fastest[~core].sum()) if core.any() else float(fastest.sum())
        cache[key] = (fastest, slowdown, float(fastest.sum()), np.sort(fastest)[::-1], core_slowdown, rest)
    return cache[key]
