"""The dynamic programs of the partition walk (walk.py) over a candidate's segment tables.

Each DP combines stage after stage the allowed segments' cost (sum of g, or largest tau or E),
reading every segment start of a stage through one strided view of the previous stage's values;
whole tables are masked at once, lean ones (tables.py) computed a chunk of rows at a time.
"""

from __future__ import annotations

import itertools

import numpy as np

INF = float("inf")


LEAN_CHUNK_CELLS = 2**18   # cells of lean tables computed at once


SMALL_TABLE_CELLS = 2**16  # whole tables up to this many cells are masked in one pass


def band_limits(pp: int, L: int, W: int) -> tuple[np.ndarray, np.ndarray]:
    """Per stage s, the rows r in [low, high) it may end on (at layer s + 1 + r) when no stage
    holds more than W layers: at most (s + 1) W layers before its end, at most (pp - 1 - s) W
    after it (none when W = 0 or pp W < L)."""
    R, s = L - pp + 1, np.arange(pp)
    low = np.maximum(0, L - (pp - 1 - s) * W - s - 1) if W else np.zeros(pp, dtype=np.int64)
    high = np.maximum(low, np.minimum(R, (s + 1) * W - s)) if W * pp >= L else low
    return low, high


def longest_allowed(allowed: np.ndarray) -> int:
    """The length of the longest allowed segment (0 if none; `allowed` within `feasible`): the
    DP need not look further, and with a tight tau limit that is often a fraction of the longest
    that fits in memory."""
    columns = np.flatnonzero(allowed.any(axis=0))
    return int(columns[-1]) + 1 if len(columns) else 0


class SegmentDP:
    """The dynamic programs over a candidate's segment tables: the least sum of g, or the least
    largest tau or E, over partitions of the segments allowed under an E and a tau limit, and one
    partition attaining it. SegmentTables (tables.py) holds the tables they read."""

    def _e_allowed(self, e_limit: float) -> tuple[np.ndarray, int]:
        """Whole tables: the segments that fit with E below e_limit, and the longest of them
        (kept for the next call, as the walk asks for one E limit many times)."""
        if getattr(self, "_e_mask", (None,))[0] != e_limit:
            allowed = self.feasible & (self.e < e_limit) if e_limit < INF else self.feasible
            self._e_mask = (e_limit, allowed, longest_allowed(allowed))
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

        W is the longest segment that fits with E below e_limit (longest_allowed; for lean tables, all
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
        the tables' bands and band_limits(W); the last stage ends at layer L (kept per W, as
        the walk asks for few distinct W)."""
        cache = self.__dict__.setdefault("_bands_by_W", {})
        if W not in cache:
            pp, L, R = self.pp, self.L, self.R
            lows, highs = band_limits(pp, L, W)
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
