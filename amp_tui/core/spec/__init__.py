"""Reading a scenario: what the user describes, validated once at the edge into frozen specs.

GPUs and node types (hardware.py), layers and models (layers.py, model.py, families.py), the
training section and the scenario (scenario.py), the cost model's named parameters and a
calibration (params.py), presets (presets.py), a strategy (strategy.py, chunks.py), the techniques
it resolves to (knobs.py) and whether it can run on a scenario (validity.py).

May import: amp_tui.core.base
"""
