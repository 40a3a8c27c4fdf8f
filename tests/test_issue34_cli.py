"""Issue 34 (every figure says where it comes from) from the command line: one test per item, each
failed before its fix."""

from __future__ import annotations

import pytest

from amp_tui.cli import main
from amp_tui.core.base.yamlio import dump_yaml


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def write(tmp_path, name: str, data: dict):
    path = tmp_path / name
    path.write_text(dump_yaml(data))
    return path


# Major 5 ------------------------------------------------------------------------------------------
def test_major_5_a_context_parallel_degree_that_divides_no_gpu_count_is_named(capsys, tmp_path):
    """Before: "32 GPUs cannot be split as tp x pp x dp with dp dividing the global batch (512) ...
    Try a global batch of 513 or 30 GPUs", which no batch or GPU count of that kind would fix."""
    path = write(tmp_path, "cp5.yaml", {"cluster": {"nodes": [{"instance": "dgx-a100", "count": 4}]},
                                        "model": {"preset": "gpt2-medium"},
                                        "training": {"global_batch_size": 512, "context_parallel": 5}})
    code, out, _ = run(capsys, "plan", path)
    assert code == 1
    line = next(line for line in out.splitlines() if line.startswith("no strategy:"))
    assert "Try a global batch" not in line and "513" not in line
    assert "context_parallel 5 divides no GPU count" in line and "nodes of 8 GPUs" in line
    assert "try context_parallel 2, 4 or 8" in line


def test_major_5_context_parallel_and_the_sequence_length(capsys, tmp_path):
    path = write(tmp_path, "cp3.yaml", {"cluster": {"nodes": [{"instance": "p4d.24xlarge", "count": 3}]},
                                        "model": {"preset": "gpt2-medium"},
                                        "training": {"global_batch_size": 24, "context_parallel": 3}})
    code, out, _ = run(capsys, "plan", path, "--use-all-gpus")
    line = next(line for line in out.splitlines() if line.startswith("no strategy:"))
    assert code == 1 and "2 x context_parallel (6) does not divide the sequence length (1024)" in line
    assert "divides no GPU count" not in line            # (3 divides 24)
