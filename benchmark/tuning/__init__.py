"""Equal-budget hyper-parameter tuning per loss on class-disjoint folds (`circlebench tune`).

`space` reads a loss's search space, `experiment` what a study tunes and its budget,
`objective` runs one trial on every fold, `study` keeps Optuna studies that survive killed
workers, `tuned` writes the best setting and the study's summary, `command` is the CLI.
"""
