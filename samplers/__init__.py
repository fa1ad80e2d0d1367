"""Batch samplers for metric learning."""

from samplers.pk import PKSampler

__all__ = ["PKSampler"]
