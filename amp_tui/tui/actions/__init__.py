"""The dashboard's actions beyond editing and searching, one mixin of AmpApp per kind (files,
results, views), so that app.py keeps the layout and the flow of state."""
