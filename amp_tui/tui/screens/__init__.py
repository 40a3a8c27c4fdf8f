"""Modal screens: value editor, pickers, save and export dialogs, help."""
