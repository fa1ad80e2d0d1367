"""Speed and memory benchmarks, run as `python -m benchmark.bench losses|data|eval|train|gpu`."""
