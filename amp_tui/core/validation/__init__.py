"""`amp-tui validate`: the cost model replayed against published measured runs, and the error
bands that follow from it (issue 10, sections 2 and 4)."""
