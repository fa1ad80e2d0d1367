"""Running a unit of work in a process of its own, for the leaderboard and tuning alike.

`fork_server` (with its one preload, `preload`, and `frozen`'s garbage-collector pause) imports
the training stack once; `forked` calls a function in a child of it; `processes` holds process
groups, CPU threads, log redirection and the failure report; `slurm`, `slurm_tasks` and
`slurm_options` run work as the tasks of one Slurm job array. Nothing here imports the
leaderboard or tuning.
"""
