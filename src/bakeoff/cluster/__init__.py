"""Bake-offs on a Ray cluster (`pip install 'bakeoff[cluster]'`).

Ray schedules; bakeoff writes no scheduler of its own. A node is the unit of
measurement: one `NodeRunner` per node reserves the whole node (the custom
resource `bakeoff_node` and every CPU Ray counts there), pins its processes to the
node's cores and runs bakeoff's local engine unchanged, one bake-off at a time, so
no two trials on a node ever overlap. Ray is never inside a timed call: a node's
run is an ordinary local run whose finished rows travel back into the store of the
machine that started it, tagged with the node's id, type and fingerprint.

- `distributed.session` (below the kinds, since training's Ray ranks use it too):
  which cluster (`--cluster local:N`, an address, or RAY_ADDRESS), its nodes and
  their types, Ray's files kept under one folder;
- `runner`: the actor that runs bake-offs on a node;
- `sweep`: `bakeoff sweep`, whole bake-offs spread over the nodes, resumable, a
  lost node's workload requeued.

Nothing here is imported by the single-machine path.
"""
