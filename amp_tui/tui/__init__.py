"""The Textual dashboard: a thin front end over amp_tui.core and amp_tui.serving (see app.py).

May import: amp_tui, amp_tui.core, amp_tui.serving
"""
