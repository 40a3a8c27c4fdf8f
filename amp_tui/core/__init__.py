"""The planning core: specs, presets, cost and memory model, search, plan files, exports.

Nothing in this package imports Textual or Rich (tests/test_core_purity.py enforces it).
"""
