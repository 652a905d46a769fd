"""On-policy data path: trajectory segments from actors to the learner through Redis."""
