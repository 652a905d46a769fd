"""`actorq scale`: a grid of actor counts x precisions x replay ratios x seeds through
`actorq run`, with throughput, time to a target return and cost per run (docs/scale.md)."""
