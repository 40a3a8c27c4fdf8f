"""The `amp-tui` command line: a thin front end over amp_tui.core and amp_tui.serving.

One module per command, each with `add_parser(sub)` and `run(args)`; main.py dispatches and turns
every user error into one line and exit status 2, parser.py is the argument parser, output.py what the
commands print. Commands import the core when they run, so that `amp-tui --help` starts fast.

May import: amp_tui, amp_tui.core, amp_tui.serving, amp_tui.tui
"""

from amp_tui.cli.main import main

__all__ = ["main"]
