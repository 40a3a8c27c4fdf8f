"""Unsaved edits outlive ctrl+q: the app quits at once (whatever is running) and keeps the edited
scenario in a recovery file, whose path it prints."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from amp_tui.core.base.atomic import atomic_write
from amp_tui.core.base.yamlio import dump_yaml
from amp_tui.core.spec.scenario import Scenario


def recovery_folder() -> Path:
    """$AMP_TUI_STATE_DIR, else $XDG_STATE_HOME/amp-tui, else ~/.local/state/amp-tui."""
    if os.environ.get("AMP_TUI_STATE_DIR"):
        return Path(os.environ["AMP_TUI_STATE_DIR"])
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "amp-tui"


def keep_unsaved(scenario: Scenario) -> Path:
    folder = recovery_folder()
    folder.mkdir(parents=True, exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", scenario.name)[:60].strip("-.") or "scenario"
    path = folder / f"unsaved-{name}-{time.strftime('%Y%m%d-%H%M%S')}.yaml"
    return atomic_write(path, "# amp-tui: edits not saved when the dashboard quit\n" + dump_yaml(scenario.to_dict()))
