"""circlebench: the training, evaluation and leaderboard side of the suite."""

import os

# OpenBLAS (numpy's BLAS, the evaluator's float32 products) keeps its threads spinning for 2^28
# cycles after each call, taking the cores from the compiled scans and torch's threads that run
# next; 2^24 still spans the gaps between one evaluation's products (docs/benchmarks/
# evaluation.md). Read when OpenBLAS loads, so only where numpy is not imported yet; a value the
# user set stays.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "24")
