"""The `amp-tui` command line: a thin front end over amp_tui.core, amp_tui.importers, amp_tui.profiling
and amp_tui.serving.

One module per command (those that read a real cluster in cluster/), each with `add_parser(sub)` and
`run(args)`; main.py dispatches and turns
every user error into one line and exit status 2, parser.py is the argument parser, output.py what the
commands print. Commands import the core when they run, so that `amp-tui --help` starts fast.

May import: amp_tui, amp_tui.core, amp_tui.importers, amp_tui.profiling, amp_tui.serving, amp_tui.tui
"""

import os
import time

STARTED_S = time.perf_counter()     # about when the command started (plan's default time limit counts from it)

# One BLAS thread unless the user asks for more: the arrays here are small (a matrix product of
# a few hundred cells at most), and starting OpenBLAS's thread pool when numpy loads took 100 ms
# of the 2-core development VM's 230 ms `import numpy`. Read when numpy loads, so set first.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from amp_tui.cli.main import main  # noqa: E402 - after the environment above

__all__ = ["main"]
