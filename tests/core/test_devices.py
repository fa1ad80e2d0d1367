"""`chosen_device`: the one rule for an `auto|cpu|cuda` setting."""

from __future__ import annotations

import pytest
import torch

from core.devices import chosen_device


def test_auto_is_cuda_only_where_torch_sees_it_and_cuda_without_one_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert chosen_device("auto") == chosen_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match="torch sees no CUDA device"):
        chosen_device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert chosen_device("auto") == chosen_device("cuda") == torch.device("cuda")
    assert chosen_device("cpu") == torch.device("cpu")
