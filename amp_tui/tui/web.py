"""`amp-tui web`: the same dashboard in a browser, through textual-serve (the optional `web` extra).

textual-serve runs one dashboard process per browser tab (`python -m amp_tui ui TARGET`) and relays
its screen over a websocket; it listens on 127.0.0.1 only, since the dashboard can write files.
"""

from __future__ import annotations

import errno
import shlex
import socket
import sys

from amp_tui.core.base.errors import SpecError
from amp_tui.core.plans.planfile import open_scenario

HOST = "127.0.0.1"


def serve_command(target: str | None) -> str:
    """The shell command textual-serve runs per session, every part quoted."""
    parts = [sys.executable, "-m", "amp_tui", "ui"] + ([target] if target else [])
    return " ".join(shlex.quote(part) for part in parts)


def serve(target: str | None, port: int) -> None:
    if not 1 <= port <= 65535:
        raise SpecError("--port", port, "must be between 1 and 65535")
    if target:
        open_scenario(target)   # a bad target is refused here, not in every browser tab
    try:
        from textual_serve.server import Server
    except ImportError:
        raise SpecError("web", "textual-serve", "is not installed; install the extra: pip install 'amp-tui[web]'") from None
    _check_free(port)       # before any banner: textual-serve prints its own before it binds
    print(f"amp-tui: serving the dashboard on http://{HOST}:{port} (ctrl+c stops)", file=sys.stderr)
    try:
        Server(serve_command(target), host=HOST, port=port, title="amp-tui").serve()
    except OSError as error:    # (taken between the check and the server's bind)
        raise SpecError("--port", port, f"cannot be served on {HOST}: {error.strerror or error}") from None


def _check_free(port: int) -> None:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)     # (as the server binds)
        try:
            probe.bind((HOST, port))
        except OSError as error:
            reason = "is in use on 127.0.0.1: choose another" if error.errno == errno.EADDRINUSE else \
                f"cannot be served on {HOST}: {error.strerror or error}"
            raise SpecError("--port", port, reason) from None
