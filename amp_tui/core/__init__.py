"""The planning core: everything that plans, and nothing of the terminal.

A plan passes through four stages, each a package that imports only the ones before it:

  base/         errors, units, input limits, YAML in and out, atomic writes
  spec/         reading a scenario: hardware, model, training, strategy; presets; parameters
  costmodel/    pricing a strategy: layer times, layouts, memory, the terms of the iteration time
  search/       searching: candidates, bounds, the exact partition, idle nodes, evaluate
  calibration/  fitting the cost model's parameters to runs a user measured
  validation/   replaying published measured runs; error bands
  plans/        turning results into plan files, comparisons, what-ifs and engine exports

Nothing in this package imports Textual or Rich (tests/core/test_core_import_purity.py), and no
package imports a later one or forms a cycle (tests/test_layering.py, which reads the "May import"
line of each package's docstring).

May import: amp_tui
"""
