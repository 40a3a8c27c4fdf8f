"""Megatron's own code on the Megatron export of every case (megatron_check.py does the reading).

Megatron-Core (the [engines] extra) places the ranks; Megatron-LM's argument parser and validation
run too where AMP_TUI_MEGATRON_LM names a Megatron-LM checkout: Megatron-LM is not on PyPI, and the
megatron-core wheel does not ship megatron/training, so CI runs Megatron-Core's checks only (the
split through TransformerConfig and the layout parser: test_engine_details.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from amp_tui.core.base.errors import SpecError
from amp_tui.core.plans.exports import export_plan
from amp_tui.core.plans.exports.megatron import blocks_per_stage
from tests.engines.conftest import CASES, need

CHECK = Path(__file__).with_name("megatron_check.py")
MEGATRON_LM = os.environ.get("AMP_TUI_MEGATRON_LM")


def run_check(plans, exported, checkout: str | None) -> dict:
    cases = []
    for name in CASES:
        try:
            export_plan(plans(name), "megatron")
        except SpecError:       # paper-het-model (TransGAN): refused, test_exports.py says why
            continue
        cases.append({"name": name, "megatron": str(exported(name, "megatron")),
                      "rankmap": str(exported(name, "rankmap"))})
    command = [sys.executable, str(CHECK), json.dumps(cases), *([checkout] if checkout else [])]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    results = {r["name"]: r for r in (json.loads(line[len("RESULT "):]) for line in done.stdout.splitlines()
                                      if line.startswith("RESULT "))}
    assert sorted(results) == sorted(case["name"] for case in cases)
    assert not {name: r["refused"] for name, r in results.items() if "refused" in r}
    return results


def test_megatron_core_places_every_rank(plans, exported):
    need("megatron.core")
    for name, got in run_check(plans, exported, None).items():
        s = plans(name).strategy
        assert (got["dp"], got["world"]) == (s.dp, s.tp * s.pp * s.dp), name
        assert got["environment"]["CUDA_DEVICE_MAX_CONNECTIONS"] == ("1" if s.tp > 1 else "unset"), name


def test_megatron_lm_parses_and_validates_every_export(plans, exported):
    need("megatron.core")
    if not MEGATRON_LM:
        pytest.skip("Megatron-LM's parser is not on PyPI: set AMP_TUI_MEGATRON_LM to a Megatron-LM checkout "
                    "(tag core_v0.16.1) to run it")
    for name, got in run_check(plans, exported, MEGATRON_LM).items():
        plan = plans(name)
        s, lm = plan.strategy, got["megatron_lm"]
        assert (lm["tp"], lm["pp"], lm["dp"]) == (s.tp, s.pp, s.dp), name
        assert (lm["micro_batch"], lm["global_batch"]) == (s.micro_batch_size,
                                                          plan.scenario.training.global_batch_size), name
        planned = blocks_per_stage(plan.scenario.model, s.partition)
        assert lm["num_layers"] == sum(planned)
        if "blocks_per_stage" in lm:
            assert tuple(lm["blocks_per_stage"]) == planned, name
        elif s.pp > 1:
            first, last = lm["first"], lm["last"]
            middle = (sum(planned) - (first or 0) - (last or 0)) // (s.pp - (first is not None) - (last is not None))
            split = [middle] * s.pp
            split[0] = first if first is not None else middle
            split[-1] = last if last is not None else middle
            assert tuple(split) == planned, name
