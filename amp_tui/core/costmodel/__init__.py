"""Pricing a strategy: its predicted iteration time, memory and cost on a cluster.

Layer times per GPU type (layer_times.py) and the terms they are made of (terms/), ranks and links
(placement.py), memory per stage (memory.py), a candidate's arrays and its prediction (cost.py,
prediction.py), per-stage degrees (stagewise.py), uneven batch shares (shares.py), dollars
(pricing.py) and a strategy that leaves nodes idle (parts.py).

May import: amp_tui.core.base, amp_tui.core.spec
"""
