"""amp-tui: plan model-parallel training strategies for heterogeneous GPU clusters."""

__version__ = "0.1.0"
