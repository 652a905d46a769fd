"""Actors: step a vector env with the quantized policy, push transitions to Redis."""
