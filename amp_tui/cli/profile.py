"""`amp-tui profile`: time a scenario's layers on this machine's GPU and write a profile file
(and, with --iterations, whole training iterations for `amp-tui calibrate`).

The work is in amp_tui.profiling (PyTorch, an optional extra: amp-tui[profile]).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from amp_tui.cli.parser import whole_number
from amp_tui.core.base.errors import SpecError

CPU_TOKENS = 32     # a CPU proves the code path: a few tokens keep a GPT-2 medium profile well under a minute
HELP = "measure a scenario's layers on this machine's GPU (needs amp-tui[profile]) and write a profile file"
EPILOG = """\
examples:
  amp-tui profile my.yaml                          every layer at tp 1,2,4,8 x micro-batch 1,2,4,8 on the GPU
  amp-tui profile llama3-8b --tp 1,2 -o h200.yaml  a model preset alone (bf16)
  amp-tui profile my.yaml --iterations             also run whole iterations: then `amp-tui calibrate`
  amp-tui profile gpt2-medium --device cpu --tp 1,2 --micro-batch 1,2    prove the code path without a GPU
  torchrun --nnodes 2 --nproc-per-node 8 ... -m amp_tui profile --network -o net.yaml   the cluster's links

then name the profile beside the model:   model: {preset: llama3-8b, profile: h200.yaml}
and the network profile in the cluster:   cluster: {nodes: [...], network: net.yaml}
"""


def _degrees(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of whole numbers") from None
    if not values or any(v < 1 or v > 1024 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: expected whole numbers from 1 to 1024, e.g. 1,2,4")
    return sorted(set(values))


def _count(low: int, high: int):
    def parse(text: str) -> int:
        value = whole_number(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not between {low} and {high}")
        return value
    return parse


def add_parser(sub) -> None:
    pr = sub.add_parser("profile", help=HELP, description=HELP + ".", epilog=EPILOG,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    pr.add_argument("scenario", nargs="?", metavar="SCENARIO",
                    help="scenario preset or file, or a model preset (with --network: optional, a scenario whose "
                         "node groups the profile should cover)")
    pr.add_argument("-o", "--output", metavar="PROFILE.yaml",
                    help="where to write the profile (default: the path the scenario's model.profile names, "
                         "else MODEL-GPU.profile.yaml)")
    pr.add_argument("--gpu", metavar="NAME", help="the catalog GPU the times are for (default: this GPU's "
                                                  "catalog name; on the CPU: any GPU type)")
    pr.add_argument("--tp", type=_degrees, default=[1, 2, 4, 8], metavar="1,2,4,8",
                    help="tensor-parallel degrees: each layer is timed at each one's shard shape")
    pr.add_argument("--micro-batch", type=_degrees, default=[1, 2, 4, 8], metavar="1,2,4,8",
                    help="micro-batch sizes to time")
    pr.add_argument("--device", choices=("cuda", "cpu"), default=None,
                    help="cuda (default) or cpu: the CPU runs the same code at a few tokens, labelled as a CPU's")
    pr.add_argument("--hf", action="store_true",
                    help="time Hugging Face transformers' block of the family instead of plain PyTorch")
    pr.add_argument("--sequence-length", type=_count(1, 1_048_576), metavar="N",
                    help=f"tokens per sample (default: the model's; on the CPU at most {CPU_TOKENS})")
    pr.add_argument("--warmups", type=_count(0, 100), metavar="N", help="untimed runs first (default 3; CPU 1)")
    pr.add_argument("--repeats", type=_count(1, 1000), metavar="N",
                    help="timed runs, the median kept (default 10; CPU 3)")
    pr.add_argument("--iterations", action="store_true",
                    help="also run whole training iterations (tp = pp = dp = 1, each micro-batch size, with and "
                         "without recomputation) and write a measurements file for `amp-tui calibrate`")
    pr.add_argument("--measurements", metavar="FILE",
                    help="where --iterations writes (default: MODEL-GPU.iterations.yaml beside the profile)")
    pr.add_argument("--no-optimizer", action="store_true", help="skip timing one optimizer step")
    network = pr.add_argument_group("measuring the network (--network, under torchrun: one process per GPU)")
    network.add_argument("--network", action="store_true",
                         help="measure the links between GPUs and nodes (NCCL; gloo with --device cpu) and write "
                              "a network profile the cluster names (cluster: {..., network: FILE})")
    network.add_argument("--ranks-per-node", type=_count(1, 1024), metavar="N",
                         help="treat every N consecutive processes as a node (a test of the code path on one host)")
    network.add_argument("--timeout", type=_count(10, 3600), default=300, metavar="S",
                         help="seconds a process waits for the others before it gives up (default 300)")


def run(args) -> int:
    if args.network:
        from amp_tui.cli.cluster.network import run_network

        return run_network(args)
    if args.scenario is None:
        raise SpecError("SCENARIO", None, "required: a scenario or model preset to profile (or --network)")
    from amp_tui import __version__
    from amp_tui.core.base.atomic import atomic_write
    from amp_tui.core.base.units import format_seconds
    from amp_tui.core.spec.hardware import gpu_catalog
    from amp_tui.core.spec.layers import ANY_GPU
    from amp_tui.profiling.backend import catalog_gpu, open_device
    from amp_tui.profiling.measure import profile_model
    from amp_tui.profiling.target import resolve_target

    target = resolve_target(args.scenario)
    if args.gpu is not None and args.gpu not in gpu_catalog():
        raise SpecError("--gpu", args.gpu, "not a catalog GPU (see presets/gpus.yaml: e.g. H100, H200, A100-80GB)")
    if args.iterations and target.scenario is None:
        raise SpecError("--iterations", args.scenario, "needs a scenario (its global batch and precision), "
                                                       "not a model preset alone")
    cpu = args.device == "cpu"
    device = open_device(args.device, target.precision, args.warmups if args.warmups is not None else (1 if cpu else 3),
                         args.repeats if args.repeats is not None else (3 if cpu else 10))
    gpu = args.gpu or (ANY_GPU if cpu else catalog_gpu(device.name))
    if gpu is None:
        raise SpecError("--gpu", None, f"this GPU ({device.name}) is not in the catalog by name: "
                                       "say which catalog GPU it is with --gpu NAME")
    if target.scenario is not None and gpu != ANY_GPU and gpu not in target.gpu_names:
        print(f"amp-tui: note: {gpu} is not in {target.scenario.name}'s cluster "
              f"({', '.join(target.gpu_names)}): plan with a cluster that has it", file=sys.stderr)
    model = target.model
    sequence = args.sequence_length or (min(model.sequence_length, CPU_TOKENS) if cpu else model.sequence_length)
    output = Path(args.output) if args.output else (target.named_profile or
                                                    Path(f"{model.name}-{'cpu' if cpu else gpu}.profile.yaml"))
    if output.is_dir():
        raise SpecError("-o", output, "is a folder; give a file name")
    ep = target.scenario.training.expert_parallel if target.scenario is not None and \
        isinstance(getattr(target.scenario.training, "expert_parallel", None), int) else 1
    timed = "fp32" if device.dtype is None else target.precision
    stand_in = f" standing in for {target.precision}" if timed != target.precision else ""
    print(f"profiling {model.name} on {device.name} ({timed}{stand_in}, "
          f"{sequence} tokens; tp {','.join(map(str, args.tp))}; micro-batch {','.join(map(str, args.micro_batch))}; "
          f"{device.clock}, median of {device.repeats} after {device.warmups} warm-ups); ctrl+c stops and keeps "
          "what was measured", file=sys.stderr)
    began = time.perf_counter()
    result = profile_model(model, device, gpu=gpu, precision=target.precision, sequence=sequence, tps=args.tp,
                           micro_batches=args.micro_batch, ep=ep, hf=args.hf, optimizer=not args.no_optimizer,
                           on_progress=_show_progress, tool_version=__version__)
    for name, why in result.skipped:
        print(f"  not timed: {name}: {why}", file=sys.stderr)
    if result.profile is None:
        raise SpecError("profile", model.name, "nothing was measured" + (" (stopped)" if result.interrupted else ""))
    written = atomic_write(output, result.profile.to_yaml(), field="-o")
    measured = ", ".join(layer.name for layer in result.profile.layers)
    print(f"wrote {written}: {result.profile.num_rows} shapes of {measured} in "
          f"{format_seconds(time.perf_counter() - began)}" + (" (stopped early: incomplete)" if result.interrupted else ""))
    print(f"  use it: add `profile: {written}` to the scenario's model section (e.g. model: {{preset: NAME, "
          f"profile: {written.name}}}, a path relative to the scenario file)")
    if cpu:
        print("  measured on the CPU: it proves the code path; plan with a GPU's profile for real predictions")
    if result.interrupted:
        return 130
    if args.iterations:
        return _iterations(args, target, device, sequence, written, gpu)
    return 0


def _bar(done: int, total: int, width: int = 20) -> str:
    filled = round(width * done / total) if total else width
    return "#" * filled + "-" * (width - filled)


def _show_progress(p) -> None:
    from amp_tui.core.base.units import format_bytes, format_seconds

    times = f"fwd {format_seconds(p.row.forward_s)}  fwd+bwd {format_seconds(p.row.forward_backward_s)}" \
        if p.row else p.note
    peak = f"  peak {format_bytes(p.row.peak_memory_bytes)}" if p.row and p.row.peak_memory_bytes else ""
    left = f"  ~{format_seconds(p.left_s)} left" if p.left_s is not None and p.done < p.total else ""
    print(f"  [{p.done:>3}/{p.total}] |{_bar(p.done, p.total)}| {p.shape.name} tp {p.tp} mb {p.micro_batch}: "
          f"{times}{peak}{left}", file=sys.stderr, flush=True)


def _iterations(args, target, device, sequence: int, profile_path: Path, gpu: str) -> int:
    from amp_tui.core.base.atomic import atomic_write
    from amp_tui.core.base.units import format_seconds
    from amp_tui.profiling.iterations import iterations_yaml, run_iterations

    scenario = target.scenario
    path = Path(args.measurements) if args.measurements else \
        profile_path.with_name(f"{scenario.model.name}-{'cpu' if device.kind == 'cpu' else gpu}.iterations.yaml")
    print(f"whole iterations of {scenario.model.name}, global batch {scenario.training.global_batch_size}, "
          "tp = pp = dp = 1:", file=sys.stderr)

    def show(m) -> None:
        what = "out of memory" if m.out_of_memory else format_seconds(m.iteration_time_s)
        print(f"  micro-batch {m.strategy.micro_batch_size}, recompute {m.strategy.recompute}: {what}",
              file=sys.stderr, flush=True)

    measured = []
    try:
        run_iterations(scenario, device, args.micro_batch, sequence=sequence, on_result=lambda m: (measured.append(m),
                                                                                                   show(m)))
    except KeyboardInterrupt:
        if not measured:
            raise
    if not measured:
        raise SpecError("--micro-batch", ",".join(map(str, args.micro_batch)),
                        f"none divides the global batch ({scenario.training.global_batch_size})")
    written = atomic_write(path, iterations_yaml(measured, scenario, device, 3), field="--measurements")
    print(f"wrote {written}: {len(measured)} measured iterations; fit them with "
          f"`amp-tui calibrate {args.scenario} {written} -o calibrated.yaml`")
    return 0
