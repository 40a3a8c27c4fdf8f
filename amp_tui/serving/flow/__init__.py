"""The max-flow placement solver (Helix's objective): the configuration LP's bound and the blocks that
attain it. Kept as a bound on tokens/s, a start for the search for what is served, and `serve
--objective flow`."""
