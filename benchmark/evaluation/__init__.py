"""Exact retrieval evaluation: `RetrievalEvaluator` and the metric registry.

`evaluator` holds the evaluator, `metrics` what each metric is and how it is computed, `ranks`
the positions of the positives, `similarity` the exact reference similarity, `inputs` the
argument checks; `_scan` and `_dots` are its compiled kernels.
"""

from benchmark.evaluation.evaluator import RetrievalEvaluator

__all__ = ["RetrievalEvaluator"]
