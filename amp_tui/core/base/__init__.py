"""What every stage stands on: the one error a user sees (errors.py), units and their parsing
(units.py), the limits on input (limits.py), YAML in and out within them (yamlio.py), atomic
writes (atomic.py) and a lock-free cached property (lazy.py).

May import: nothing of amp_tui
"""
