"""Serve mode is pure like the core: importing it (and its CLI command) loads neither Textual nor Rich."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CHECK = (
    "import amp_tui.serving.result, amp_tui.serving.planfile, amp_tui.cli.serve, amp_tui.serving.bench; "
    "import sys; assert 'textual' not in sys.modules and 'rich' not in sys.modules, "
    "sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich'))"
)


def test_serving_imports_without_textual_or_rich():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", CHECK], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
