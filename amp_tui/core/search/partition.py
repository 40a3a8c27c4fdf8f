"""The exact optimal partition of layers into pipeline stages for one candidate.

The objective (cost.py) is  J = (B - 1) max_s tau_s + sum_s g_s + max_s E_s  with per-stage memory
limits, where g_s = C_s + c_s (compute plus the send after the stage). Two max-terms and a sum
rule out a plain dynamic program, so we walk Pareto frontiers, each step a vectorised DP:

  outer walk over the largest E: with every stage's E below a limit e, find the partition S that
  minimises (B - 1) max tau + sum g (inner walk). Any partition whose max E lies in [E(S), e)
  costs at least J(S), so the next limit is E(S). Stop when no partition is left or when
  (the inner value) + min-max-E cannot beat the best J found.

  inner walk over the bottleneck tau: minimise sum g with every stage's tau below a limit t; the
  result S has sum g = sigma and max tau = T; partitions with max tau in [T, t) cost at least
  (B - 1) T + sigma, so the next limit is T. Stop when (B - 1) min-max-tau + sigma cannot beat
  the best. (E has few distinct values when layers repeat, tau many: walking E outside takes
  fewer DPs than the other way round, e.g. 95 against 116 in paper-het-cluster.)

  Both walks prune with bounds on what is left, not only the global t* = min max tau and
  e* = min max E: each E limit starts from t_low, the least max tau with every E below it, and
  the tau walk keeps x_low, the least max E with every tau and E below the limits (one minmax DP
  each). With uneven layers the Pareto frontier is long and the global bounds stop nothing until
  the walk reaches t*: 1,000 uneven layers on mixed GPUs took 1,681 DPs for one candidate, 52 now.

Every step removes only partitions proven no better than one already found, so the result is exact;
tests/core/test_core_partition.py checks it against brute force over all partitions.

The DPs read segment tables (SegmentTables), cut to what can matter before they are built:
  - length: a partition with max tau >= (J - sum-g floor - max-E floor) / (B - 1) costs at least J,
    so with J the bound to beat (or the even split's time) no segment whose compute alone reaches
    that tau is needed; as compute grows with the segment, that caps its length W, near L / pp
    for a balanced optimum instead of all that fits in memory;
  - rows: with segments of at most W layers, stage s ends within [L - (pp - 1 - s) W, (s + 1) W],
    so only those ends get a row; with every stage's tau below the cap, greedy walks over the
    prefix sums from both ends narrow that per stage (SegmentTables._reach_limits: a slow stage
    of a mixed cluster gets a narrow band); each DP narrows it again to its own longest segment;
  - the cap: the bound, or else the time of the even split or of a partition balanced by compute
    when one fits, and once the walk's first partitions are known, their time if that cuts the
    tables to half or less.
Together about L W cells per table instead of pp L^2 (1,000 uneven layers on 4 stages, 2x4x128 of
bench-1024-gpus-1000-layers: 2.0 M cells cut at what fits in memory, 1.0 M banded, 0.43 M with
the tau cap of tp 4). Memory feasibility needs no table either: a segment needs more memory the
more layers it holds, so each row's fitting lengths are found by binary search. Tables of more
than MAX_TABLE_CELLS cells (with one micro-batch no bottleneck cap applies) are lean: never held
whole, each DP computes a chunk of rows at a time and drops it, so memory is bounded for every
pipeline depth, and the search leaves none out.

With one or two stages there are at most L - 1 partitions, so they are all evaluated at once instead.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from amp_tui.core.costmodel.cost import Candidate
from amp_tui.core.base.errors import Cancelled
from amp_tui.core.base.lazy import cached_property
from amp_tui.core.spec.strategy import even_partition

INF = float("inf")
PROBES = 8                 # segment lengths tried at once per row in _greedy_fits
CAP_MIN_CELLS = 2**16      # smaller tables cost less than the even split's time, to cap them with
MAX_TABLE_CELLS = 2**22    # larger segment tables are lean: never held whole (SegmentTables.lean)
LEAN_CHUNK_CELLS = 2**18   # cells of lean tables computed at once
SMALL_TABLE_CELLS = 2**16  # whole tables up to this many cells are masked in one pass
EVEN_SPLIT_CHUNK = 256     # candidates whose even splits are sized at once, between cancellation polls
REBUILD_SHARE = 0.5        # solve cuts its tables again at its first partitions' time if they shrink this much


@dataclass(frozen=True)
class PartitionResult:
    partition: tuple[int, ...] | None      # layers per stage; None when nothing fits or beats the bound
    iteration_time_s: float                 # the objective J (inf when partition is None)
    solves: int                             # DPs asked for (see _answer; 1 for a one- or two-stage enumeration)
    fits: bool = True                       # False: no partition fits in memory


class SegmentTables:
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
        low, high = _band_limits(pp, self.L, W)
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
        room = (self.tau_cap * (1 + 1e-9) - c.micro_batch_overhead - _cheapest_sends(c)).tolist()
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
        `feasible` tell the longest segment in play (_longest); _dp never reads them."""
        return np.arange(W) < self._fitting_lengths(rows, np.minimum(self._r[rows] + 1, W))[:, None]

    def _fitting_lengths(self, rows: slice, most: np.ndarray) -> np.ndarray:
        """Per row, how many of its segments fit its stage's memory, of the `most` shortest: a
        segment needs more memory the more layers it holds (weights, activations and the
        transient peak only grow), so the segments that fit are the shortest ones; a binary
        search per row, all rows at once, each step one segment per row (in the arithmetic of
        _SegmentMemory.need, the transient peak from its sparse table)."""
        c = self.candidate
        ends, stage = self._ends[rows], self._stage[rows]
        capacity, in_flight = c.layout.stage_capacity[stage], c.memory_arrays[2][stage]
        low, high = np.zeros(len(ends), dtype=np.int64), most        # low fit, more than high do not
        probe = True                    # first try the longest: when memory binds nowhere, done
        while True:
            open_ = low < high
            if not open_.any():
                return low
            w = np.where(open_, high if probe else (low + high + 1) // 2, 1)
            probe = False
            fits = _segment_need(c, ends - w, ends, in_flight) <= capacity
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
        key = ("longest fitting", c.tp, c.pp, c.dp, c.mbs, float(room))
        cache = c.cost.floor_cache
        if key not in cache:
            cache[key] = self._longest_fitting_search(room, fewest)
        return cache[key]

    def _longest_fitting_search(self, room: float, fewest: float) -> int:
        c, L = self.candidate, self.L

        def fits(w: int) -> bool:
            start = np.arange(L - w + 1)
            return bool(np.any(_segment_need(c, start, start + w, fewest) <= room))

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
        extra[inner] = (c.cut_unit[ends[inner]] * c.layout.boundary_seconds_per_byte[stage]
                        + c.cut_latency[stage] + overhead)
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
        received = np.where(valid[first:], c.cut_unit[start[first:]], 0.0)
        tau = np.empty(busy.shape)
        tau[:first] = busy[:first]
        np.add(busy[first:], received * c.layout.boundary_seconds_per_byte[before][:, None]
               + c.cut_latency[before][:, None], out=tau[first:])
        return tau

    def _rows_e(self, rows: slice, compute: np.ndarray, start: np.ndarray) -> np.ndarray:
        """Per segment, the tail E after the last micro-batch: the exposed all-reduce and the
        optimizer step, with the iteration's fixed cost."""
        c, stage = self.candidate, self._stage[rows]
        segment_params = c.param_prefix[self._ends[rows]][:, None] - c.param_prefix[start]
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

    def _e_allowed(self, e_limit: float) -> tuple[np.ndarray, int]:
        """Whole tables: the segments that fit with E below e_limit, and the longest of them
        (kept for the next call, as the walk asks for one E limit many times)."""
        if getattr(self, "_e_mask", (None,))[0] != e_limit:
            allowed = self.feasible & (self.e < e_limit) if e_limit < INF else self.feasible
            self._e_mask = (e_limit, allowed, _longest(allowed))
        return self._e_mask[1:]

    def minsum(self, e_limit: float = INF, t_limit: float = INF) -> tuple[float, tuple[int, ...] | None]:
        """Minimum sum of g over partitions of segments that fit with E below e_limit and tau
        below t_limit, and one such partition."""
        return self._answer("g", np.add, e_limit, t_limit)

    def minmax(self, cost: str, e_limit: float = INF, t_limit: float = INF) -> tuple[float, tuple[int, ...] | None]:
        """Minimum over such partitions of the largest per-stage `cost` ("tau" or "e"), and one
        such partition."""
        return self._answer(cost, np.maximum, e_limit, t_limit)

    def _answer(self, cost: str, combine, e_limit: float, t_limit: float) -> tuple[float, tuple[int, ...] | None]:
        """_dp, or the answer of an earlier DP of the same cost under limits no lower when its
        partition has max E and max tau below these limits too (or it found none): the
        partitions allowed now are a subset of those allowed then that still holds its optimum,
        so the optimum is the same, and so is the partition the DP's walk back picks (at each
        step the first best choice: the subset keeps it, and can add no earlier one). The walk
        asks that often: with a lower E limit it meets tau limits it met before."""
        answers = self.__dict__.setdefault("_answers", {}).setdefault(cost, [])
        for e_then, t_then, value, partition in answers:
            if e_limit <= e_then and t_limit <= t_then:
                if partition is None:
                    return value, partition
                p_tau, _, p_e = self.measures(partition)
                if p_e < e_limit and p_tau < t_limit:
                    return value, partition
        value, partition = self._dp(cost, combine, e_limit, t_limit)
        answers.append((e_limit, t_limit, value, partition))
        return value, partition

    def _dp(self, cost: str, combine, e_limit: float, t_limit: float) -> tuple[float, tuple[int, ...] | None]:
        """The best value over partitions of the allowed segments' `cost` combined stage by stage
        with `combine` (add or max), and one partition attaining it.

        `value` holds the best over partitions of layers [0, p) into the stages so far at index
        p + W - 1, so stage s reads every segment start s + r - w through one strided view (of a
        copy, kept for the walk back, so that its own ends can be written as they are found).
        Starts before layer s (r < w) are impossible: positions below s hold INF when stage s
        reads them (each is cleared once no later stage may write it), so whatever the table
        holds there never wins. Stage 0 starts at layer 0, so its values are the diagonal; the
        last stage ends at layer L, so only its last row is needed (and it has no r < w, as
        W <= R).

        W is the longest segment that fits with E below e_limit (_longest; for lean tables, all
        the tables hold) or that may have tau below t_limit (_longest_below), if shorter, so
        each stage's band (see the class) narrows to W in the same way: only its rows are masked
        and combined, the other ends of `value` are INF. With a tight tau limit that is a
        fraction of the rows. (Small whole tables skip _longest_below: the longer segments it
        would cut are masked out all the same, at INF, as are the ends only they reach, and the
        DP costs less than that search.)"""
        pp, L, R = self.pp, self.L, self.R
        lean = self.lean
        if lean:
            W = min(self._W, self._longest_below(t_limit))
        else:
            allowed, W = self._e_allowed(e_limit)
            if len(self._stage) * W > SMALL_TABLE_CELLS:     # (see the docstring)
                W = min(W, self._longest_below(t_limit))
            table = getattr(self, cost)
        if W == 0:
            return INF, None
        offset, band_low = self._band_rows

        def mask(rows: slice) -> np.ndarray:
            ok = allowed[rows, :W]
            if t_limit < INF:
                ok = ok & (self.tau[rows, :W] < t_limit)
            return np.where(ok, table[rows, :W], INF)

        def masked(s: int, low: int, high: int) -> np.ndarray:
            """Stage s's rows r in [low, high), the segments not allowed at INF."""
            rows = slice(offset[s] + low - band_low[s], offset[s] + high - band_low[s])
            if lean:
                return self._block(rows, W, cost, e_limit, t_limit)
            return mask(rows)

        if pp == 1:
            ok = R <= W and self._low[0] <= R - 1 < self._high[0]
            v = float(masked(0, R - 1, R)[0, R - 1]) if ok else INF
            return (v, (L,)) if v < INF else (INF, None)
        bands = self._dp_bands(W)
        if min(bands[0][1], W) <= bands[0][0]:      # stage 0 can end nowhere
            return INF, None
        step = np.dtype(np.float64).itemsize
        # Small whole tables: every stage's rows masked in one pass (a numpy call per stage cost
        # more than the cells on the paper settings), and each stage's values in a row of their
        # own, INF where it cannot end, so that nothing is cleared between stages; the walk back
        # reads the combined rows. Larger ones mask only each stage's band, stage by stage.
        first = bands[0][0] - band_low[0] if not lean else 0
        if not lean and (len(self._stage) - first) * W <= SMALL_TABLE_CELLS:
            return self._dp_small(combine, mask(slice(first, None)), first, W, bands)
        value = np.full(L + W, INF)
        low, high = bands[0]                # stage 0 starts at layer 0: segment r holds r + 1 layers
        high = max(low, min(high, W))
        if high > low:
            value[W + low:W + high] = masked(0, low, high)[np.arange(high - low), np.arange(low, high)]
        chunk = max(1, LEAN_CHUNK_CELLS // W) if lean else R
        reads: list[np.ndarray] = [value]     # per stage, the values it read
        best = np.minimum.reduce
        for s in range(1, pp):
            if self.poll is not None:
                self.poll()
            value[s + W - 2] = INF            # position s - 1: no segment of stage s starts there
            low, high = bands[s]
            ends = value[s + W:s + W + R]         # ends s + 1 ... s + R
            read = value.copy()
            reads.append(read)
            # starts[q, w] = read[W - 1 + q - w]: stage s's row r reads row q = s + r
            starts = np.ndarray((L + 1, W), buffer=read, offset=(W - 1) * step, strides=(step, -step))
            for a in range(low, high, chunk):
                b = min(high, a + chunk)
                combined = masked(s, a, b)
                combine(starts[s + a:s + b], combined, out=combined)
                best(combined, axis=1, out=ends[a:b])
            ends[:low] = INF
            ends[high:] = INF
        total = float(value[-1])
        if total == INF:
            return INF, None
        sizes, j = [], L                 # walk back from the end through each stage's best length
        for s in range(pp - 1, 0, -1):
            r = j - s - 1
            starts = np.ndarray((L + 1, W), buffer=reads[s], offset=(W - 1) * step, strides=(step, -step))
            size = int(combine(starts[s + r], masked(s, r, r + 1)[0]).argmin()) + 1
            sizes.append(size)
            j -= size
        sizes.append(j)
        return total, tuple(reversed(sizes))

    def _dp_bands(self, W: int) -> list[tuple[int, int]]:
        """Per stage, the rows [low, high) a DP with segments of up to W layers combines: within
        the tables' bands and _band_limits(W); the last stage ends at layer L (kept per W, as
        the walk asks for few distinct W)."""
        cache = self.__dict__.setdefault("_bands_by_W", {})
        if W not in cache:
            pp, L, R = self.pp, self.L, self.R
            lows, highs = _band_limits(pp, L, W)
            lows, highs = np.maximum(lows, self._low), np.minimum(highs, self._high)
            bands = list(zip(lows.tolist(), np.maximum(lows, highs).tolist()))[:-1]
            bands.append((R - 1, R if pp * W >= L and self._high[-1] == R else R - 1))
            cache[W] = bands
        return cache[W]

    def _dp_small(self, combine, whole: np.ndarray, first: int, W: int,
                  bands: list[tuple[int, int]]) -> tuple[float, tuple[int, ...] | None]:
        """_dp on small whole tables, `whole` their rows from `first` on masked (allowed
        segments' cost, else INF). values[s, p + W - 1] is the best over partitions of layers
        [0, p) into stages 0 ... s (INF where stage s cannot end at p), and stage s reads row
        s - 1 through one strided view: starts before layer s hold INF there, as stage s - 1
        ends at layer s at the earliest, and so do ends outside its band. The combined rows are
        written into `whole` in place, for the walk back. No poll: a DP this size takes well under
        a millisecond, and solve polls before each."""
        pp, L = self.pp, self.L
        offset, band_low = self._band_rows
        values = np.full((pp, L + W), INF)
        step, row_step = values.strides[1], values.strides[0]
        # starts[s, q, w] = values[s, W - 1 + q - w]: stage s + 1's row r reads q = s + 1 + r
        starts = np.ndarray((pp, L + 1, W), buffer=values, offset=(W - 1) * step, strides=(row_step, step, -step))
        best = np.minimum.reduce
        low, high = bands[0]                # stage 0 starts at layer 0: segment r holds r + 1 layers
        high = max(low, min(high, W))
        if high > low:
            values[0, W + low:W + high] = whole[:high - low, low:high].diagonal()
        rows = [offset[s] - band_low[s] - first for s in range(pp)]     # stage s's row r: rows[s] + r
        for s in range(1, pp):
            low, high = bands[s]
            if high <= low:
                continue
            combined = whole[rows[s] + low:rows[s] + high]
            combine(starts[s - 1, s + low:s + high], combined, out=combined)
            best(combined, axis=1, out=values[s, s + W + low:s + W + high])
        total = float(values[-1, -1])
        if total == INF:
            return INF, None
        choice = whole.argmin(axis=1).tolist()      # per row, its best length less 1 (where combined)
        sizes, j = [], L                 # walk back from the end through each stage's best length
        for s in range(pp - 1, 0, -1):
            size = choice[rows[s] + j - s - 1] + 1
            sizes.append(size)
            j -= size
        sizes.append(j)
        return total, tuple(reversed(sizes))

    def measures(self, partition: tuple[int, ...]) -> tuple[float, float, float]:
        """(max tau, sum g, max E) of a partition (kept: the walk asks again for those its
        DPs found)."""
        known = self.__dict__.setdefault("_measures", {})
        if partition not in known:
            known[partition] = self._measures_of(partition)
        return known[partition]

    def _measures_of(self, partition: tuple[int, ...]) -> tuple[float, float, float]:
        offset, band_low = self._band_rows
        ends = list(itertools.accumulate(partition))
        rows = [offset[s] + ends[s] - s - 1 - band_low[s] for s in range(self.pp)]
        if self.lean:
            W, figures = self._W, []
            for row, size in zip(rows, partition):
                one = slice(row, row + 1)
                start, valid = self._starts(one, W)
                compute = self._rows_compute(one, start)
                busy = self._rows_busy(one, compute)
                figures.append((self._rows_tau(one, busy, start, valid)[0, size - 1],
                                self._rows_g(busy)[0, size - 1], self._rows_e(one, compute, start)[0, size - 1]))
            tau, g, e = (np.array(column) for column in zip(*figures))
            return float(tau.max()), float(np.add.reduce(g)), float(e.max())
        flat = np.array([row * self.W + size - 1 for row, size in zip(rows, partition)])
        return (float(self.tau.take(flat).max()), float(np.add.reduce(self.g.take(flat))),
                float(self.e.take(flat).max()))


def _band_limits(pp: int, L: int, W: int) -> tuple[np.ndarray, np.ndarray]:
    """Per stage s, the rows r in [low, high) it may end on (at layer s + 1 + r) when no stage
    holds more than W layers: at most (s + 1) W layers before its end, at most (pp - 1 - s) W
    after it (none when W = 0 or pp W < L)."""
    R, s = L - pp + 1, np.arange(pp)
    low = np.maximum(0, L - (pp - 1 - s) * W - s - 1) if W else np.zeros(pp, dtype=np.int64)
    high = np.maximum(low, np.minimum(R, (s + 1) * W - s)) if W * pp >= L else low
    return low, high


@functools.lru_cache(maxsize=8)
def _floor_log2(L: int) -> np.ndarray:
    """floor(log2(n)) for n in [0, L] (0 for 0), by table; exact (log2 of an integer is exact
    at powers of two)."""
    table = np.concatenate([[0], np.log2(np.arange(1, L + 1)).astype(np.int64)])
    table.flags.writeable = False
    return table


def _hardware_kinds(hardware: list[tuple]) -> dict[tuple, int]:
    """Each distinct stage hardware (Candidate.stage_hardware) and the first stage with it."""
    return {kind: s for s, kind in reversed(list(enumerate(hardware)))}


def _longest(allowed: np.ndarray) -> int:
    """The length of the longest allowed segment (0 if none; `allowed` within `feasible`): the
    DP need not look further, and with a tight tau limit that is often a fraction of the longest
    that fits in memory."""
    columns = np.flatnonzero(allowed.any(axis=0))
    return int(columns[-1]) + 1 if len(columns) else 0


def partitions_fit(candidates: list[Candidate], should_cancel: Callable[[], bool] | None = None) -> np.ndarray:
    """For each candidate (of one scenario), whether some partition fits every stage in memory,
    judged as the segment tables judge it but without building them: what the search asks of the
    candidates its bound ruled out, all at once.

    Candidates whose even split fits are settled first, then most of the rest by a greedy walk
    (_greedy_fits), and the few it leaves open exactly (_reachable_fits)."""
    fits = np.zeros(len(candidates), dtype=bool)
    if not candidates:
        return fits
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
        self.reserve = candidates[0].cost.training.runtime_reserve_bytes
        self.pp = np.array([c.pp for c in candidates])
        shared: dict[tuple, int] = {}
        layers = []
        for c in candidates:
            if (c.tp, c.mbs) not in shared:
                shared[c.tp, c.mbs] = len(layers)
                layers.append((c.memory_arrays[0], _peak_levels(c)))
        self.kind = np.array([shared[c.tp, c.mbs] for c in candidates])
        self.acts, self.levels = (np.array(column) for column in zip(*layers))
        self.state = np.array([c.state_prefix for c in candidates])     # weights, gradients, optimizer
        self.capacity = np.full((len(candidates), int(self.pp.max())), np.inf)
        self.in_flight = np.zeros(self.capacity.shape)
        for i, c in enumerate(candidates):
            self.capacity[i, :c.pp] = c.layout.stage_capacity
            self.in_flight[i, :c.pp] = c.memory_arrays[2]
        self.floor_log2 = _floor_log2(L)

    def keep(self, rows: np.ndarray) -> None:
        """Keep only these rows (a mask or indices), in their order."""
        for name in ("pp", "kind", "state", "capacity", "in_flight"):
            setattr(self, name, getattr(self, name)[rows])

    def need(self, n: int, stage: int | None, start: np.ndarray, end: np.ndarray | slice) -> np.ndarray:
        """Bytes per GPU of segments [start, end) of the first n rows (end a slice: those ends
        in turn), on `stage` (None: column s is on stage s); entries with end <= start are
        meaningless."""
        L = self.L
        row, kind = np.arange(n)[:, None], self.kind[:n, None]
        if isinstance(end, slice):
            end = np.arange(L + 1)[end][None, :]
            state_end = self.state[:n, end[0]]
            end = np.broadcast_to(end, state_end.shape)
        else:
            state_end = self.state[row, end]
        k = self.floor_log2[np.maximum(end - start, 0)]
        at = kind * self.levels.shape[1] + k * L                   # the row's level k, flattened
        levels = self.levels.ravel()
        seg_peak = np.maximum(levels[at + np.minimum(start, L - 1)], levels[at + np.maximum(end - (1 << k), 0)])
        state = state_end - self.state[row, start]
        acts = self.acts[kind, end] - self.acts[kind, start]
        in_flight = self.in_flight[:n] if stage is None else self.in_flight[:n, stage:stage + 1]
        return (state + seg_peak + self.reserve) + in_flight * acts


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


def _segment_need(c: Candidate, start: np.ndarray, end: np.ndarray, in_flight) -> np.ndarray:
    """Memory of the segments [start, end) (end > start, arrays broadcast) of one candidate with
    `in_flight` micro-batches of activations, in SegmentTables' arithmetic: state, transient peak
    (from its sparse table), reserve and activations."""
    L = c.num_layers
    act_prefix = c.memory_arrays[0]
    levels = _peak_levels(c).reshape(-1, L)
    k = _floor_log2(L)[end - start]
    seg_peak = np.maximum(levels[k, start], levels[k, end - (1 << k)])
    return (c.state_prefix[end] - c.state_prefix[start] + seg_peak + c.cost.training.runtime_reserve_bytes
            + in_flight * (act_prefix[end] - act_prefix[start]))


def _fits(c: Candidate, partition: tuple[int, ...]) -> bool:
    """Whether every stage of a partition fits its memory, in SegmentTables' arithmetic."""
    ends = np.cumsum(partition)
    need = _segment_need(c, ends - np.array(partition), ends, c.memory_arrays[2])
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


def best_partition(candidate: Candidate, upper_bound: float = INF) -> PartitionResult:
    """The partition minimising the iteration time under memory limits, or None if none fits.

    With a finite `upper_bound`, a candidate that cannot beat it may return partition None and
    iteration_time_s inf early; the caller then knows it is no better than the bound.
    """
    tables = SegmentTables(candidate)
    return solve(tables, upper_bound)


def solve(tables: SegmentTables, upper_bound: float = INF,
          should_cancel: Callable[[], bool] | None = None) -> PartitionResult:
    """See the module docstring. `should_cancel` is polled before every DP; Cancelled is raised.

    Both walks start capped from above: a partition whose max E is at least
    best - (B - 1) min max tau - min sum g, or whose max tau is at least
    (best - min max E - sigma) / (B - 1), cannot beat the best found, so those are skipped too.
    """
    B = tables.candidate.num_micro_batches

    def poll() -> None:
        if should_cancel is not None and should_cancel():
            raise Cancelled

    tables.poll = poll
    candidate = tables.candidate
    deep = tables.pp > 2        # one or two stages: every partition at once (after the cap)
    even = even_partition(candidate.num_layers, candidate.pp)

    @functools.cache
    def fits() -> bool:
        """Whether some partition fits memory (the even split's check first: the cheapest)."""
        return _fits(candidate, even) or bool(partitions_fit([candidate])[0])

    # Large tables: settled without building them when no partition fits (after this, finding
    # nothing means that nothing beats the bound). Small ones cost less than that check: it is
    # made only when nothing is found, and not even then where a DP over the tables, not cut at
    # a cap, found no partition (the tables judge memory as partitions_fit does).
    small = tables.pp * tables.R ** 2 < CAP_MIN_CELLS
    if deep and not small and not fits():
        return PartitionResult(None, INF, 0, fits=False)
    g_floor, e_floor = _sum_and_tail_floors(candidate)
    # Settled without building the tables: none has a bottleneck that could beat the bound.
    if deep and upper_bound < INF and (g_floor + e_floor >= upper_bound or B > 1 and _bottleneck_exceeds(
            candidate, (upper_bound - g_floor - e_floor) / (B - 1))):
        return PartitionResult(None, INF, 0, fits=fits())
    # A partition with max tau >= (J - g_floor - e_floor) / (B - 1) costs at least J: with J the
    # bound, or else the even split's time (when it fits, the optimum costs no more), its
    # segments with tau that high are never needed, and the tables are cut short of them.
    # A partition found cheaply that fits (the even split, one balanced by compute) bounds it too.
    bound = upper_bound
    if not small:
        for heuristic in (even, _balanced_partition(candidate)):
            if heuristic is not None and _fits(candidate, heuristic):
                bound = min(bound, candidate.quick_evaluate(heuristic)[0])
    if B > 1 and bound < INF:
        tables.tau_cap = (bound - g_floor - e_floor) / (B - 1)
    if not deep and not tables.lean:
        result = _solve_by_enumeration(tables, upper_bound)
        # Nothing found: none fits, or (the tables cut at the cap) none beats the bound.
        if result.partition is None and not fits():
            return PartitionResult(None, INF, result.solves, fits=False)
        return result
    if not deep and not fits():     # lean tables
        return PartitionResult(None, INF, 0, fits=False)
    poll()
    if tables.empty:                # (not cut at a cap: no segment fits, nor any partition)
        return PartitionResult(None, INF, 0, fits=tables.tau_cap < INF and fits())
    if not tables.lean:
        for table in ("_compute", "_busy", "tau"):      # built in steps, so that a cancel waits less
            poll()
            getattr(tables, table)
    poll()
    t_star, start = tables.minmax("tau")
    if start is None:               # (not cut at a cap: no partition fits)
        return PartitionResult(None, INF, 1, fits=tables.tau_cap < INF and fits())
    if (B - 1) * t_star + g_floor + e_floor >= upper_bound:
        return PartitionResult(None, INF, 1)
    if not tables.lean:
        poll()
        tables.e
    poll()
    e_star, _ = tables.minmax("e")
    if (B - 1) * t_star + g_floor + e_star >= upper_bound:
        return PartitionResult(None, INF, 2)
    poll()
    g_min, part = tables.minsum()
    solves = 3
    best_j, best_p = upper_bound, None
    for p in (start, part):
        tau, g_sum, e_max = tables.measures(p)
        if (B - 1) * tau + g_sum + e_max < best_j:
            best_j, best_p = (B - 1) * tau + g_sum + e_max, p
    # The walk needs no segment whose tau alone would cost best_j: when cutting the tables there
    # shrinks them well, the walk reads tables cut there (t_star, e_star and g_min, from more
    # segments, stay lower bounds).
    if B > 1 and best_j < INF:
        narrower = tables.narrowed((best_j - g_floor - e_floor) / (B - 1))
        if narrower.cells < REBUILD_SHARE * tables.cells:
            tables = narrower
            if tables.empty:
                return PartitionResult(best_p, best_j, solves)
    e_limit = best_j - (B - 1) * t_star - g_min
    t_low = t_star          # the least max tau with every max E below the limit
    while e_limit > e_star:                  # else no partition has max E below the limit
        inner_best, inner_e = INF, None
        # x_low: a lower bound on max E over the partitions left (max tau below t_limit, max E
        # below e_limit); it only rises as t_limit falls, and is refreshed while it prunes nothing.
        x_low = e_star
        t_limit = INF if B == 1 else (best_j - g_min - x_low) / (B - 1)
        while t_limit > t_low:              # else no partition has max tau below the limit
            poll()
            sigma, p = tables.minsum(e_limit, t_limit)
            solves += 1
            if p is None or (B - 1) * t_low + sigma >= inner_best:
                break
            tau, g_sum, e_max = tables.measures(p)
            if (B - 1) * tau + g_sum < inner_best:
                inner_best, inner_e = (B - 1) * tau + g_sum, e_max
            if (B - 1) * tau + g_sum + e_max < best_j:
                best_j, best_p = (B - 1) * tau + g_sum + e_max, p
            if B == 1:                       # tau does not count: the first S is the inner best
                break
            # Refreshed, x_low prunes more, and lowers the next limit further when it does not.
            if (B - 1) * t_low + sigma + x_low < best_j:
                poll()
                x_low, _ = tables.minmax("e", e_limit, t_limit)
                solves += 1
            if (B - 1) * t_low + sigma + x_low >= best_j:
                break
            t_limit = min(tau, (best_j - x_low - sigma) / (B - 1))
        # Partitions with max E below the limit have (B - 1) max tau + sum g >= inner_best, or
        # were already shown to lose: so those with max E >= best - inner_best lose too. Stop
        # if that leaves none.
        if inner_e is None or inner_best + e_star >= best_j:
            break
        e_limit = min(inner_e, best_j - inner_best)
        if e_limit <= e_star:
            break
        poll()
        t_low, _ = tables.minmax("tau", e_limit)
        solves += 1
        if (B - 1) * t_low + g_min + e_star >= best_j:
            break
    return PartitionResult(best_p, best_j if best_p is not None else INF, solves)


def _bottleneck_exceeds(candidate: Candidate, limit: float) -> bool:
    """Whether every partition has max tau above `limit` (a little above it, against rounding),
    shown without tables: with each boundary at its cheapest cut, stage s may hold at most
    limit - overhead - its cheapest sends of compute; filling stages greedily in order is exact
    for that relaxation (a shorter segment never costs more), so if it leaves layers over, so
    does every partition. O(pp log L)."""
    return _greedy_ends(candidate, limit * (1 + 1e-9))[-1] < candidate.num_layers


def _cheapest_sends(candidate: Candidate) -> np.ndarray:
    """Per stage, the least time its sends can take per micro-batch: its boundaries at their
    cheapest cuts."""
    pp = candidate.pp
    sends = np.zeros(pp)
    if pp > 1:
        sends[:-1] += candidate.cheapest_cut
        sends[1:] += candidate.cheapest_cut
    return sends


def _greedy_ends(candidate: Candidate, limit: float, sends: np.ndarray | None = None) -> list[int]:
    """Where each stage ends when each in turn takes the most layers whose compute fits in
    `limit` less the overhead and its cheapest sends (the last end short of L: layers left over;
    an end may repeat where a stage has no room)."""
    pp, L = candidate.pp, candidate.num_layers
    prefix = candidate.time_prefix
    room = (limit - candidate.micro_batch_overhead - (_cheapest_sends(candidate) if sends is None else sends)).tolist()
    ends, i = [], 0
    for s in range(pp):
        if room[s] >= 0:
            i = int(np.searchsorted(prefix[s], prefix[s][i] + room[s], side="right")) - 1
        ends.append(i)
        if i >= L:
            break
    return ends


def _balanced_partition(candidate: Candidate) -> tuple[int, ...] | None:
    """A partition with a small max compute, found cheaply to cap the tables with its time: the
    least bottleneck (to 1%) at which the greedy walk of _greedy_ends covers every layer, walked
    once more leaving a layer to each later stage. Memory is not considered (None if the walk
    leaves a stage empty)."""
    pp, L = candidate.pp, candidate.num_layers
    sends = _cheapest_sends(candidate)
    low, high = 0.0, float(candidate.time_prefix[:, -1].max() + candidate.micro_batch_overhead + sends.max())
    while high - low > 0.01 * high:
        middle = (low + high) / 2
        if _greedy_ends(candidate, middle, sends)[-1] >= L:
            high = middle
        else:
            low = middle
    ends = _greedy_ends(candidate, high, sends)
    bounds = [0] + [min(end, L - (pp - 1 - s)) for s, end in enumerate(ends[:pp - 1])] + [L]
    sizes = np.diff(bounds)
    return tuple(int(n) for n in sizes) if len(sizes) == pp and np.all(sizes >= 1) else None


def _sum_and_tail_floors(candidate: Candidate) -> tuple[float, float]:
    """Lower bounds on sum g and on max E over all partitions, without a DP: every layer on its
    fastest stage and every boundary at its cheapest cut; and Candidate.tail_floor."""
    times, _ = candidate.stage_layer_times
    g_floor = float(times.min(axis=0).sum()) + candidate.pp * candidate.micro_batch_overhead
    if candidate.pp > 1:
        g_floor += float(candidate.cheapest_cut.sum())
    return g_floor / candidate.knobs.virtual_stages, candidate.tail_floor


def _solve_by_enumeration(tables: SegmentTables, upper_bound: float) -> PartitionResult:
    """One or two stages: every partition at once, as columns of layers per stage."""
    B, L, W = tables.candidate.num_micro_batches, tables.L, tables.W
    if tables.pp == 1:
        sizes = np.array([[L]])
    else:
        first = np.arange(1, L)
        sizes = np.stack([first, L - first])
    stage = np.arange(tables.pp)[:, None]
    r = np.cumsum(sizes, axis=0) - stage - 1
    # longer segments, or ends outside the bands, never fit or never win
    sizes = sizes[:, ((sizes <= W) & (r >= tables._low[:, None]) & (r < tables._high[:, None])).all(axis=0)]
    index = (tables.row(stage, np.cumsum(sizes, axis=0) - stage - 1), sizes - 1)
    fits = tables.feasible[index].all(axis=0)
    if not fits.any():                  # solve checked that some partition fits: none can win
        return PartitionResult(None, INF, 1)
    g, tau, e = (table[index] for table in (tables.g, tables.tau, tables.e))
    iteration = (B - 1) * tau.max(axis=0) + np.add.reduce(g, axis=0) + e.max(axis=0)
    iteration = np.where(fits, iteration, INF)
    best = int(np.argmin(iteration))
    if not iteration[best] < upper_bound:
        return PartitionResult(None, INF, 1)
    return PartitionResult(tuple(int(n) for n in sizes[:, best]), float(iteration[best]), 1)
