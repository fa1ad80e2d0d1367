"""Fixtures of the training tests."""

from __future__ import annotations

from pathlib import Path

import pytest
import timm
import torch


@pytest.fixture(scope="module")
def weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Fixed weights for the tiny extractor: random ones would follow each run's seed (and so
    would its features and their cache key), while a frozen backbone's weights never do."""
    torch.manual_seed(0)
    model = timm.create_model("test_efficientnet", pretrained=False, num_classes=0)
    path = tmp_path_factory.mktemp("weights") / "test_efficientnet.pth"
    torch.save(model.state_dict(), path)
    return path
