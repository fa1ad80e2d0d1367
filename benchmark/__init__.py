"""circlebench: the training, evaluation and leaderboard side of the suite."""
