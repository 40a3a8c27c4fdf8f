"""`amp-tui ui`: open the dashboard (the default command)."""

from __future__ import annotations

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
