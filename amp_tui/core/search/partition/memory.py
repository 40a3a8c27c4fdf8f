"""The memory a stage needs for a segment of layers, and whether any partition of a candidate fits.

A segment needs more memory the more layers it holds (weights, gradients and optimizer state,
the activations of the micro-batches in flight and the transient peak only grow): the segment
tables (tables.py) binary-search each row's fitting lengths with `segment_need`, and the search
asks `partitions_fit` of the candidates its bound ruled out, all at once, without any table.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from amp_tui.core.base.errors import Cancelled
from amp_tui.core.costmodel.cost import Candidate
from amp_tui.core.search.partition.per_stage import PerStageCandidate
from amp_tui.core.spec.strategy import even_partition

PROBES = 8                 # segment lengths tried at once per row in _greedy_fits


EVEN_SPLIT_CHUNK = 256     # candidates whose even splits are sized at once, between cancellation polls


@functools.lru_cache(maxsize=8)
def _floor_log2(L: int) -> np.ndarray:
    """floor(log2(n)) for n in [0, L] (0 for 0), by table; exact (log2 of an integer is exact
    at powers of two)."""
    table = np.concatenate([[0], np.log2(np.arange(1, L + 1)).astype(np.int64)])
    table.flags.writeable = False
    return table


def partitions_fit(candidates: list[Candidate], should_cancel: Callable[[], bool] | None = None) -> np.ndarray:
    """For each candidate (of one scenario), whether some partition fits every stage in memory,
    judged as the segment tables judge it but without building them: what the search asks of the
    candidates its bound ruled out, all at once.

    Candidates whose even split fits are settled first, then most of the rest by a greedy walk
    (_greedy_fits), and the few it leaves open exactly (_reachable_fits)."""
    fits = np.zeros(len(candidates), dtype=bool)
    if not candidates:
        return fits
    if isinstance(candidates[0], PerStageCandidate):     # (one at a time: the post-pass asks for few)
        return np.array([c.some_partition_fits() for c in candidates])
    cancel = should_cancel or (lambda: False)
    need, capacity = even_split_memory(candidates, cancel)
    fits[:] = np.all(need <= capacity, axis=1)
    todo = sorted(np.flatnonzero(~fits).tolist(), key=lambda i: -candidates[i].pp)
    if not todo:
        return fits
    if cancel():
        raise Cancelled
    settled, greedy = _greedy_fits(_SegmentMemory([candidates[i] for i in todo]), cancel)
    fits[todo] = greedy
    open_ = [i for i, done in zip(todo, settled) if not done]
    if open_:
        fits[open_] = _reachable_fits(_SegmentMemory([candidates[i] for i in open_]), cancel)
    return fits


def _greedy_fits(memory: _SegmentMemory, cancel: Callable[[], bool]) -> tuple[np.ndarray, np.ndarray]:
    """(settled, fits) per row (rows deepest first): whether a greedy walk settles whether some
    partition fits, and if so whether one does. O(pp log L) per row, the rows side by side.

    A segment needs more memory the more layers it holds, so the walk gives each stage in turn
    the most layers that fit it from where the stage before ended (leaving a layer for each stage
    after it). If every stage gets at least one layer and the last ends at layer L, that is a
    partition that fits. If some stage s cannot hold even the one layer where it starts, the walk
    goes on with stage s empty, and its ends u_s bound every fitting partition's ends e_s from
    above: if e_{s-1} <= u_{s-1} and e_s > u_{s-1}, stage s of that partition holds layers
    [e_{s-1}, e_s), which contain [u_{s-1}, e_s): so layer u_{s-1} fits alone (else u_s =
    u_{s-1} >= e_s) and the walk reaches e_s or beyond. Hence u_s < s + 1 (stage s cannot end
    that early) or u_{pp-1} < L means that no partition fits. Left open: walks that reach layer L
    with some stage left empty."""
    L, total = memory.L, len(memory.pp)
    rows = np.arange(total)                     # the original row of each row still walking
    pos = np.zeros(total, dtype=np.int64)       # where the last stage placed ended
    strict = np.ones(total, dtype=bool)         # no stage left empty so far
    length = -(-L // memory.pp)                  # the last stage's length, first the even split's
    done_pos, done_strict = pos.copy(), strict.copy()
    for s in range(int(memory.pp[0]) if total else 0):
        if cancel():
            raise Cancelled
        n = int(np.count_nonzero(memory.pp > s))    # rows still placing stages
        if n == 0:
            break
        start, room = pos[:n, None], memory.capacity[:n, s:s + 1]
        most = L - memory.pp[:n] + 1 + s - pos[:n]      # it leaves a layer for each stage after it
        # The lengths that fit are 1 ... f (none: f = 0), f in [fit, most]: PROBES lengths per
        # row at once, first around the length of the stage before (or the even split's), then
        # spread evenly over what is left open, which shrinks PROBES + 1-fold each time.
        fit, most = np.zeros(n, dtype=np.int64), most.copy()
        lengths = np.clip(length[:n, None] - PROBES // 2 + 1 + np.arange(PROBES), 1, most[:, None])
        gap = most
        while True:
            ok = memory.need(n, s, start, start + lengths) <= room
            open_ = gap > 0         # (rows already settled probe lengths in [1, most] too, unheeded)
            fit = np.where(open_, np.maximum(fit, np.where(ok, lengths, 0).max(axis=1)), fit)
            most = np.where(open_, np.minimum(most, np.where(ok, most[:, None], lengths - 1).min(axis=1)), most)
            gap = most - fit
            if not gap.any():
                break
            lengths = np.maximum(np.minimum(fit[:, None] + 1 + (gap[:, None] * np.arange(PROBES)) // PROBES,
                                            most[:, None]), 1)
        strict[:n] &= fit > 0
        length[:n] = np.maximum(fit, 1)
        low = pos[:n] + fit
        pos[:n] = low
        stuck = np.concatenate([low <= s, np.zeros(len(rows) - n, dtype=bool)])
        if stuck.any():                         # no partition fits these: settled
            done_pos[rows[stuck]], done_strict[rows[stuck]] = -1, False
            keep = ~stuck
            memory.keep(keep)
            rows, pos, strict, length = rows[keep], pos[keep], strict[keep], length[keep]
    done_pos[rows], done_strict[rows] = pos, strict
    settled = (done_pos < L) | done_strict
    return settled, (done_pos == L) & done_strict


def _reachable_fits(memory: _SegmentMemory, cancel: Callable[[], bool]) -> np.ndarray:
    """Per row (rows deepest first), whether some partition fits, exactly: a segment needs more
    memory the more layers it holds, so of the ends the stages before can reach, the latest one
    before layer j is the best start for a stage ending at j. Stage by stage that gives every
    reachable end; the rows advance together, and those left with no reachable end drop out.
    O(pp L) per row."""
    rows = np.arange(len(memory.pp))            # the original row of each row still walking
    fits = np.zeros(len(rows), dtype=bool)
    L = memory.L
    ends = np.arange(L + 1)
    reach = np.broadcast_to(ends == 0, (len(rows), L + 1)).copy()
    for s in range(int(memory.pp[0])):
        if cancel():
            raise Cancelled
        n = int(np.count_nonzero(memory.pp > s))    # rows still placing stages
        if n == 0:
            break
        # Stage s ends after layer s at the earliest and leaves a layer for each stage after it.
        window = slice(s + 1, L - int(memory.pp[n - 1]) + s + 2)
        latest = np.maximum.accumulate(np.where(reach[:n, :window.stop - 1], ends[:window.stop - 1], -1), axis=1)
        start = latest[:, s:]                   # the latest reachable start before each end
        ok = start >= 0
        need = memory.need(n, s, np.where(ok, start, 0), window)
        last_end = (L - memory.pp[:n] + 1 + s)[:, None]
        reach[:n] = False
        reach[:n, window] = ok & (need <= memory.capacity[:n, s:s + 1]) & (ends[window] <= last_end)
        stuck = ~reach[:n].any(axis=1)
        if 4 * np.count_nonzero(stuck) > n:     # drop rows that cannot fit once they are many
            keep = np.concatenate([~stuck, np.ones(len(rows) - n, dtype=bool)])
            memory.keep(keep)
            reach, rows = reach[keep], rows[keep]
    fits[rows] = reach[:, L]
    return fits


class _SegmentMemory:
    """Memory of segments for many candidates at once, a row each, in SegmentTables' arithmetic.

    Per (tp, micro-batch) of the rows, the activation prefix sums and the transient peak's sparse
    table, flattened so that levels[u, k * L + i] = max(peak[i:i + 2**k]); per row which of them
    (kind), its parameter prefix sums, and per stage its capacity and micro-batches in flight
    (stages beyond a row's pp: infinite room)."""

    def __init__(self, candidates: list[Candidate]):
        self.L = L = candidates[0].num_layers
        self.pp = np.array([c.pp for c in candidates])
        shared: dict[tuple, int] = {}
        layers = []
        for c in candidates:
            if (c.tp, c.mbs) not in shared:
                shared[c.tp, c.mbs] = len(layers)
                layers.append((c.memory_arrays[0], _peak_levels(c)))
        self.kind = np.array([shared[c.tp, c.mbs] for c in candidates])
        self.acts, self.levels = (np.array(column) for column in zip(*layers))
        self.state = np.array([c.state_prefix for c in candidates])     # held through the iteration
        self.step = np.array([c.step_prefix for c in candidates])       # the optimizer step's copies
        self.capacity = np.full((len(candidates), int(self.pp.max())), np.inf)
        self.in_flight = np.zeros(self.capacity.shape)
        self.reserve = np.zeros(self.capacity.shape)                    # held whatever the layers
        self.step_fixed = np.zeros(self.capacity.shape)
        for i, c in enumerate(candidates):
            self.capacity[i, :c.pp] = c.layout.stage_capacity
            self.in_flight[i, :c.pp] = c.memory_arrays[2]
            self.reserve[i, :c.pp] = c.stage_reserve
            self.step_fixed[i, :c.pp] = c.step_fixed
        self.floor_log2 = _floor_log2(L)

    def keep(self, rows: np.ndarray) -> None:
        """Keep only these rows (a mask or indices), in their order."""
        for name in ("pp", "kind", "state", "step", "capacity", "in_flight", "reserve", "step_fixed"):
            setattr(self, name, getattr(self, name)[rows])

    def need(self, n: int, stage: int | None, start: np.ndarray, end: np.ndarray | slice) -> np.ndarray:
        """Bytes per GPU of segments [start, end) of the first n rows (end a slice: those ends
        in turn), on `stage` (None: column s is on stage s); entries with end <= start are
        meaningless."""
        L = self.L
        row, kind = np.arange(n)[:, None], self.kind[:n, None]
        if isinstance(end, slice):
            end = np.arange(L + 1)[end][None, :]
            state_end, step_end = self.state[:n, end[0]], self.step[:n, end[0]]
            end = np.broadcast_to(end, state_end.shape)
        else:
            state_end, step_end = self.state[row, end], self.step[row, end]
        k = self.floor_log2[np.maximum(end - start, 0)]
        at = kind * self.levels.shape[1] + k * L                   # the row's level k, flattened
        levels = self.levels.ravel()
        seg_peak = np.maximum(levels[at + np.minimum(start, L - 1)], levels[at + np.maximum(end - (1 << k), 0)])
        state = state_end - self.state[row, start]
        acts = self.acts[kind, end] - self.acts[kind, start]
        on = slice(None) if stage is None else slice(stage, stage + 1)
        in_flight, reserve, fixed = self.in_flight[:n, on], self.reserve[:n, on], self.step_fixed[:n, on]
        step = step_end - self.step[row, start] + fixed
        return state + reserve + np.maximum(seg_peak + in_flight * acts, step)


def even_split_memory(candidates: list[Candidate], cancel: Callable[[], bool] | None = None
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Bytes per GPU of every stage of each candidate's even split, and the stages' capacities, as
    (candidates, deepest pp) arrays; a stage beyond a candidate's pp has infinite capacity (and
    needs nothing). `cancel` is polled between chunks of EVEN_SPLIT_CHUNK candidates: a thousand
    candidates of 1,000 layers take tens of milliseconds."""
    if len(candidates) > EVEN_SPLIT_CHUNK:
        parts = []
        for start in range(0, len(candidates), EVEN_SPLIT_CHUNK):
            if cancel is not None and cancel():
                raise Cancelled
            parts.append(even_split_memory(candidates[start:start + EVEN_SPLIT_CHUNK]))
        width = max(need.shape[1] for need, _ in parts)
        return tuple(np.concatenate([np.pad(part[i], ((0, 0), (0, width - part[i].shape[1])), constant_values=fill)
                                     for part in parts]) for i, fill in ((0, 0.0), (1, np.inf)))
    memory = _SegmentMemory(candidates)
    n, stages = memory.capacity.shape
    bounds = np.full((n, stages + 1), memory.L)
    for depth in np.unique(memory.pp):
        bounds[memory.pp == depth, :depth + 1] = np.cumsum([0, *even_partition(memory.L, int(depth))])
    need = memory.need(n, None, bounds[:, :-1], bounds[:, 1:])
    need[np.arange(stages)[None, :] >= memory.pp[:, None]] = 0.0     # (empty segments, beyond pp)
    return need, memory.capacity


def segment_need(c: Candidate, start: np.ndarray, end: np.ndarray, in_flight, stage=None) -> np.ndarray:
    """Memory of the segments [start, end) (end > start, arrays broadcast) of one candidate with
    `in_flight` micro-batches of activations on `stage` (None: the least any stage holds
    whatever its layers), in SegmentTables' arithmetic: what is held through the iteration, the
    larger of backward's peak (activations, the transient peak from its sparse table) and the
    optimizer step's, and what the stage holds whatever its layers (Candidate.memory_need)."""
    L = c.num_layers
    act_prefix = c.memory_arrays[0]
    levels = _peak_levels(c).reshape(-1, L)
    k = _floor_log2(L)[end - start]
    seg_peak = np.maximum(levels[k, start], levels[k, end - (1 << k)])
    reserve = c.stage_reserve.min() if stage is None else c.stage_reserve[stage]
    fixed = c.step_fixed.min() if stage is None else c.step_fixed[stage]
    backward = seg_peak + in_flight * (act_prefix[end] - act_prefix[start])
    step = c.step_prefix[end] - c.step_prefix[start] + fixed
    return c.state_prefix[end] - c.state_prefix[start] + reserve + np.maximum(backward, step)


def stage_need(c: Candidate | PerStageCandidate, stage: np.ndarray, start: np.ndarray, end: np.ndarray
               ) -> np.ndarray:
    """Memory of the segments [start, end) on stages `stage` (arrays broadcast): segment_need
    with each stage's micro-batches in flight, or a per-stage strategy's own (per_stage.py)."""
    if isinstance(c, PerStageCandidate):
        return c.segment_need(stage, start, end)
    return segment_need(c, start, end, c.memory_arrays[2][stage], stage)


def partition_fits(c: Candidate | PerStageCandidate, partition: tuple[int, ...]) -> bool:
    """Whether every stage of a partition fits its memory, in SegmentTables' arithmetic."""
    ends = np.cumsum(partition)
    need = stage_need(c, np.arange(len(partition)), ends - np.array(partition), ends)
    return bool(np.all(need <= c.layout.stage_capacity))


def _peak_levels(c: Candidate) -> np.ndarray:
    """A sparse table of the per-layer transient peak, levels[k][i] = max(peak[i:i + 2**k]), one
    per (tp, micro-batch) of the scenario."""
    key = ("peak levels", c.tp, c.mbs)
    cache = c.cost.floor_cache
    if key not in cache:
        _, peak, _ = c.memory_arrays
        rows = [peak]
        while 2 << (len(rows) - 1) <= len(peak):
            half, prev = 1 << (len(rows) - 1), rows[-1]
            rows.append(np.concatenate([np.maximum(prev[:-half], prev[half:]), np.zeros(half)]))
        cache[key] = np.array(rows).ravel()
    return cache[key]
