"""`circlebench data`: the real datasets' catalogue, layout checks and downloads."""
