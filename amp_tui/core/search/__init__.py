"""Searching the strategy space: candidates visited best-first by lower bounds (search.py, bounds/),
the exact best partition of each (partition/), node orders (orders.py), idle nodes (subclusters.py),
the post-pass over batch shares and per-stage degrees (uneven.py), what is ranked
(objective.py), all of it in one call as `plan` runs it (planner.py), `evaluate` of given
strategies, and the benchmark (bench.py).

May import: amp_tui.core.base, amp_tui.core.spec, amp_tui.core.costmodel
"""
