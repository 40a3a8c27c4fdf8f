"""Suite-wide:
- the search's time limits (plan's default, the idle search's and the post-pass's own, the
  what-ifs') are read against a clock the test controls, which moves SEARCH_TICK_S at each read.
  The search's work budget (core/search/work.py) is what ends it; the limit stays a safety net
  that passes after a set number of reads, the same on every machine and at every load: a ranking
  never depends on how busy the machine was. A test that is about time limits installs its own
  clock (tests/core/fake_clock.py); wall-clock targets are `amp-tui bench`'s.
- the dashboard's snapshot tests run only on the textual version they were recorded with (the one
  .ci/requirements.lock pins); SVGs change between textual releases, so on any other version (a
  user's, or CI's lowest-versions pass) they skip and say so.
- `python -m pytest` runs on every core where pytest-xdist is installed (the [test] extra): most of
  the suite waits on Textual's event loop, subprocesses or the search, one test at a time, and 2
  workers on 2 cores nearly halve it. `-n N` (`-n 0`: one process) or `-p no:xdist` chooses
  otherwise; the mode is `--dist loadgroup` unless the command line gives one. Without xdist the
  suite runs in one process: a hook here rather than `-n logical` in addopts, which a pytest
  without xdist refuses."""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path

import pytest

import amp_tui.cli
from tests.core.fake_clock import install

LOCK = Path(__file__).resolve().parent.parent / ".ci" / "requirements.lock"
SEARCH_TICK_S = 1e-4


@pytest.hookimpl(wrapper=True)
def pytest_cmdline_main(config):
    """`-n logical` unless the command line chose, and `--dist loadgroup` unless it chose a mode, so that
    tests marked xdist_group (sharing one costly module fixture) run in one worker. Runs before xdist
    reads the options; not in a worker."""
    if (config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput")
            and config.getoption("dist", "no") == "no" and not config.getoption("tx", None)):
        if config.getoption("numprocesses", None) is None:
            config.option.numprocesses = "logical"      # every CPU the OS shows (auto: physical cores, with psutil)
        if config.option.numprocesses != 0:
            config.option.dist = "loadgroup"
    return (yield)


@pytest.fixture(scope="session", autouse=True)
def session_search_clock():
    """The same clock for what module- and session-scoped fixtures search, set up before any
    test's own (a module fixture's plan on the machine's clock ranked by the load it ran under)."""
    with pytest.MonkeyPatch.context() as patch:
        yield install(patch, per_read=SEARCH_TICK_S)


@pytest.fixture(autouse=True)
def search_clock(monkeypatch):
    clock = install(monkeypatch, per_read=SEARCH_TICK_S)
    monkeypatch.setattr(amp_tui.cli, "STARTED_S", clock.t)    # a command run in the test starts now
    return clock


def _locked_textual() -> str | None:
    if not LOCK.exists():
        return None
    found = re.search(r"^textual==(\S+)$", LOCK.read_text(), re.MULTILINE)
    return found.group(1) if found else None


def pytest_collection_modifyitems(items):
    locked, installed = _locked_textual(), version("textual")
    if locked is None or locked == installed:
        return
    skip = pytest.mark.skip(reason=f"snapshots are recorded with textual {locked} (.ci/requirements.lock); "
                                   f"this is textual {installed}")
    for item in items:
        if "snap_compare" in getattr(item, "fixturenames", ()):
            item.add_marker(skip)


@pytest.fixture
def uneven_shares_scenario(tmp_path) -> Path:
    """mixed-h100-a100-llama3-8b with its gradients reduced in bf16 (NVIDIA's performance recipes),
    where uneven batch shares rank first: under Megatron's bf16 default (fp32 main gradients, reduced
    in fp32; issue 35) 1x1x32 holds 6 bytes a parameter and moves 4, and no longer does."""
    text = (LOCK.parent.parent / "presets" / "scenarios" / "mixed-h100-a100-llama3-8b.yaml").read_text()
    path = tmp_path / "mixed-h100-a100-llama3-8b-bf16-reduce.yaml"
    path.write_text(text.replace("  zero_stage: 1\n", "  zero_stage: 1\n  grad_reduce_in_fp32: false\n"))
    assert "grad_reduce_in_fp32: false" in path.read_text()
    return path
