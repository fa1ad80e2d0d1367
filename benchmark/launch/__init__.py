"""Running a unit of work in a process of its own (a child of the fork server, or a task of a
Slurm job array), for the leaderboard and tuning alike; nothing here imports either."""
