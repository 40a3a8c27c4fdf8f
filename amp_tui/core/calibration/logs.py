"""Training logs as the engines print them: the time per iteration, peak memory, and what the run was.

Each reader takes the lines its engine prints (checked against the engines' source):

  Megatron-LM  megatron/training/training.py, training_log(), on the last pipeline rank:
               ` [2025-08-01 07:19:37] iteration      100/   5000 | consumed samples: ... | elapsed time
               per iteration (ms): 12936.1 | ... | global batch size:   128 | lm loss: ... |` (the time
               is the mean over the log interval); utils report_memory(), on each data-parallel rank 0:
               `[Rank 3] (after 10 iterations) memory (MB) | allocated: ... | max allocated: ... |
               reserved: ... | max reserved: ...`; arguments.py: `using world size: 16, data-parallel
               size: 4, context-parallel size: 1, ... tensor-model-parallel size: 2,
               pipeline-model-parallel size: 2` and the argument list (`  micro_batch_size ..... 1`).
  torchtitan   torchtitan/components/metrics.py, MetricsProcessor.log(): `step: 10  loss:  7.1234
               grad_norm:  1.2345  memory: 42.14GiB(44.36%)  tps: 3,456  tflops: 156.78  mfu: 15.85%`
               (in terminal colours unless disabled); tps is tokens per second per GPU, so an
               iteration takes tokens per step / (tps x GPUs); memory is the logging rank's peak
               reserved since the last line. parallel_dims.py: `Building device mesh with parallelism:
               pp=2, dp_replicate=1, dp_shard=4, cp=1, tp=2, ep=1` (older: `Building 3-D device mesh
               with ['pp', 'dp_shard', 'tp'], [2, 4, 2]`); trainer.py: `... N tokens per train step`
               (older: `Training starts at step 1, with local batch size 8, global batch size 64,
               sequence length 2048`).
  DeepSpeed    runtime/pipe/engine.py, train_batch(): `steps: 20 loss: 2.3456 iter time (s): 1.234
               samples/sec: 51.864`; utils/timer.py, ThroughputTimer (other engines):
               `epoch=0/micro_step=80/global_step=20, RunningAvgSamplesPerSec=..., CurrSamplesPerSec=
               51.86, MemAllocated=21.3GB, MaxMemAllocated=30.1GB` (an iteration: train_batch_size /
               CurrSamplesPerSec); config.py print(): `  train_batch_size ........ 64`, `world_size`
               (the data-parallel size), `train_micro_batch_size_per_gpu`.
  plain PyTorch any line naming its step and a time with a unit, as nanoGPT's train.py prints:
               `iter 10: loss 3.2101, time 123.45ms, mfu 30.00%` (also `step 10 ... step_time=0.52 s`).

Input is bounded (MAX_LOG_BYTES); terminal colours are stripped; a last line without its line
end and incomplete (the file was cut while written) is left out and said.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.yamlio import read_text_file

MAX_LOG_BYTES = 256 * 2**20        # a long run's log at every iteration stays far below
MAX_RECORDS = 1_000_000
ENGINES = ("megatron", "torchtitan", "deepspeed", "pytorch")
ENGINE_NAMES = {"megatron": "Megatron-LM", "torchtitan": "torchtitan", "deepspeed": "DeepSpeed",
                "pytorch": "plain PyTorch"}
_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"

MEGATRON = re.compile(r"\biteration\s+(\d+)\s*/\s*\d+\s*\|.*?\belapsed time per iteration \(ms\):\s*(" + _NUMBER
                      + r")\s*\|")
MEGATRON_BATCH = re.compile(r"\bglobal batch size:\s*(\d+)\s*\|")
MEGATRON_MEMORY = re.compile(r"\[Rank (\d+)\] \(after \d+ iterations\) memory \(MB\) \| allocated: " + _NUMBER
                             + r" \| max allocated: " + _NUMBER + r" \| reserved: " + _NUMBER + r" \| max reserved: ("
                             + _NUMBER + ")")
# `using world size: 16, data-parallel size: 8, context-parallel size: 1, ...` (older versions:
# `data-parallel-size: 8`, no context parallelism): each size read on its own.
MEGATRON_SIZES = re.compile(r"\b(world|data-parallel|context-parallel|tensor-model-parallel|pipeline-model-parallel)"
                            r"[ -]size: (\d+)")
ARGUMENT = re.compile(r"(?:^|\]\s)\s*(\w+) \.*\s*(\S+)\s*$")
TITAN = re.compile(r"(?<!validate )\bstep:\s*(\d+)\s+loss:\s*\S+\s+(?:grad_norm:\s*\S+\s+)?memory:\s*(" + _NUMBER
                   + r")GiB\(\s*" + _NUMBER + r"%\)\s+(?:tps|wps):\s*([\d,]+)\s+(?:tflops:\s*[\d,.]+\s+)?mfu:\s*\S+")
TITAN_MESH = re.compile(r"Building device mesh with parallelism: pp=(\d+), dp_replicate=(\d+), dp_shard=(-?\d+), "
                        r"cp=(\d+), tp=(\d+)")
TITAN_OLD_MESH = re.compile(r"Building \d+-D device mesh with \[([^\]]*)\], \[([\d, ]*)\]")
TITAN_TOKENS = re.compile(r"(\d+) tokens per train step")
TITAN_OLD_BATCH = re.compile(r"global batch size (\d+), sequence length (\d+)")
SPEED_PIPE = re.compile(r"\bsteps: (\d+) loss: \S+ (?:\S+: \S+ )*iter time \(s\): (" + _NUMBER + r") samples/sec: ("
                        + _NUMBER + ")")
SPEED_TIMER = re.compile(r"global_step=(\d+), RunningAvgSamplesPerSec=\S+, CurrSamplesPerSec=(" + _NUMBER
                         + r"), MemAllocated=" + _NUMBER + r"GB, MaxMemAllocated=(" + _NUMBER + r")GB")
PLAIN = re.compile(r"(?i)(?:^|[^\w])(?:iter|iteration|step)\s*[:=#]?\s*(\d+)\b.*?\b(?:time|dt|step_time|iter_time)"
                   r"\s*[:=]?\s*(" + _NUMBER + r")\s*(ms|s)\b")
PLAIN_WORLD = re.compile(r"(?i)\bworld[ _]size\s*[:=]?\s*(\d+)")


@dataclass(frozen=True)
class Record:
    """One logged line: the step it ends at and the seconds per iteration it reports (torchtitan
    reports tokens per second per GPU instead: log_runs.py turns them into seconds)."""

    step: int
    seconds: float | None = None
    tokens_per_s: float | None = None      # per GPU (torchtitan's tps)
    peak_bytes: float | None = None        # the logging rank's peak since the last line (torchtitan)


@dataclass(frozen=True)
class EngineLog:
    engine: str
    source: str
    records: tuple[Record, ...]
    stated: dict = field(default_factory=dict, hash=False)   # what the run says it was (tp, pp, dp, cp,
    # world_size, micro_batch_size, global_batch_size, seq_length, tokens_per_step); only what it prints
    peak_memory_bytes: float | None = None     # the fullest GPU's, where every rank's is printed
    memory_note: str = ""                       # where memory is printed but not a fullest GPU's peak
    cut_short: bool = False                     # its last line was cut while written (and left out)


def read_log(path: str | Path, engine: str | None = None) -> EngineLog:
    """The training log at `path`: its engine's iteration lines and what it says of the run."""
    source = Path(path).name
    text = read_text_file(Path(path), field=str(path), limit=MAX_LOG_BYTES)
    return parse_log(text, source, engine)


