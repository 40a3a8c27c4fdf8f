"""Serve mode: place an LLM for serving on a heterogeneous cluster by max flow (Helix, ASPLOS 2025).

A sibling of training, not a branch of it: it shares the core's units, hardware, model and
scenario parsing, and the training core never imports it. Pure like amp_tui.core: nothing here
imports textual or rich.

May import: amp_tui, amp_tui.core.base, amp_tui.core.spec
"""
