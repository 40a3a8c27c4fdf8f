"""Commands and options that take a real cluster as it is: `amp-tui import` (importing.py) reads
what the scheduler and the driver print, `profile --network` measures its links (network.py), and
`calibrate PLAN LOG` reads an engine's own training log (logs.py). The work is in amp_tui.importers,
amp_tui.profiling and amp_tui.core.calibration."""
