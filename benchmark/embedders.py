"""`benchmark.embedders.Embedder`, the `class_path` configs used before `benchmark/` was split
into role packages: an alias of `benchmark.training.embedders`, so that saved `config.yaml`
files and users' own configs keep working. New configs name `benchmark.training.embedders`."""

from benchmark.training.embedders import BackboneFeatures, Embedder, FeatureHead, GlobalPool

__all__ = ["BackboneFeatures", "Embedder", "FeatureHead", "GlobalPool"]
