"""Training: the LightningModule, the embedders and their weights, the CLI, loggers, results rows.

Modules are imported by name (`benchmark.training.module`, `benchmark.training.embedders`) so
that reading a results file does not import Lightning.
"""
