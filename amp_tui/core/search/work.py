"""Work budgets: the limit that makes a search's answer a function of its input alone.

A wall-clock limit cuts a search wherever the machine's speed of the moment puts it, so the same
input could give another answer a minute later. A work budget counts the search's own steps
instead, in units of about a microsecond of the development VM at its fastest (bench.py's machine
factor 1.00): each candidate built and bounded, each refined bound, each family of node orders,
each partition solve (by its DPs and table cells), each part of the cluster bounded. The counts
depend on the input only, so the search stops at the same step on any machine, loaded or not, and
gives the same ranking. `plan`'s default budget (DEFAULT_WORK) is sized so that the search fits its
time limit on that VM with room to spare; the wall-clock limit stays as a safety net, and the
answer says when it, rather than the budget, cut the search.
"""

from __future__ import annotations

from amp_tui.core.search.deadline import DEFAULT_TIME_LIMIT_S, OutOfTime

UNITS_PER_S = 1e6          # work units per second of the development VM at machine factor 1.00
WORK_SHARE = 0.45          # of a time limit, the share its work budget takes there
# (so that a machine twice as slow, e.g. a 2-core VM beside two busy processes, still ends by the
# budget rather than the clock: the same answer on both)

# Work charged per step (units: about a microsecond on the development VM). Set from the search's
# CPU time on the presets against the machine factor's workload (docs/search.md, "Work budgets"):
# within about 1.5x of a microsecond each; what matters is that they are fixed.
CANDIDATE = 110.0          # a candidate built (its layout shared with other micro-batch sizes) and its memory checked
FLOOR = 70.0               # ... its cheap bound, per candidate, plus FLOOR_CELL per stage x layer
FLOOR_CELL = 0.002          # (on 1,000 layers: 256 candidates, 34 M stage x layer cells, 0.08 s; once charged 20x that)
REFINE = 400.0             # a refined bound, per candidate, plus REFINE_CELL per stage x layer
REFINE_CELL = 0.4
FAMILY = 7000.0            # a family's bound over every node order, plus FAMILY_LAYER per layer
FAMILY_LAYER = 14.0
SOLVE = 900.0              # a partition solve's set-up, plus per DP, per table cell built, per cell per DP
DP = 350.0
CELL = 0.07                # (building a cell costs far more than a DP's pass over it: on 1,000 layers, a
CELL_DP = 0.0004           # solve of 212 DPs over 148,000 cells took 0.1 s, once charged 3.8x that)


def solve_units(solves: int, cells: int) -> float:
    """The work of a partition solve of `solves` DPs over tables of `cells` cells (0 if none built)."""
    return SOLVE + solves * (DP + CELL_DP * cells) + (CELL * cells if solves else 0.0)
PART_QUICK = 0.7           # a part of the cluster's quick bound
PART_FULL = 8.0            # ... its full bound, plus PART_CALL per call (its set-up, per (tp, dp, micro-batch size))
PART_CALL = 5000.0
PART_FAMILIES = 200.0      # ... its families' bounds (a part's search starts from them)
PART_FAMILY = 400.0        # ... one family's full bound (refined as it reaches the head)
QUICK = 150.0              # a candidate's quick partition (even, and balanced by compute), plus per stage
QUICK_STAGE = 4.0
STAGE_WISE = 500.0         # a per-stage layout's cost model (its links and boundaries), per stage


def work_for(seconds: float) -> float:
    """The work budget of a time limit: what fits in WORK_SHARE of it on the development VM."""
    return seconds * WORK_SHARE * UNITS_PER_S


DEFAULT_WORK = work_for(DEFAULT_TIME_LIMIT_S)
# `plan`'s default wall-clock safety net, from the command's start: the default budget ends the search
# by about 1.2 s on the development VM, so the net cuts only a machine more than twice as slow (a
# 2-core VM beside two busy processes still gets the budget's answer).
DEFAULT_SAFETY_S = 3.0
DEFAULT_SAFETY_MIN_S = 2.0     # ... but never less than this after the search starts


class OutOfWork(OutOfTime):
    """The work budget is spent: the search keeps what it found, as at a deadline, but the cut is
    the same on every machine."""


class Work:
    """A budget of work units (None: unlimited) and what has been spent of it."""

    def __init__(self, budget: float | None = None):
        self.budget = budget
        self.spent = 0.0

    def charge(self, units: float) -> None:
        self.spent += units

    def over(self) -> bool:
        return self.budget is not None and self.spent >= self.budget

    def check(self) -> None:
        """Raise OutOfWork once the budget is spent (a budget of 0 allows nothing)."""
        if self.over():
            raise OutOfWork
