"""Turning results into what a user keeps: plan files (planfile.py), two predictions compared term
by term (compare.py), what-ifs (sensitivity.py), how sure a prediction is (confidence.py), and the
files a training engine reads (exports/).

May import: amp_tui, amp_tui.core.base, amp_tui.core.spec, amp_tui.core.costmodel, amp_tui.core.search,
amp_tui.core.calibration, amp_tui.core.validation
"""
