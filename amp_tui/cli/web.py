"""`amp-tui web`: serve the dashboard to a browser on localhost (needs amp-tui[web])."""

from __future__ import annotations


def add_parser(sub) -> None:
    we = sub.add_parser("web", help="serve the dashboard to a browser on localhost (needs amp-tui[web])")
    we.add_argument("target", nargs="?", default=None, metavar="SCENARIO_OR_PLAN")
    we.add_argument("--port", type=int, default=8000, help="port on 127.0.0.1 (default 8000)")


def run(args) -> int:
    from amp_tui.tui.web import serve

    serve(args.target, args.port)
    return 0
