"""The limits amp-tui enforces on its input, in one place (docs/limits.md lists them).

Each limit sits far beyond any real training job, so that a legitimate scenario never meets one,
while every accepted input is planned in seconds and well under 2 GB of memory. Inputs beyond a
limit are refused at the edge with a one-line SpecError naming the field.
"""

from __future__ import annotations

import math
import unicodedata

from amp_tui.core.base.errors import SpecError

# Files. The largest real input, a model with a thousand explicit layers and measured profiles, is
# about 200 KB; reading 2 MiB of YAML takes about two seconds.
MAX_FILE_BYTES = 2 * 2**20
MAX_YAML_DEPTH = 32             # a scenario nests about 8 levels deep
MAX_YAML_NODES = 500_000        # after expanding aliases; a 2 MiB file holds at most about 200,000
# A measured-runs file (`validate --runs`): the published one holds 470 runs in 0.85 MiB.
MAX_RUNS_FILE_BYTES = 64 * 2**20

# Cluster and model. Llama 3 405B trained on 16,384 GPUs with 126 layers; the largest preset has 3,072
# GPUs. Every pipeline depth is searched in bounded memory (segment tables beyond
# partition.MAX_TABLE_CELLS are computed a chunk at a time); the time of such a partition solve
# grows with layers x layers, which bounds the layers.
MAX_GPUS = 131_072
MAX_LAYERS = 2_048              # after repeats
MAX_WHOLE_NUMBER = 2**40        # counts, sizes and batch sizes: exact in a float, products stay finite

MAX_STRATEGIES = 1_000          # in one `evaluate` file; each may need a partition search
MAX_BENCH_RUNS = 100
MAX_TIME_LIMIT_S = 3_600        # `plan --time-limit`: the largest preset is exact in about a minute

# Real-valued figures (bytes, FLOPs, seconds, FLOP/s...). With every input in [MIN, MAX], sums over
# layers and micro-batches and the products the cost model forms (at most three factors) stay far
# from float overflow (1.8e308) and underflow (2.2e-308).
MAX_FIGURE = 1e30
MIN_FIGURE = 1e-30              # the smallest nonzero figure
MIN_BANDWIDTH = 1e3             # bytes/s: 8 kbit/s
MAX_BANDWIDTH = 1e18            # bytes/s: 8 Ebit/s

# Names end up in file headers, shell comments, hostfile comments and plan files.
MAX_NAME_CHARS = 200
MAX_TEXT_CHARS = 2_000          # descriptions



def check_name(value: object, field: str, *, limit: int = MAX_NAME_CHARS, text: bool = False) -> str:
    """A name (or, with `text`, a description): a string of printable characters, not too long.

    Names may not hold line breaks or other control or format characters: they are written into
    comments of generated scripts and files, where a line break would end the comment.
    Descriptions may hold line breaks and tabs, and are never written into generated files.
    """
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise SpecError(field, value, "expected a name (text)" if not text else "expected text")
    value = str(value)
    if len(value) > limit:
        raise SpecError(field, value, f"longer than {limit} characters")
    for char in value:
        if text and char in "\n\t":
            continue
        if unicodedata.category(char) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"):
            raise SpecError(field, value, f"holds the control or unprintable character {char!r}")
    return value


def check_figure(number: float, field: str, shown: object) -> None:
    """A finite figure whose magnitude is zero or within [MIN_FIGURE, MAX_FIGURE]."""
    if not math.isfinite(number) or abs(number) > MAX_FIGURE:
        raise SpecError(field, shown, f"too large (the limit is {MAX_FIGURE:g})")
    if number and abs(number) < MIN_FIGURE:
        raise SpecError(field, shown, f"too small (nonzero figures must be at least {MIN_FIGURE:g})")
