"""Batch samplers for metric learning."""
