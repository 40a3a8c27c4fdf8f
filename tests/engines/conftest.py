"""The engines' own code on amp-tui's exports (pip install 'amp-tui[engines]').

Every test here needs an engine. Without one it skips and says which and how to install it, except
where AMP_TUI_REQUIRE_ENGINES=1 (set by .ci/run, which installs the extra): there a missing engine
fails the test, so CI never passes on skipped checks.

The cases are the three paper presets' best plans (the exact search, no time limit, so the same
plans on any machine) and a Llama 3 plan with tp 2, pp 4 and an uneven split whose middle stages
differ (Megatron needs its free layout flag for it).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest

from amp_tui.core.plans.exports import export_plan
from amp_tui.core.plans.planfile import Plan
from amp_tui.core.search.evaluate import evaluate
from amp_tui.core.search.planner import find_plans
from amp_tui.core.spec.scenario import load_scenario
from amp_tui.core.spec.strategy import Strategy

REQUIRED = os.environ.get("AMP_TUI_REQUIRE_ENGINES") == "1"
PAPER = ("paper-homogeneous", "paper-het-cluster", "paper-het-model")
LLAMA = "llama3-8b-tp2-pp4-uneven"
CASES = (*PAPER, LLAMA)


def pytest_collection_modifyitems(items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.engines)


def need(module: str):
    """The engine module, or a skip naming it (a failure where CI requires the engines)."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        if REQUIRED:
            pytest.fail(f"{module} cannot be imported ({error}), and AMP_TUI_REQUIRE_ENGINES=1 says it must")
        pytest.skip(f"{module} is not installed: the engine checks need pip install 'amp-tui[engines]'")


def case_plan(name: str) -> Plan:
    if name == LLAMA:
        scenario = load_scenario("mixed-h100-a100-llama3-8b")   # 2 x p5.48xlarge + 2 x p4de.24xlarge
        prediction = evaluate(scenario, Strategy(2, 4, 4, 1, (11, 9, 7, 7), (0, 1)))
    else:
        scenario = load_scenario(name)
        prediction = find_plans(scenario, time_limit_s=None).result.strategies[0]
    return Plan(scenario, prediction.strategy, prediction.to_dict(), "engine check", "now")


@pytest.fixture(scope="session")
def plans():
    """name -> Plan, each found once per session."""
    cache: dict[str, Plan] = {}

    def get(name: str) -> Plan:
        if name not in cache:
            cache[name] = case_plan(name)
        return cache[name]
    return get


@pytest.fixture(scope="session")
def exported(plans, tmp_path_factory):
    """(name, format) -> the folder holding that export's files."""
    folders: dict[tuple[str, str], Path] = {}

    def get(name: str, fmt: str) -> Path:
        if (name, fmt) not in folders:
            folder = tmp_path_factory.mktemp(f"{name}-{fmt}")
            for file_name, text in export_plan(plans(name), fmt).files.items():
                (folder / file_name).write_text(text)
            folders[(name, fmt)] = folder
        return folders[(name, fmt)]
    return get
