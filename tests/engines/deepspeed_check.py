"""Run by test_deepspeed_engine.py in a subprocess: DeepSpeed's own code on each case's DeepSpeed export.

argv[1] is a JSON list of {"name", "deepspeed": folder, "rankmap": folder}. For each case, on torch's
"fake" process group (one process standing in for every rank of the plan's world, no communication):
- the launcher's hostfile parser reads `hostfile`;
- PipeModelDataParallelTopology, built from the export's own degrees, places every rank of the
  rank map at the stage, data-parallel replica and tensor rank the rank map says;
- PipelineParallelGrid (the pipeline engine's model-parallel unit) derives the data-parallel size
  from the world size, and DeepSpeedConfig reads ds_config.json with it, batch assertion included;
- for pp > 1, planned_pipeline.py's PlannedPipelineModule is built on the first rank of every stage
  and holds that stage's layers.
Prints one JSON line per case with what DeepSpeed derived, for the test to compare with the plan.
"""

import contextlib
import io
import json
import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import deepspeed  # noqa: E402
import deepspeed.comm as ds_dist  # noqa: E402
import deepspeed.ops  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from deepspeed.launcher.runner import _parse_hostfile  # noqa: E402
from deepspeed.runtime.config import DeepSpeedConfig  # noqa: E402
from deepspeed.runtime.pipe.topology import PipelineParallelGrid, PipeModelDataParallelTopology  # noqa: E402
from torch.testing._internal.distributed.fake_pg import FakeStore  # noqa: E402

# DeepSpeed's CPU accelerator compiles a shared-memory all-reduce kernel the first time its comm
# backend starts (minutes on 2 cores); nothing here communicates, so it takes the plain torch
# backend, as DeepSpeed does itself where that kernel is not available.
deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


def start(rank: int, world: int, local_rank: int = 0) -> None:
    """This process as `rank` of `world`, with the environment DeepSpeed's launcher sets."""
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(local_rank))
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", rank=rank, world_size=world, store=FakeStore())
    deepspeed.init_distributed(dist_backend="fake", auto_mpi_discovery=False)


def check(case: dict) -> dict:
    folder, rankmap = case["deepspeed"], json.load(open(os.path.join(case["rankmap"], "rankmap.json")))
    world = rankmap["world_size"]
    with open(os.path.join(folder, "hostfile")) as handle:
        hosts = _parse_hostfile(handle.read().splitlines())
    partition = json.load(open(os.path.join(folder, "pipeline_partition.json")))
    topology = PipeModelDataParallelTopology(**partition["topology"])
    assert topology.world_size() == world, (topology.world_size(), world)
    for row in rankmap["ranks"]:
        coord = topology.get_coord(row["rank"])
        assert (coord.pipe, coord.data, coord.model) == (row["stage"], row["dp_replica"], row["tp_rank"]), \
            (row["rank"], coord, row)
    start(0, world)
    with contextlib.redirect_stdout(io.StringIO()):
        grid = PipelineParallelGrid(topology=topology)
    config = DeepSpeedConfig(os.path.join(folder, "ds_config.json"), mpu=grid)
    stages = []
    if os.path.exists(os.path.join(folder, "planned_pipeline.py")):
        sys.path.insert(0, folder)
        sys.modules.pop("planned_pipeline", None)
        from planned_pipeline import PlannedPipelineModule
        sys.path.remove(folder)
        for stage in range(topology.get_dim("pipe")):
            first_rank = min(topology.filter_match(pipe=stage))
            start(first_rank, world, rankmap["ranks"][first_rank]["local_gpu"])
            layers = [torch.nn.Identity() for _ in range(partition["num_layers"])]
            with contextlib.redirect_stdout(io.StringIO()):
                module = PlannedPipelineModule(layers, topology=topology)
            stages.append([first_rank, module.stage_id, module._local_start, module._local_stop])
    return {"name": case["name"], "hosts": list(hosts.items()), "world": world,
            "dp": config.world_size, "train_batch_size": config.train_batch_size,
            "micro_batch": config.train_micro_batch_size_per_gpu,
            "accumulation": config.gradient_accumulation_steps, "zero_stage": config.zero_optimization_stage,
            "fp16": config.float16_config.enabled, "bf16": config.bfloat16_config.enabled, "stages": stages}


def main() -> None:
    for case in json.loads(sys.argv[1]):
        print("RESULT " + json.dumps(check(case)), flush=True)
    print(f"deepspeed {deepspeed.__version__}")


if __name__ == "__main__":
    main()
