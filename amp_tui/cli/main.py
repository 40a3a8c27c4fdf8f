"""`amp-tui`'s entry point: parse the command line, run the command, turn every user error into one
line on stderr and exit status 2; nothing prints a traceback."""

from __future__ import annotations

import signal
import sys
import threading
import warnings
from pathlib import Path

from amp_tui.cli import bench, calibrate, compare, evaluate, export, plan, presets, profile, serve, ui, validate
from amp_tui.cli.cluster import importing
from amp_tui.cli.ui import web
from amp_tui.cli.parser import new_parser
from amp_tui.core.base.errors import SpecError

# Each command's module adds its arguments (add_parser) and runs it (run); in `amp-tui --help` order.
COMMANDS = {"ui": ui, "evaluate": evaluate, "plan": plan, "compare": compare, "web": web, "export": export,
            "serve": serve, "presets": presets, "bench": bench, "validate": validate, "calibrate": calibrate,
            "profile": profile, "import": importing}


def build_parser():
    parser, sub = new_parser()
    for command in COMMANDS.values():
        command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit:      # --help, --version, or a one-line usage error
        return exit.code if isinstance(exit.code, int) else 0
    command = args.command or "ui"
    previous = _terminate_on_sigterm() if command != "ui" else None   # the dashboard has its own handling
    try:
        handler = COMMANDS[command].run
        with warnings.catch_warnings():
            # Infinite figures (a stage that does not fit) are meant; numpy's notes about them are not.
            warnings.simplefilter("ignore", RuntimeWarning)
            return handler(args) or 0
    except SpecError as err:
        print(f"amp-tui: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("amp-tui: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as err:     # a path the system refuses (too long, no permission...): the user's to fix
        print(f"amp-tui: error: {SpecError('file', Path(str(err.filename or '?')), err.strerror or str(err))}",
              file=sys.stderr)
        return 2
    except Exception as err:  # noqa: BLE001 - the last line of defence: no traceback for users
        text = " ".join(str(err).split())[:300]
        print(f"amp-tui: internal error: {type(err).__name__}: {text} (please report this)", file=sys.stderr)
        return 1
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _terminate_on_sigterm():
    """Turn SIGTERM into an exception, so that cleanup (temporary files) runs as for Ctrl-C."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def terminate(signum, frame):
        raise KeyboardInterrupt

    return signal.signal(signal.SIGTERM, terminate)
