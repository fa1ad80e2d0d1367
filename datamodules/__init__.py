"""LightningDataModules for the retrieval benchmarks and the synthetic default."""
