"""`amp-tui web` serves the dashboard's page on loopback (textual-serve, the optional web extra)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request

import pytest

pytest.importorskip("textual_serve")

HANG_S = 300    # what a server or a dashboard may take before it counts as hung, not slow


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_web_serves_the_page_on_loopback():
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "amp_tui", "web", "paper-homogeneous", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        page = None
        # Until it answers or exits; the bound only keeps a hung server from hanging the suite (it
        # answers within seconds: a loaded machine may take ten times as long, which is no failure).
        deadline = time.monotonic() + HANG_S
        while time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as response:
                    page = response.read().decode()
                    break
            except OSError:
                time.sleep(0.2)
        assert page is not None, server.stderr.read1().decode() if server.poll() is not None else "no answer"
        assert "amp-tui" in page and "textual" in page.lower()
        assert "ws://127.0.0.1" in page or "127.0.0.1" in page   # the websocket it will open
    finally:
        server.terminate()
        try:
            server.wait(timeout=5)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def test_web_bad_target_is_one_line(capsys):
    from amp_tui.cli import main

    assert main(["web", "no-such-scenario", "--port", "1"]) == 2
    assert capsys.readouterr().err.startswith("amp-tui: error:")


def test_command_is_quoted():
    from amp_tui.tui.web import serve_command

    assert "'my plan.yaml'" in serve_command("my plan.yaml")


def test_a_served_dashboard_leaves_when_the_server_hangs_up(tmp_path):
    """Issue 28, major 6: textual-serve drives each dashboard over its stdin; when the server goes away
    without a quit (killed, or a tab dropped while the dashboard started), stdin hangs up. Before, the
    dashboard stayed alive for good, with nobody to reach it."""
    import os
    import threading

    env = dict(os.environ, TEXTUAL_DRIVER="textual.drivers.web_driver:WebDriver", COLUMNS="88", ROWS="33",
               TERM_PROGRAM="textual", AMP_TUI_STATE_DIR=str(tmp_path))
    dashboard = subprocess.Popen([sys.executable, "-m", "amp_tui", "ui"], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=tmp_path)
    try:
        assert dashboard.stdout.readline() == b"__GANGLION__\n"     # the web driver's hello: it is up
        threading.Thread(target=lambda: [None for _ in iter(lambda: dashboard.stdout.read1(65536), b"")],
                         daemon=True).start()                      # read its screen, as the server does
        time.sleep(1.0)
        dashboard.stdin.close()                                    # the server is gone
        dashboard.wait(timeout=HANG_S)                             # (a hang guard, as above)
        assert dashboard.returncode == 0
    finally:
        if dashboard.poll() is None:
            dashboard.kill()
            dashboard.wait()


def test_a_busy_port_is_one_line_before_any_banner(capsys):
    """Issue 34: on a busy port `web` printed "serving the dashboard on ..." and textual-serve's
    banner, then "error: file: '?': error while attempting to bind"."""
    from amp_tui.cli import main

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["web", "paper-homogeneous", "--port", str(port)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert err.startswith(f"amp-tui: error: --port: {port}:") and "in use" in err