def parse_log(text: str, source: str, engine: str | None = None) -> EngineLog:
    text = _ESCAPE.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))
    lines = text.split("\n")
    cut_short = False
    if lines and lines[-1] == "":
        lines.pop()
    elif lines:              # no line end after the last line: it was being written when the file was copied
        cut_short = True
    if engine is not None and engine not in ENGINES:
        raise SpecError("--engine", engine, f"expected one of {', '.join(ENGINES)}")
    readers = {"megatron": _megatron, "torchtitan": _torchtitan, "deepspeed": _deepspeed, "pytorch": _plain}
    for name in ([engine] if engine else ENGINES):
        found = readers[name](lines, source, cut_short)
        if found is not None:
            return found
    what = ENGINE_NAMES[engine] if engine else "Megatron-LM, torchtitan, DeepSpeed or plain PyTorch"
    raise SpecError(source, f"{len(lines)} lines", f"no iteration line of {what} in it (Megatron-LM: 'iteration N/M "
                                                   "| ... | elapsed time per iteration (ms): X |'; torchtitan: 'step: "
                                                   "N  loss: ...  tps: ...'): is it the training log?")


def _complete(lines: list[str], pattern: re.Pattern, cut_short: bool) -> tuple[list[tuple[int, re.Match]], bool]:
    """(line number, match) of every line matching `pattern`, and whether the last line, written
    without its line end, was cut short of a whole match (it is then left out)."""
    found = []
    for number, line in enumerate(lines):
        match = pattern.search(line)
        if match:
            found.append((number, match))
            if len(found) > MAX_RECORDS:
                raise SpecError("log", f"{len(found):,} iteration lines", f"more than {MAX_RECORDS:,}")
    return found, cut_short and not (found and found[-1][0] == len(lines) - 1)


def _arguments(lines: list[str], names: dict[str, str]) -> dict:
    """Values of an engine's printed argument list (`  name ....... value`) under our names."""
    out = {}
    for line in lines:
        match = ARGUMENT.search(line)
        if match and match.group(1) in names and re.fullmatch(r"\d+", match.group(2)):
            out.setdefault(names[match.group(1)], int(match.group(2)))
    return out


