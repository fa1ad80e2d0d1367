"""Every bad input to RetrievalEvaluator is a ValueError that names the argument."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from benchmark.evaluation import RetrievalEvaluator

_SEEDED = torch.Generator().manual_seed(0)  # the same data whatever ran before in the process
Q = torch.randn(6, 4, generator=_SEEDED)
QL = torch.tensor([0, 0, 1, 1, 2, 2])
G = torch.randn(5, 4, generator=_SEEDED)
GL = torch.tensor([0, 1, 2, 0, 1])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"protocol": "gallery"}, "protocol must be"),
        ({"ks": (1, 0)}, "ks must be positive"),
        ({"ks": (1.5,)}, "ks must be positive"),
        ({"ks": 5}, "ks and metrics are sequences"),
        ({"metrics": "mAP"}, "ks and metrics are sequences"),
        ({"metrics": ("recall", "AUC")}, r"metrics: unknown \['AUC'\]"),
        ({"backend": "numpy"}, "backend must be one of"),
        ({"device": "tpu"}, "device must be"),
        ({"chunk_size": 0}, "chunk_size must be"),
    ],
)
def test_constructor_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        RetrievalEvaluator(**{"protocol": "same_set", **kwargs})


def test_numpy_integers_and_reversed_numpy_views_are_accepted() -> None:
    ev = RetrievalEvaluator("same_set", (1, 2), chunk_size=np.int64(4))
    emb, labels = Q.numpy(), QL.numpy()
    # the same per-query values, averaged in another order: equal up to the last bit of a sum
    assert ev.evaluate(emb[::-1], labels[::-1]) == pytest.approx(ev.evaluate(emb, labels))


def test_big_endian_numpy_arrays_are_read_as_their_values() -> None:
    """Arrays saved in the other byte order (`>f4`, `>i8`) give the native arrays' metrics."""
    ev = RetrievalEvaluator("same_set", (1, 2))
    emb, labels = Q.numpy(), QL.numpy()
    swapped = ev.evaluate(emb.astype(">f4"), labels.astype(">i8"))
    assert swapped == ev.evaluate(emb, labels)


def nan_row() -> torch.Tensor:
    q = Q.clone()
    q[3, 1] = torch.nan
    return q


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((Q[:, :, None], QL), r"query_emb must be 2-D"),
        ((Q[:0], QL[:0]), "query_emb is empty"),
        ((Q.long(), QL), "query_emb must be floating point"),
        ((nan_row(), QL), "query_emb row 3 has NaN or Inf"),
        ((torch.zeros(6, 4), QL), "query_emb row 0 is all zeros"),
        ((torch.full((6, 4), 3e38), QL), r"query_emb row 0 has a norm past float32.* scale"),
        ((Q, QL[:5]), "query_labels has 5 entries but query_emb has 6 rows"),
        ((Q, QL.float()), "query_labels must be integer class ids"),
        ((Q, QL[:, None]), "query_labels must be 1-D"),
        ((Q, [0, 1]), "query_labels must be a torch.Tensor or numpy array"),
    ],
)
def test_same_set_input_errors(args: tuple, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        RetrievalEvaluator("same_set", (1,)).evaluate(*args)


def test_same_set_refuses_a_gallery() -> None:
    with pytest.raises(ValueError, match="same_set uses the queries as the gallery"):
        RetrievalEvaluator("same_set", (1,)).evaluate(Q, QL, G, GL)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"gallery_emb": None}, "query_gallery needs gallery_emb and gallery_labels"),
        ({"gallery_emb": G[:, :3]}, "gallery_emb has dimension 3 but query_emb has 4"),
        ({"gallery_emb": G[:0], "gallery_labels": GL[:0]}, "gallery_emb is empty"),
        ({"gallery_labels": GL[:4]}, "gallery_labels has 4 entries but gallery_emb has 5"),
        ({"gallery_labels": GL.double()}, "gallery_labels must be integer"),
        ({"gallery_emb": G * torch.inf}, "gallery_emb row 0 has NaN or Inf"),
        ({"query_cams": np.zeros(6, dtype=np.int64)}, "query_cams given without"),
        ({"gallery_cams": torch.zeros(5, dtype=torch.long)}, "gallery_cams given without"),
        ({"query_cams": torch.zeros(6), "gallery_cams": torch.zeros(5)}, "query_cams must be int"),
        (
            {"query_cams": torch.zeros(5).long(), "gallery_cams": torch.zeros(5).long()},
            "query_cams has 5 entries but query_emb has 6",
        ),
        ({"gallery_labels": -torch.ones(5).long()}, "every gallery item is junk"),
    ],
)
def test_query_gallery_input_errors(kwargs: dict, match: str) -> None:
    args = {"query_emb": Q, "query_labels": QL, "gallery_emb": G, "gallery_labels": GL, **kwargs}
    with pytest.raises(ValueError, match=match):
        RetrievalEvaluator("query_gallery", (1,)).evaluate(**args)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
def test_cuda_requested_without_cuda() -> None:
    with pytest.raises(ValueError, match="device='cuda' but torch sees no CUDA device"):
        RetrievalEvaluator("same_set", (1,), device="cuda").evaluate(Q, QL)


@pytest.mark.faiss
def test_faiss_without_gpu_falls_back_to_its_cpu_product(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CUDA evaluation with a faiss built without GPU support runs faiss's CPU product and
    says how to install the GPU one."""
    import faiss

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.delattr(faiss, "StandardGpuResources", raising=False)
    ev = RetrievalEvaluator("same_set", (1,), backend="faiss", device="cuda")
    with pytest.warns(UserWarning, match=r'pip uninstall -y faiss-cpu && pip install "circlebench'):
        got = ev.evaluate(Q, QL)
    assert ev.last_backend == "faiss-cpu-float32"
    assert got == RetrievalEvaluator("same_set", (1,), device="cpu").evaluate(Q, QL)
