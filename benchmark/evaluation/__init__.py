"""Exact retrieval evaluation: `RetrievalEvaluator` and the metric registry.

`evaluator` holds the evaluator, `metrics` what each metric is and how it is computed, `sets`
the checked inputs, `ranks` the positions of the positives, `similarity` the exact reference
similarity, `rerank` k-reciprocal re-ranking (with `_neighbours`, its exact neighbour lists);
`_scan`, `_dots` and `_kreciprocal` are the compiled kernels.
"""

from benchmark.evaluation.evaluator import RetrievalEvaluator

__all__ = ["RetrievalEvaluator"]
