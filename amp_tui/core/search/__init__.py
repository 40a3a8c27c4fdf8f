"""Searching the strategy space: candidates visited best-first by lower bounds (search.py,
floors.py, order_floors.py), the exact best partition of each (partition.py over tables.py,
segment_dp.py and segment_memory.py), node orders (orders.py), idle nodes (subclusters.py,
part_bounds.py), the post-pass over batch shares and per-stage degrees (uneven.py), what is ranked
(objective.py), `evaluate` of given strategies, and the benchmark (bench.py).

May import: amp_tui.core.base, amp_tui.core.spec, amp_tui.core.costmodel
"""
