"""`actorq run`: every service as its own process on one machine."""
