"""`amp-tui ui` (the default command) and `amp-tui web`: the dashboard's two front doors, in the
terminal or served to a browser on localhost (needs amp-tui[web])."""

from __future__ import annotations

from types import SimpleNamespace

from amp_tui.cli.parser import DEFAULT_SCENARIO


def add_parser(sub) -> None:
    ui = sub.add_parser("ui", help="open the dashboard (the default command)")
    ui.add_argument("target", nargs="?", default=None, metavar="SCENARIO_OR_PLAN",
                    help=f"scenario preset, scenario file or plan file (default: {DEFAULT_SCENARIO})")


def run(args) -> int:
    target = getattr(args, "target", None)
    from amp_tui.tui.app import run_app

    run_app(target)
    return 0


def _add_web_parser(sub) -> None:
    we = sub.add_parser("web", help="serve the dashboard to a browser on localhost (needs amp-tui[web])")
    we.add_argument("target", nargs="?", default=None, metavar="SCENARIO_OR_PLAN")
    we.add_argument("--port", type=int, default=8000, help="port on 127.0.0.1 (default 8000)")


def _run_web(args) -> int:
    from amp_tui.tui.web import serve

    serve(args.target, args.port)
    return 0


# `amp-tui web` has the shape of a command module (main.py's COMMANDS).
web = SimpleNamespace(add_parser=_add_web_parser, run=_run_web)
