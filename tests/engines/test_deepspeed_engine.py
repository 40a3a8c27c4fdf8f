"""DeepSpeed's own code on the DeepSpeed export of every case (deepspeed_check.py does the reading)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from amp_tui.core.plans.exports.common import stage_bounds
from amp_tui.core.plans.exports.deepspeed import deepspeed_zero_stage
from amp_tui.core.spec.knobs import resolve
from tests.engines.conftest import CASES, need

CHECK = Path(__file__).with_name("deepspeed_check.py")


def test_deepspeed_reads_every_export(plans, exported):
    need("deepspeed")
    cases = [{"name": name, "deepspeed": str(exported(name, "deepspeed")), "rankmap": str(exported(name, "rankmap"))}
             for name in CASES]
    done = subprocess.run([sys.executable, str(CHECK), json.dumps(cases)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    results = {r["name"]: r for r in (json.loads(line[len("RESULT "):]) for line in done.stdout.splitlines()
                                      if line.startswith("RESULT "))}
    assert sorted(results) == sorted(CASES)
    for name in CASES:
        plan, got = plans(name), results[name]
        s, scenario = plan.strategy, plan.scenario
        world = s.tp * s.pp * s.dp
        # the hostfile: the nodes the plan uses, in its order, their GPUs as slots
        assert sum(slots for _, slots in got["hosts"]) == got["world"] == world, name
        # DeepSpeed's data-parallel size, from the world size through its grid, and its batch arithmetic
        assert got["dp"] == s.dp and got["micro_batch"] == s.micro_batch_size, name
        assert got["train_batch_size"] == scenario.training.global_batch_size == \
            s.micro_batch_size * got["accumulation"] * s.dp, name
        assert got["zero_stage"] == deepspeed_zero_stage(plan) == \
            (resolve(s, scenario.training).zero_stage if s.pp == 1 else min(resolve(s, scenario.training).zero_stage, 1))
        assert (got["fp16"], got["bf16"]) == (scenario.training.precision == "fp16",
                                              scenario.training.precision in ("bf16", "fp8", "fp4")), name
        # every stage builds the plan's layers
        bounds = stage_bounds(plan)
        if s.pp > 1:
            assert [(stage, start, stop) for _, stage, start, stop in got["stages"]] == \
                [(k, bounds[k], bounds[k + 1]) for k in range(s.pp)], name
        else:
            assert got["stages"] == []
