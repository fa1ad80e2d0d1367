"""Batch samplers for metric learning."""

from samplers.pk import PKSampler, SamplerMode

__all__ = ["PKSampler", "SamplerMode"]
