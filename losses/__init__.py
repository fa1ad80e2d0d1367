"""Metric-learning losses: similarity sources and the pair losses built on them."""
