"""circlebench: the training, evaluation and leaderboard side of the suite."""

import os

# OpenBLAS (numpy's BLAS, the evaluator's float32 products) keeps its threads spinning for
# 2^28 cycles after each call, about 0.1 s: on a 2-core machine they took the cores from the
# compiled scans and torch's threads that run next (Market float32 1.38 s -> 1.29 s, `auto`
# 0.1 s less, measured). 2^24 cycles (~5 ms) still spans the gaps between one evaluation's
# products. Read when OpenBLAS loads, so only where numpy is not imported yet; a value the
# user set stays.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "24")
