"""Run by test_megatron_engine.py in a subprocess: Megatron's own code on each case's megatron_args.sh.

argv[1] is a JSON list of {"name", "megatron": folder, "rankmap": folder}; argv[2], where given, is a
Megatron-LM checkout (its megatron/training is not on PyPI). For each case:
- bash sources megatron_args.sh, which gives the MEGATRON_ARGS words and the environment it exports;
- Megatron-Core's RankGenerator (the order parallel_state uses, tp-cp-ep-dp-pp) places every rank of
  the rank map at the stage, data-parallel replica and tensor rank the rank map says, with dp derived
  from the world size as Megatron does;
- with Megatron-LM: its parse_args reads the words as pretrain_gpt.py would, validate_args checks
  them at the plan's world size, and core_transformer_config_from_args builds the TransformerConfig
  (Megatron-Core's own checks: pipeline split, GQA groups, recomputation, MoE); the layout flag goes
  through PipelineParallelLayerLayout there.
Prints one JSON line per case with what Megatron derived.
"""

import json
import os
import subprocess
import sys
import types


def words_and_environment(folder: str) -> tuple[list[str], dict]:
    script = ('source "$1"; printf "%s\\0" "${CUDA_DEVICE_MAX_CONNECTIONS-unset}" "${MEGATRON_ARGS[@]}"')
    done = subprocess.run(["bash", "-c", script, "bash", os.path.join(folder, "megatron_args.sh")],
                          capture_output=True, text=True, check=True, env={"PATH": os.environ.get("PATH", "")})
    values = done.stdout.split("\0")[:-1]
    return values[1:], {"CUDA_DEVICE_MAX_CONNECTIONS": values[0]}


def option(words: list[str], flag: str, default=None):
    return words[words.index(flag) + 1] if flag in words else default


def rank_order(words: list[str], rankmap: dict) -> dict:
    from megatron.core.parallel_state import RankGenerator

    world = rankmap["world_size"]
    tp = int(option(words, "--tensor-model-parallel-size", 1))
    pp = int(option(words, "--pipeline-model-parallel-size", 1))
    cp = int(option(words, "--context-parallel-size", 1))
    dp = world // (tp * pp * cp)
    generator = RankGenerator(tp=tp, ep=1, dp=dp, pp=pp, cp=cp, order="tp-cp-ep-dp-pp")
    where = {}
    for kind in ("tp", "dp", "pp"):
        for group in generator.get_ranks(kind):
            for index, rank in enumerate(group):
                where.setdefault(rank, {})[kind] = index
    for row in rankmap["ranks"]:
        got = where[row["rank"]]
        assert (got["pp"], got["dp"], got["tp"]) == (row["stage"], row["dp_replica"], row["tp_rank"]), (row, got)
    return {"dp": dp, "world": generator.world_size}


def megatron_lm(checkout: str):
    """Megatron-LM's argument module, imported without its package __init__ (which starts CUDA and
    Triton kernels): megatron.training becomes a plain namespace over the checkout's folder."""
    sys.path.insert(0, checkout)
    package = types.ModuleType("megatron.training")
    package.__path__ = [os.path.join(checkout, "megatron", "training")]
    sys.modules["megatron.training"] = package
    import megatron.training.global_vars as global_vars
    for name in dir(global_vars):
        if name.startswith("get_"):
            setattr(package, name, getattr(global_vars, name))
    import megatron.training.arguments as arguments
    # validate_args asks CUDA for the GPU's architecture (to decide whether CUDA_DEVICE_MAX_CONNECTIONS
    # must be 1): answer for a GPU before Blackwell, where the rule applies.
    arguments.get_device_arch_version = lambda: 9
    return arguments


def parse_and_validate(arguments, words: list[str], environment: dict, world: int) -> dict:
    os.environ.update(WORLD_SIZE=str(world), RANK="0", LOCAL_RANK="0")
    os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
    if environment["CUDA_DEVICE_MAX_CONNECTIONS"] != "unset":
        os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = environment["CUDA_DEVICE_MAX_CONNECTIONS"]
    # Rope fusion (Megatron's default with rope) is a Transformer Engine kernel, and Transformer
    # Engine needs CUDA to install: this CPU check turns the kernel off, which changes no setting
    # of the plan.
    sys.argv = ["pretrain_gpt.py", *words, *(["--no-rope-fusion"] if "rope" in words else [])]
    args = arguments.parse_args()
    arguments.validate_args(args, {})
    out = {"dp": args.data_parallel_size, "tp": args.tensor_model_parallel_size,
           "pp": args.pipeline_model_parallel_size, "micro_batch": args.micro_batch_size,
           "global_batch": args.global_batch_size, "num_layers": args.num_layers}
    if args.num_layers is not None:
        config = arguments.core_transformer_config_from_args(args)
        layout = config.pipeline_model_parallel_layout
        if layout is not None:
            from megatron.core.transformer.enums import LayerType
            out["blocks_per_stage"] = [sum(chunk.count(LayerType.decoder) for chunk in layout.layout[rank])
                                       for rank in range(args.pipeline_model_parallel_size)]
        else:
            out["first"] = config.num_layers_in_first_pipeline_stage
            out["last"] = config.num_layers_in_last_pipeline_stage
    return out


def main() -> None:
    cases = json.loads(sys.argv[1])
    arguments = megatron_lm(sys.argv[2]) if len(sys.argv) > 2 else None
    for case in cases:
        rankmap = json.load(open(os.path.join(case["rankmap"], "rankmap.json")))
        words, environment = words_and_environment(case["megatron"])
        try:
            result = {"name": case["name"], "words": words, "environment": environment,
                      **rank_order(words, rankmap)}
            if arguments is not None:
                result["megatron_lm"] = parse_and_validate(arguments, words, environment, rankmap["world_size"])
        except (AssertionError, ValueError, RuntimeError, SystemExit) as error:
            result = {"name": case["name"], "words": words, "refused": f"{type(error).__name__}: {error}"}
        print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
