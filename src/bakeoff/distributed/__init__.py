"""Processes and nodes beyond one worker, below the kinds that use them.

- `ranks`: a multi-process training stack's ranks under torchrun, driven from its
  one worker;
- `nodes`: the same ranks one a node on a Ray cluster, through Ray Train;
- `session`: which Ray cluster a run uses and its nodes (also what `cluster/`,
  the bake-offs spread over a cluster's nodes, starts from).

Nothing here is imported by a single-process run.
"""