def _megatron(lines, source, cut_short) -> EngineLog | None:
    found, cut = _complete(lines, MEGATRON, cut_short)
    if not found:
        return None
    stated = _arguments(lines, {"micro_batch_size": "micro_batch_size", "global_batch_size": "global_batch_size",
                                "seq_length": "seq_length", "tensor_model_parallel_size": "tp",
                                "pipeline_model_parallel_size": "pp", "data_parallel_size": "dp",
                                "context_parallel_size": "cp", "world_size": "world_size"})
    keys = {"world": "world_size", "data-parallel": "dp", "context-parallel": "cp", "tensor-model-parallel": "tp",
            "pipeline-model-parallel": "pp"}
    for line in lines:
        if "using world size:" in line:
            stated.update({keys[name]: int(size) for name, size in MEGATRON_SIZES.findall(line)})
            break
    batches = {int(batch.group(1)) for number, _ in found if (batch := MEGATRON_BATCH.search(lines[number]))}
    if len(batches) == 1:
        stated["global_batch_size"] = batches.pop()
    peaks = {}
    for line in lines:
        if (memory := MEGATRON_MEMORY.search(line)):
            rank = int(memory.group(1))
            peaks[rank] = max(peaks.get(rank, 0.0), float(memory.group(2)) * 2**20)
    records = tuple(Record(int(m.group(1)), seconds=float(m.group(2)) / 1e3) for _, m in found)
    return EngineLog("megatron", source, records, stated, max(peaks.values()) if peaks else None,
                     f"max reserved of the {len(peaks)} ranks that report it" if peaks else "", cut)


def _torchtitan(lines, source, cut_short) -> EngineLog | None:
    found, cut = _complete(lines, TITAN, cut_short)
    if not found:
        return None
    stated: dict = {}
    for line in lines:
        if (mesh := TITAN_MESH.search(line)):
            pp, replicate, shard, cp, tp = map(int, mesh.groups())
            stated.update(pp=pp, cp=cp, tp=tp)
            if shard > 0:
                stated["dp"] = replicate * shard
        elif (old := TITAN_OLD_MESH.search(line)):
            names = [n.strip(" '\"") for n in old.group(1).split(",")]
            sizes = [int(s) for s in old.group(2).split(",") if s.strip()]
            degrees = dict(zip(names, sizes))
            stated.update(pp=degrees.get("pp", 1), tp=degrees.get("tp", 1), cp=degrees.get("cp", 1),
                          dp=degrees.get("dp_replicate", 1) * degrees.get("dp_shard", degrees.get("dp", 1)))
        if (tokens := TITAN_TOKENS.search(line)):
            stated["tokens_per_step"] = int(tokens.group(1))
        if (batch := TITAN_OLD_BATCH.search(line)):
            stated.update(global_batch_size=int(batch.group(1)), seq_length=int(batch.group(2)))
    if "tp" in stated and "dp" in stated:
        stated["world_size"] = stated["tp"] * stated["pp"] * stated["dp"] * stated["cp"]
    # The time is tokens per second per GPU: seconds per step follow once the tokens per step and
    # the GPUs are known (stated here, or the plan's): log_runs.py converts.
    records = tuple(Record(int(m.group(1)), tokens_per_s=float(m.group(3).replace(",", "")),
                           peak_bytes=float(m.group(2)) * 2**30) for _, m in found)
    return EngineLog("torchtitan", source, records, stated, None, "the logging rank's (rank 0's) peak reserved", cut)


def _deepspeed(lines, source, cut_short) -> EngineLog | None:
    stated = _arguments(lines, {"train_batch_size": "global_batch_size", "world_size": "dp",
                                "train_micro_batch_size_per_gpu": "micro_batch_size"})
    found, cut = _complete(lines, SPEED_PIPE, cut_short)
    if found:
        return EngineLog("deepspeed", source, tuple(Record(int(m.group(1)), seconds=float(m.group(2)))
                                                    for _, m in found), stated, None, "", cut)
    found, cut = _complete(lines, SPEED_TIMER, cut_short)
    if not found:
        return None
    batch = stated.get("global_batch_size")
    if batch is None:
        raise SpecError(source, "train_batch_size", "the log gives samples per second but not DeepSpeed's config "
                                                    "(its 'train_batch_size ....' line): the time cannot be told")
    records = tuple(Record(int(m.group(1)), seconds=batch / float(m.group(2))) for _, m in found
                    if float(m.group(2)) > 0)
    return EngineLog("deepspeed", source, records, stated, None,
                     "MaxMemAllocated: what tensors held, not what the allocator reserved", cut)


def _plain(lines, source, cut_short) -> EngineLog | None:
    found, cut = _complete(lines, PLAIN, cut_short)
    if not found:
        return None
    stated = {}
    for line in lines:
        if (world := PLAIN_WORLD.search(line)):
            stated["world_size"] = int(world.group(1))
            break
    records = tuple(Record(int(m.group(1)), seconds=float(m.group(2)) / (1e3 if m.group(3).lower() == "ms" else 1.0))
                    for _, m in found)
    return EngineLog("pytorch", source, records, stated, None, "", cut)
