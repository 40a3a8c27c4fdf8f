"""Cost and memory terms as pure functions of plain numbers, each checked by hand in its tests;
core/cost.py and core/memory.py compose them."""
