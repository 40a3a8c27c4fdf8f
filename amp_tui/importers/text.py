"""Reading a tool's output: bounded, UTF-8, escape codes stripped, and which tool printed it."""

from __future__ import annotations

import re
from pathlib import Path

from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.yamlio import read_text_file

# The largest real input is `scontrol show node` of a big cluster: about 1.2 KB per node, so
# 16 MiB holds some 13,000 nodes.
MAX_INPUT_BYTES = 16 * 2**20
_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")    # terminal colours and underlines (topo -m's header)

SCONTROL, SINFO, TOPOLOGY, GPU_QUERY = "scontrol", "sinfo", "topology", "gpu-query"
CELL = re.compile(r"X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC")    # a cell of topo -m's matrix
KINDS = {SCONTROL: "scontrol show node", SINFO: 'sinfo -N -o "%N %P %G %f"', TOPOLOGY: "nvidia-smi topo -m",
         GPU_QUERY: "nvidia-smi --query-gpu=name,memory.total --format=csv"}


def read_input(path: str | Path) -> str:
    """A tool's output saved to a file: text, at most MAX_INPUT_BYTES, without escape codes."""
    text = read_text_file(Path(path), field=str(path), limit=MAX_INPUT_BYTES)
    return clean(text)


def clean(text: str) -> str:
    return _ESCAPE.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))


def kind_of(text: str, source: str) -> str:
    """Which tool printed `text` (one of KINDS); foreign text is refused in one line."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise SpecError(source, "empty", f"holds nothing; expected the output of {_expected()}")
    if any(re.match(r"\s*NodeName=\S", line) for line in lines):
        return SCONTROL
    for line in lines[:5]:
        words = line.split()
        if ("NODELIST" in words or "HOSTNAMES" in words) and "GRES" in words:
            return SINFO
        if words[:1] == ["GPU0"] and len(words) > 1 and not CELL.fullmatch(words[1]):
            return TOPOLOGY       # the header line: GPU0 GPU1 ... (a row reads GPU0 X NV12 ...)
        if re.match(r"\s*name\s*,\s*memory\.total", line):
            return GPU_QUERY
    if all(re.match(r"[^,]+,\s*\d+(?:\s*MiB)?\s*$", line) for line in lines):
        return GPU_QUERY          # --format=csv,noheader
    first = lines[0].strip()
    raise SpecError(source, first[:60], f"not the output of {_expected()}")


def _expected() -> str:
    return ", ".join(KINDS.values())
