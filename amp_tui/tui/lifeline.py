"""The dashboard leaves when nobody can reach it any more.

Under `amp-tui web`, textual-serve starts one dashboard per browser tab and talks to it over its
stdin and stdout. It tells the dashboard to quit when the tab closes; but when the server goes away
without saying so (killed, crashed, or a tab dropped while the dashboard was starting), the
dashboard's stdin hangs up and Textual's web driver only stops reading: the process stayed alive,
with nobody to see or drive it, for as long as the machine ran.

`watch_stdin` watches for that hang-up from a daemon thread: it asks the app to quit as ctrl+q does
(unsaved edits kept in a recovery file), and if the app is still there `GRACE_S` later (its loop
busy or stuck), keeps the edits itself and leaves at once. Saves and exports are atomic
(core/base/atomic.py), so leaving never leaves a half-written file.
"""

from __future__ import annotations

import os
import select
import sys
import threading
import time

POLL_S = 0.5     # how often the watch looks at stdin
GRACE_S = 3.0    # after asking the app to quit, how long before leaving without it


def watch_stdin(app, fd: int | None = None) -> threading.Thread:
    """Start the watch on `fd` (stdin by default) for `app`; returns its daemon thread."""
    fd = sys.__stdin__.fileno() if fd is None else fd
    thread = threading.Thread(target=_watch, args=(app, fd), name="amp-tui-lifeline", daemon=True)
    thread.start()
    return thread


def _watch(app, fd: int) -> None:
    poller = select.poll()
    poller.register(fd, 0)      # no events asked for: hang-up and errors are always reported
    gone = select.POLLHUP | select.POLLERR | select.POLLNVAL
    while not any(events & gone for _, events in poller.poll(POLL_S * 1000)):
        pass
    from amp_tui.tui.messages import PeerGone

    app.post_message(PeerGone())        # thread-safe: the app quits as ctrl+q does
    time.sleep(GRACE_S)
    _keep_unsaved(app)                  # still here: its loop is busy; keep the edits and leave
    os._exit(0)


def _keep_unsaved(app) -> None:
    try:
        if app.unsaved:
            from amp_tui.tui.recovery import keep_unsaved

            keep_unsaved(app.scenario)
    except Exception:       # leaving matters more than a recovery file nobody may read
        pass
