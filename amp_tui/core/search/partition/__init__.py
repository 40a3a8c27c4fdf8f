"""The exact best partition of a candidate's layers into pipeline stages: the walk over Pareto
frontiers (walk.py, whose docstring gives the reasoning), the segment tables it reads (tables.py),
the dynamic programs over them (dp.py), and the memory of a segment (memory.py).
"""
