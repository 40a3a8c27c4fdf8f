"""Segment tables: every segment of layers a partition may give a stage, with its cost terms
(g, tau, E) and whether it fits in memory, cut before they are built to the rows and lengths that
can matter (the reasoning is in walk.py's docstring). The DPs over them are dp.py's.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from amp_tui.core.base.lazy import cached_property
from amp_tui.core.costmodel.cost import Candidate
from amp_tui.core.search.partition.dp import INF, SegmentDP, band_limits
from amp_tui.core.search.partition.memory import segment_need, stage_need
from amp_tui.core.search.partition.per_stage import PerStageCandidate

MAX_TABLE_CELLS = 2**22    # larger segment tables are lean: never held whole (SegmentTables.lean)


class SegmentTables(SegmentDP):
    """Every segment a partition may give a stage, one row per (stage s, end j), one column per
    length w + 1: the segment holds layers [j - w - 1, j).

    Stage s can only end at j = s + 1 + r with r in [0, R), R = L - pp + 1 (it needs s layers
    before it and pp - 1 - s after it). With W the longest segment that fits in memory on any stage
    (and below tau_cap), it ends at no layer beyond (s + 1) W (the stages up to it hold at most W
    each) nor before L - (pp - 1 - s) W (the stages after it hold the rest): only the rows
    r in [low[s], high[s]) are kept, stage after stage, as rows offset[s] ... offset[s + 1] of
    (rows, W) arrays. With W near L / pp that is about L W cells, not pp L W.
    """

    def __init__(self, candidate: Candidate):
        c = candidate
        pp, L = c.pp, c.num_layers
        R = L - pp + 1
        self.candidate = c
        self.pp, self.L, self.R = pp, L, R
        self.poll: Callable[[], None] | None = None     # called between the DPs' stages (solve sets it)
        # Segments surely at or above this tau are cut from the tables (solve sets it, see there).
        self.tau_cap = INF
        self._parent: SegmentTables | None = None     # see narrowed
        self._parent_rows: np.ndarray | None = None

    def narrowed(self, tau_cap: float) -> SegmentTables:
        """The same candidate's tables cut at a lower cap. Their segments are a subset of these
        (fewer rows, W no larger), with the same figures: each table these tables have built is
        cut to them instead of being computed again."""
        other = SegmentTables(self.candidate)
        other.poll, other.tau_cap, other._parent = self.poll, tau_cap, self
        return other

    # Built on first use, as the cost tables below: solve can rule a candidate out without them.
    @cached_property
    def feasible(self) -> np.ndarray:
        """Whether each segment fits its stage's memory (segments starting before their stage: no)."""
        self._build()
        return self._feasible

    @property
    def W(self) -> int:
        return self.feasible.shape[1]

    def row(self, stage, r):
        """The table row of stage `stage` ending at layer stage + 1 + r (arrays broadcast), which
        must lie in the stage's band."""
        return self._offset[stage] + r - self._low[stage]

    def _band(self, W: int) -> None:
        """The rows kept with segments of up to W layers (none when W = 0 or pp W < L), and, with
        a cap, only the ends a partition with every tau below it can reach (_reach_limits)."""
        pp = self.pp
        s = np.arange(pp)
        low, high = band_limits(pp, self.L, W)
        if self.tau_cap < INF and W:
            earliest, latest = self._reach_limits()
            low = np.maximum(low, earliest - s - 1)
            high = np.maximum(low, np.minimum(high, latest - s))
        self._low, self._high = low, high
        self._offset = np.concatenate([[0], np.cumsum(high - low)])
        self._stage = np.repeat(s, high - low)                                  # per row: its stage,
        self._r = np.arange(self._offset[-1]) - self._offset[self._stage] + low[self._stage]
        self._ends = self._stage + 1 + self._r                                  # its end j
        self._band_rows = (self._offset.tolist(), low.tolist())

    def _reach_limits(self) -> tuple[np.ndarray, np.ndarray]:
        """Per stage, the earliest and the latest layer it can end after in a partition whose
        every stage has tau below tau_cap. Such a stage's compute is at most the cap less the
        overhead and its cheapest sends (as in _bottleneck_exceeds), so it holds the fewer layers
        the later it starts: the stages before s, each taking the most it may from where the last
        one ended, end no earlier than any such partition's (if they end later, stage s's room
        reaches further too), and stage s ends no later than the greedy walk's; likewise from
        the last layer backwards. O(pp log L): on a mixed cluster a slow stage's band is narrow
        (2x8x64 of bench-1024-gpus-1000-layers: 1.34 M cells cut at the cap on the longest
        segment of any stage, 0.26 M with these bands and a balanced partition's cap)."""
        c, pp, L = self.candidate, self.pp, self.L
        prefix = c.time_prefix
        room = (self.tau_cap * (1 + 1e-9) - c.micro_batch_overhead - cheapest_sends(c)).tolist()
        latest, earliest = np.empty(pp, dtype=np.int64), np.empty(pp, dtype=np.int64)
        if min(room) < 0:               # some stage is over the cap whatever it holds: no band
            return np.full(pp, L), np.zeros(pp, dtype=np.int64)
        j = 0
        for s in range(pp):             # forward: the furthest each stage can reach
            j = min(int(np.searchsorted(prefix[s], prefix[s][j] + room[s], side="right")) - 1, L - (pp - 1 - s))
            latest[s] = j
        j = earliest[pp - 1] = L
        for s in range(pp - 1, 0, -1):  # backward: where stage s can start at the earliest
            j = max(int(np.searchsorted(prefix[s], prefix[s][j] - room[s], side="left")), s)
            earliest[s - 1] = j
        return earliest, latest

    @cached_property
    def cells(self) -> int:
        """The tables' size (rows x W), known before they are built."""
        # No segment longer than the cap allows is needed (tau_cap), nor built.
        parent = self._parent
        self._fitting = parent._fitting if parent is not None else self._longest_fitting()
        W = min(self.R, self._longest_below(self.tau_cap), self._fitting)
        self._band(W)
        self._W = W
        if parent is not None and W <= parent._W:     # each row's row in the parent's tables
            stage = self._stage
            if np.all((self._r >= parent._low[stage]) & (self._r < parent._high[stage])):
                self._parent_rows = parent._offset[stage] + self._r - parent._low[stage]
        return int(self._offset[-1]) * W

    def _inherited(self, name: str) -> np.ndarray | None:
        """The parent's table `name` cut to these rows and W, if these lie within it and it
        was built; else None."""
        self.cells
        if self._parent_rows is None or name not in self._parent.__dict__:
            return None
        return self._parent.__dict__[name][self._parent_rows, :self._W]

    def _build(self) -> None:
        self.cells
        W = self._W
        if W == 0 or W * self.pp < self.L:
            self._feasible = np.zeros((0, W), dtype=bool)
            return
        if self.poll is not None:
            self.poll()
        # (a segment's fit does not depend on W: the shortest ones fit, however many are kept)
        inherited = self._inherited("_feasible")
        self._feasible = inherited if inherited is not None else self._rows_feasible(slice(None), W)

    @property
    def lean(self) -> bool:
        """Tables of more than MAX_TABLE_CELLS cells are never held whole: each DP computes each
        stage's rows when it reaches them, a chunk at a time, and drops them (slower, as every DP
        builds them again, but memory stays O(MAX_TABLE_CELLS) whatever the depth or the bound)."""
        return self.cells > MAX_TABLE_CELLS

    @property
    def empty(self) -> bool:
        """Whether the tables hold no segment that fits (lean tables: whether they hold none)."""
        return self.cells == 0 or (not self.lean and not self.feasible.any())

    def _rows_feasible(self, rows: slice, W: int) -> np.ndarray:
        """Whether each segment of up to W layers of these rows fits its stage's memory. Segments
        with r < w would start before layer s: marked infeasible, so that masks derived from
        `feasible` tell the longest segment in play (longest_allowed); _dp never reads them."""
        return np.arange(W) < self._fitting_lengths(rows, np.minimum(self._r[rows] + 1, W))[:, None]

    def _fitting_lengths(self, rows: slice, most: np.ndarray) -> np.ndarray:
        """Per row, how many of its segments fit its stage's memory, of the `most` shortest: a
        segment needs more memory the more layers it holds (weights, activations and the
        transient peak only grow), so the segments that fit are the shortest ones; a binary
        search per row, all rows at once, each step one segment per row (in the arithmetic of
        _SegmentMemory.need, the transient peak from its sparse table)."""
        c = self.candidate
        ends, stage = self._ends[rows], self._stage[rows]
        capacity = c.layout.stage_capacity[stage]
        low, high = np.zeros(len(ends), dtype=np.int64), most        # low fit, more than high do not
        probe = True                    # first try the longest: when memory binds nowhere, done
        while True:
            open_ = low < high
            if not open_.any():
                return low
            w = np.where(open_, high if probe else (low + high + 1) // 2, 1)
            probe = False
            fits = stage_need(c, stage, ends - w, ends) <= capacity
            low = np.where(open_ & fits, w, low)
            high = np.where(open_ & ~fits, w - 1, high)

    def _longest_fitting(self) -> int:
        """The most layers a segment may hold and fit on the roomiest stage with the fewest
        micro-batches in flight, as `fits_somewhere` in _build judges it, without its (L + 1, R)
        grid: a segment's memory grows with its length, so if w layers fit somewhere, w - 1 do;
        a binary search over w, each step checking every segment of w layers (the transient peak
        from its sparse table). Kept per (tp, pp, dp, micro-batch, roomiest stage): node orders
        share it."""
        c = self.candidate
        room, fewest = c.layout.stage_capacity.max(), c.memory_arrays[2].min()
        if isinstance(c, PerStageCandidate):         # (no cache shared with other candidates)
            return self._longest_fitting_search(room, fewest)
        key = ("longest fitting", c.tp, c.pp, c.dp, c.mbs, float(room))
        cache = c.cost.floor_cache
        if key not in cache:
            cache[key] = self._longest_fitting_search(room, fewest)
        return cache[key]

    def _longest_fitting_search(self, room: float, fewest: float) -> int:
        c, L = self.candidate, self.L

        def fits(w: int) -> bool:
            start = np.arange(L - w + 1)
            if isinstance(c, PerStageCandidate):     # on some stage, with its own memory
                stage = np.arange(self.pp)[:, None]
                return bool(np.any(c.segment_need(stage, start, start + w) <= c.layout.stage_capacity[:, None]))
            return bool(np.any(segment_need(c, start, start + w, fewest) <= room))

        low, high = 0, self.R              # low layers fit (0: trivially), high + 1 do not
        if fits(high):
            return high
        while low < high:
            w = (low + high + 1) // 2
            if fits(w):
                low = w
            else:
                high = w - 1
        return low

    def _longest_below(self, cap: float) -> int:
        """The most layers a segment may hold with tau below `cap` on some stage: tau is at least
        the segment's compute plus the overhead per micro-batch, and compute grows with the
        segment (prefix sums of times >= 0), so per start a binary search finds the last end
        below the cap. With a cap near the optimum's bottleneck the tables shrink from
        (pp, R, W) to about (pp, R, L / pp): O(L^2) whatever the depth."""
        if cap == INF:
            return self.L
        c = self.candidate
        room = cap * (1 + 1e-9) - c.micro_batch_overhead      # margin against rounding
        if room <= 0:
            return 0
        starts = np.arange(self.L + 1)
        longest = 0
        for first in _hardware_kinds(c.stage_hardware).values():
            prefix = c.time_prefix[first]
            ends = np.searchsorted(prefix, prefix + room, side="left") - 1    # prefix[end] < prefix[a] + room
            longest = max(longest, int((ends - starts).max()))
        return longest

    # Each table is computed by rows: all of them at once, built on first use (a candidate whose
    # first bound loses needs only tau), or, for lean tables, a chunk of rows in each DP.
    def _starts(self, rows: slice, W: int) -> tuple[np.ndarray, np.ndarray]:
        """Per row and length up to W, the segment's first layer (0 where there is none), and
        whether there is one."""
        start = self._ends[rows, None] - 1 - np.arange(W)
        return np.maximum(start, 0), start >= 0

    def _rows_compute(self, rows: slice, start: np.ndarray) -> np.ndarray:
        """Segment compute time, from the prefix sums of each distinct stage hardware's times."""
        c = self.candidate
        prefix, hardware = c.time_prefix, c.stage_hardware
        kinds = _hardware_kinds(hardware)
        ends = self._ends[rows]
        if len(kinds) == 1:
            return prefix[0][ends][:, None] - prefix[0][start]
        stage = self._stage[rows]
        compute = np.empty(start.shape)
        for kind, first in kinds.items():
            if self.poll is not None:
                self.poll()
            mine = np.array([k == kind for k in hardware])[stage]
            compute[mine] = prefix[first][ends[mine]][:, None] - prefix[first][start[mine]]
        return compute

    def _rows_busy(self, rows: slice, compute: np.ndarray) -> np.ndarray:
        """Per segment, compute + the send after it + the engine's fixed cost per micro-batch."""
        c, pp = self.candidate, self.pp
        overhead = c.micro_batch_overhead
        if pp == 1:
            return compute + overhead
        stage, ends = self._stage[rows], self._ends[rows]
        extra = np.full(len(stage), overhead)         # the last stage sends nothing after it
        inner = stage < pp - 1
        stage = stage[inner]
        extra[inner] = c.cut_cost(stage, ends[inner]) + overhead
        return compute + extra[:, None]

    def _rows_g(self, busy: np.ndarray) -> np.ndarray:
        """Per segment, its share of the fill and drain: with v interleaved chunks per rank they
        shrink v-fold (see cost.Candidate._terms)."""
        if self.candidate.knobs.virtual_stages > 1:
            return busy / self.candidate.knobs.virtual_stages
        return busy

    def _rows_tau(self, rows: slice, busy: np.ndarray, start: np.ndarray, valid: np.ndarray) -> np.ndarray:
        """Per segment, its busy time per micro-batch: g (before interleaving) + the send before it."""
        c = self.candidate
        if self.pp == 1:
            return busy
        stage = self._stage[rows]
        first = int(np.count_nonzero(stage == 0))       # rows of stage 0 come first, and receive nothing
        before = stage[first:] - 1                      # the boundary before each other row
        # (a segment that does not exist, starting before layer 0, is masked out: its send is moot)
        received = c.cut_cost(before[:, None], np.where(valid[first:], start[first:], 1))
        tau = np.empty(busy.shape)
        tau[:first] = busy[:first]
        np.add(busy[first:], received, out=tau[first:])
        return tau

    def _rows_e(self, rows: slice, compute: np.ndarray, start: np.ndarray) -> np.ndarray:
        """Per segment, the tail E after the last micro-batch: the exposed all-reduce and the
        optimizer step, with the iteration's fixed cost."""
        c, stage = self.candidate, self._stage[rows]
        prefix = c.param_prefix
        if prefix.ndim == 2:        # per-stage degrees (per_stage.py): each stage's GPUs hold their share
            segment_params = prefix[stage, self._ends[rows]][:, None] - prefix[stage[:, None], start]
        else:
            segment_params = prefix[self._ends[rows]][:, None] - prefix[start]
        if c.hidden_share:      # the backward pass hides part of the all-reduce (cost.Candidate)
            last = c.last_bucket_latency[stage][:, None]
            allreduce = c.dp_coef[stage][:, None] * segment_params + last
            if self.poll is not None:
                self.poll()
            e = c.exposed_allreduce(allreduce, compute, last)
            if self.poll is not None:
                self.poll()
            e += c.opt_coef[stage][:, None] * segment_params
            e += c.iteration_overhead
            return e
        e = c.e_coef[stage][:, None] * segment_params
        e += c.e_const[stage][:, None]
        return e

    @cached_property
    def _start_valid(self) -> tuple[np.ndarray, np.ndarray]:
        self.feasible
        return self._starts(slice(None), self.W)

    @cached_property
    def _compute(self) -> np.ndarray:
        return self._rows_compute(slice(None), self._start_valid[0])

    @cached_property
    def _busy(self) -> np.ndarray:
        return self._rows_busy(slice(None), self._compute)

    @cached_property
    def g(self) -> np.ndarray:
        inherited = self._inherited("g")
        return inherited if inherited is not None else self._rows_g(self._busy)

    @cached_property
    def tau(self) -> np.ndarray:
        inherited = self._inherited("tau")
        return inherited if inherited is not None else self._rows_tau(slice(None), self._busy, *self._start_valid)

    @cached_property
    def e(self) -> np.ndarray:
        inherited = self._inherited("e")
        return inherited if inherited is not None else self._rows_e(slice(None), self._compute, self._start_valid[0])

    def _block(self, rows: slice, W: int, cost: str, e_limit: float, t_limit: float) -> np.ndarray:
        """Lean tables: `cost` ("g", "tau" or "e") of these rows' segments of up to W layers,
        INF where a segment does not fit or reaches a limit, computed afresh."""
        start, valid = self._starts(rows, W)
        compute = self._rows_compute(rows, start)
        busy = self._rows_busy(rows, compute)
        tables = {"g": lambda: self._rows_g(busy), "tau": lambda: self._rows_tau(rows, busy, start, valid),
                  "e": lambda: self._rows_e(rows, compute, start)}
        allowed = self._rows_feasible(rows, W)
        if e_limit < INF:
            allowed &= tables["e"]() < e_limit
        if t_limit < INF:
            allowed &= tables["tau"]() < t_limit
        return np.where(allowed, tables[cost](), INF)


def _hardware_kinds(hardware: list[tuple]) -> dict[tuple, int]:
    """Each distinct stage hardware (Candidate.stage_hardware) and the first stage with it."""
    return {kind: s for s, kind in reversed(list(enumerate(hardware)))}


def cheapest_sends(candidate: Candidate) -> np.ndarray:
    """Per stage, the least time its sends can take per micro-batch: its boundaries at their
    cheapest cuts."""
    pp = candidate.pp
    sends = np.zeros(pp)
    if pp > 1:
        sends[:-1] += candidate.cheapest_cut
        sends[1:] += candidate.cheapest_cut
    return sends
