"""The fp32 learner: replay mirror from Redis, DQN updates, publication, checkpoints."""
