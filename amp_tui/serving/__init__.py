"""Serve mode: place an LLM for serving on a heterogeneous cluster by max flow (Helix, ASPLOS 2025).

Pure like amp_tui.core: nothing here imports textual or rich.
"""
