"""Lower bounds that let the search prune exactly: on a candidate's iteration time and memory
(floors.py), on every node order of a family at once (order_floors.py), and on any strategy on a
part of the cluster (part_bounds.py).
"""
