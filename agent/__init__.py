"""The agent: planner, replay buffer, training loop and command-line entry points."""
