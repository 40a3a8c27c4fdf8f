"""The `amp-tui` argument parser: its one-line errors, the examples it shows, the shared argument types."""

from __future__ import annotations

import argparse
import re
import sys

from amp_tui import __version__

DEFAULT_SCENARIO = "paper-homogeneous"

EPILOG = """\
examples:
  amp-tui                                   open the dashboard on paper-homogeneous
  amp-tui ui paper-het-cluster              open the dashboard on another preset (or a file, or a plan)
  amp-tui plan paper-het-model --top 5      rank strategies in the terminal
  amp-tui plan my.yaml --save plan.yaml     save the best strategy as a plan file
  amp-tui evaluate paper-homogeneous s.yaml predict the strategies listed in s.yaml
  amp-tui evaluate plan.yaml                re-predict a saved plan
  amp-tui evaluate plan.yaml s.yaml         predict other strategies on a plan's scenario
  amp-tui compare paper-het-cluster s.yaml  two strategies side by side, term by term
  amp-tui plan paper-homogeneous --sensitivity   does the best pick survive slower links, GPUs?
  amp-tui web --port 8000                   the dashboard in a browser on localhost
  amp-tui export plan.yaml --format megatron -o out/
  amp-tui presets                           list scenario, cluster and model presets
  amp-tui bench                             time the search on the benchmark scenarios
  amp-tui validate                          score the cost model on published measured runs
  amp-tui calibrate my.yaml runs.yaml -o calibrated.yaml   fit the model to your measured runs
  amp-tui profile my.yaml --iterations      time the model's layers on this GPU (needs amp-tui[profile])
  amp-tui import nodes.txt -o cluster.yaml  a scenario from scontrol show node / nvidia-smi output
  amp-tui serve helix-single24-llama2-70b   place a model for serving (max flow, Helix)
"""


class Parser(argparse.ArgumentParser):
    """argparse with the one-line errors of the rest of amp-tui: `amp-tui: error: plan: --top: 'abc' is
    not a whole number (see amp-tui plan --help)`, exit status 2."""

    def error(self, message: str):
        command = self.prog.removeprefix("amp-tui").strip()
        message = re.sub(r"^argument ([^:]+): ", r"\1: ", " ".join(message.split()))
        where = f"{command}: " if command else ""
        help_hint = f"amp-tui {command} --help" if command else "amp-tui --help"
        sys.stderr.write(f"amp-tui: error: {where}{message} (see {help_hint})\n")
        raise SystemExit(2)


def whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def new_parser() -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    """The parser of `amp-tui` and its subcommands' holder; each command module adds its own (main.py)."""
    parser = Parser(
        prog="amp-tui", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG,
        description="Plan model-parallel training on heterogeneous GPU clusters (AMP, NeurIPS 2022).")
    parser.add_argument("--version", action="version", version=f"amp-tui {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser, sub
