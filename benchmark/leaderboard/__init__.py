"""Leaderboards: suites of runs (`suite`), their runner, aggregation over seeds, `--check`, the
numerics fingerprint, markdown and plots; `command` is `circlebench leaderboard`."""
