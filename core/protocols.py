"""The two retrieval protocols a dataset declares and the evaluator applies.

`same_set` (CUB, Cars, SOP): every item queries all the others. `query_gallery` (Market-1501,
MSMT17): separate query and gallery sets, with junk gallery items and same-camera exclusions
(`benchmark.evaluation.sets` applies the rules).
"""

from __future__ import annotations

from typing import Literal

RetrievalProtocol = Literal["same_set", "query_gallery"]
PROTOCOLS: tuple[RetrievalProtocol, ...] = ("same_set", "query_gallery")
