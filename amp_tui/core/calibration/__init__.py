"""Fitting the cost model's parameters to runs measured on the user's cluster (calibrate.py), and
the measurements files those runs are written in (measurements.py).

May import: amp_tui.core.base, amp_tui.core.spec, amp_tui.core.costmodel, amp_tui.core.search
"""
