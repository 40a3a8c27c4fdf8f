"""One widget per file; each pane is a view of the app's scenario or search result."""
