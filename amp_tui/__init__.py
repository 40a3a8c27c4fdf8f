"""amp-tui: plan model-parallel training strategies for heterogeneous GPU clusters.

May import: amp_tui.cli (only __main__.py, the `python -m amp_tui` entry point)
"""

__version__ = "0.1.0"
