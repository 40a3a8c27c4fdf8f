"""`amp-tui profile`: measure the user's own GPU and software, as AMP does, and plan from it.

Times each distinct layer of a scenario's model on the local GPU (measure.py: shapes.py says which
layers and shapes, torch_layers.py builds them in plain PyTorch, hf_layers.py with Hugging Face's
code, backend.py holds the device and the clock), writing a profile file (core/spec/profiles.py reads
it); and runs whole training iterations on one GPU (iterations.py), writing a measurements file that
`amp-tui calibrate` fits to. PyTorch is an optional extra (`amp-tui[profile]`), imported only when a
measurement starts; nothing here imports Textual.

May import: amp_tui.core.base, amp_tui.core.spec, amp_tui.core.calibration
"""
