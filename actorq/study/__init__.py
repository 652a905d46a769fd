"""`actorq study`: fp32/fp16/int8/int4 actors end to end through the real services, with
time and CPU to the fp32 run's final return, runtime breakdown, energy and the guard."""
