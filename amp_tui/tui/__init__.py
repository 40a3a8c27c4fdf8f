"""The Textual dashboard: a thin front end over amp_tui.core (see app.py)."""
