"""The agent. Subpackages by job: `core` (the library: the agent, planner, replay buffer, training
loop), `persistence` (checkpoints, run folders, a run's records), `inspection` (diagnose's report
and figures), `comparison` (compare's library). The commands and their command-line helpers stay
at the top: `python -m agent.train|evaluate|compare|diagnose` (cli.py, train_args.py, launch.py)."""
