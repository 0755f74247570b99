"""The agent library: what acting and training are. The agent (`agent.Agent`), its planner,
the episode so far, the replay buffer, collection across env copies, batched policies and
episodes, the training loop, data-parallel training, the non-finite guards, the run config, and
the structural types its collaborators read it through (`protocols`)."""
