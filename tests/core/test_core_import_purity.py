"""The planning core never imports Textual or Rich: the TUI and the CLI are thin front ends over it.
Every module of every stage is imported."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CHECK = (
    "import importlib, pkgutil, sys, amp_tui.core; "
    "[importlib.import_module(m.name) for m in pkgutil.walk_packages(amp_tui.core.__path__, 'amp_tui.core.')]; "
    "assert 'textual' not in sys.modules and 'rich' not in sys.modules, "
    "sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich'))"
)


def test_core_imports_without_textual_or_rich():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", CHECK], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_check_would_catch_a_ui_import():
    """The same check fails when something in the process does import a UI package."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    planted = "import sys, types; sys.modules['rich'] = types.ModuleType('rich'); " + CHECK
    done = subprocess.run([sys.executable, "-c", planted], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
