"""`amp-tui validate`: published measured runs (runs.py, read through cluster_labels.py and
training_labels.py) replayed through the cost model and scored (replay.py, metrics.py), the error
bands that follow (bands.py), and the fit of the default parameters to them (fit.py); your own
runs, a `calibrate` measurements file, scored alike (own_runs.py).

May import: amp_tui.core.base, amp_tui.core.spec, amp_tui.core.costmodel, amp_tui.core.search,
amp_tui.core.calibration
"""
