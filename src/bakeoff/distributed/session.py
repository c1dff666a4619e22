"""Which Ray cluster a run uses, and its nodes.

`--cluster local:N` starts N simulated nodes on this machine through
`ray.cluster_utils.Cluster` (for trying it out, and for tests), of type "local";
`local:TYPE=N,TYPE=M` starts nodes of named types instead. Each gets an equal
share of this machine's cores, named in a resource `bakeoff_cores:<first>-<last>`
so that its runner pins itself there (Ray's CPU counts are bookkeeping, not
isolation). `--cluster ADDRESS` (or the RAY_ADDRESS variable) joins a running
cluster, where each node's runner takes all of that node's cores.

A node's type is its Ray label `bakeoff_type`, or a custom resource named
`bakeoff_type:<type>` (`ray start --resources '{"bakeoff_type:c7i-2xlarge": 1}'`);
a node with neither is "unlabelled". Simulated nodes are "local".

Ray keeps its sockets, logs and session files under the temp folder it is given
(`--cluster-tmp`); a simulated cluster's go there, and so nothing is written
under ~. The path is kept short: Unix socket paths over about 104 bytes fail.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bakeoff.errors import UserError
from bakeoff.hardware import NODE_RESOURCE, cores_resource, resource_cores

INSTALL = "pip install 'bakeoff[cluster]'"
TYPE_LABEL = "bakeoff_type"
TYPE_PREFIX = "bakeoff_type:"
LOCAL_TYPE = "local"
# Ray refuses an object store under 75 MiB; simulated nodes share this machine's memory.
SIMULATED_OBJECT_STORE = 80 * 2**20
# How many Ray workers a simulated node may start at once (see `connect`).
STARTUP_CONCURRENCY = 16
# Ray's session folder adds about 64 characters to its temp folder before a socket name.
MAX_TMP_CHARS = 40


@dataclass(frozen=True)
class ClusterSpec:
    """`local:...` (simulated nodes here, by type) or the address of a running cluster."""

    types: tuple[tuple[str, int], ...] = ()  # simulated: (node type, how many)
    address: str | None = None

    @property
    def simulated(self) -> bool:
        return self.address is None

    @property
    def nodes(self) -> int:
        return sum(n for _, n in self.types)

    def words(self) -> str:
        if not self.simulated:
            return str(self.address)
        if self.types == ((LOCAL_TYPE, self.nodes),):
            return f"local:{self.nodes}"
        return "local:" + ",".join(f"{t}={n}" for t, n in self.types)


def parse_cluster(value: str | None) -> ClusterSpec | None:
    """`--cluster`'s value, or RAY_ADDRESS where it is not given; None: no cluster."""
    value = value or os.environ.get("RAY_ADDRESS") or None
    if value is None:
        return None
    if not value.startswith("local:"):
        return ClusterSpec(address=value)
    body = value.removeprefix("local:")
    if body.isdigit() and int(body) >= 1:
        return ClusterSpec(types=((LOCAL_TYPE, int(body)),))
    types = []
    for part in body.split(","):
        name, _, count = part.partition("=")
        if not name or not count.isdigit() or int(count) < 1:
            raise UserError(
                f"--cluster {value}: local:N (N simulated nodes) or local:TYPE=N,TYPE=M "
                "(simulated nodes of named machine types), each N 1 or more"
            )
        types.append((name, int(count)))
    return ClusterSpec(types=tuple(types))


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UserError(f"--cluster needs Ray, which is not installed: {INSTALL}") from None
    return ray


@dataclass(frozen=True)
class Node:
    """A node as bakeoff uses it: Ray's id, its type, and the cores its runner pins to
    (None: all the node's own)."""

    node_id: str
    node_type: str
    cpus: int
    cores: tuple[int, ...] | None


@dataclass
class Session:
    """A connected cluster: its bakeoff nodes, and the simulated cluster's handle (tests
    remove a node through it)."""

    spec: ClusterSpec
    nodes: list[Node]
    simulated: Any = None  # ray.cluster_utils.Cluster for local:N

    @property
    def address(self) -> str:
        """Where another process on this machine joins the cluster."""
        return str(self.simulated.address if self.simulated is not None else self.spec.address)

    def alive(self) -> set[str]:
        """The ids of the nodes Ray reports alive now."""
        ray = import_ray()
        return {n["NodeID"] for n in ray.nodes() if n.get("Alive")}


def _core_shares(count: int) -> list[tuple[int, ...]]:
    """This machine's cores in `count` equal shares (shared round-robin when there are
    more nodes than cores)."""
    cores = sorted(os.sched_getaffinity(0))
    if count <= len(cores):
        size = len(cores) // count
        return [tuple(cores[i * size : (i + 1) * size]) for i in range(count)]
    return [(cores[i % len(cores)],) for i in range(count)]


def short_tmp(preferred: Path) -> Path:
    """Ray's temp folder: `preferred` where its path is short enough for Ray's sockets,
    else a short one under the system temp folder."""
    preferred = preferred.resolve()
    if len(str(preferred)) <= MAX_TMP_CHARS:
        preferred.mkdir(parents=True, exist_ok=True)
        return preferred
    import tempfile

    return Path(tempfile.mkdtemp(prefix="bakeoff-ray-"))


def _node_facts(raw: dict[str, Any]) -> Node:
    resources: dict[str, float] = raw.get("Resources", {})
    labels: dict[str, str] = raw.get("Labels", {}) or {}
    node_type = labels.get(TYPE_LABEL) or next(
        (k.removeprefix(TYPE_PREFIX) for k in resources if k.startswith(TYPE_PREFIX)),
        "unlabelled",
    )
    return Node(raw["NodeID"], node_type, int(resources.get("CPU", 0)), resource_cores(resources))


@contextlib.contextmanager
def connect(spec: ClusterSpec, tmp: Path) -> Iterator[Session]:
    """The cluster, started (local:N) or joined, for the length of the block."""
    ray = import_ray()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # offline, and no files under ~
    # Ray's default temp folder (where a simulated cluster's address file goes) too.
    saved_tmp = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = str(tmp)
    (tmp / "ray").mkdir(parents=True, exist_ok=True)
    simulated = None
    try:
        if spec.simulated:
            from ray.cluster_utils import Cluster

            # The head holds Ray's control store only; the N nodes measure, and any
            # of them can be removed (a lost node) without taking the cluster down.
            head = {
                "num_cpus": 0,
                "object_store_memory": SIMULATED_OBJECT_STORE,
                "include_dashboard": False,
                "temp_dir": str(tmp),
                # A node's limit on Ray workers starting at once is its CPU count (a
                # simulated node's share: 1 or 2), and Ray warns on the console past a
                # few times that; training's ranks, a sliver of a node each, start more.
                "_system_config": {"worker_maximum_startup_concurrency": STARTUP_CONCURRENCY},
            }
            simulated = Cluster(initialize_head=True, head_node_args=head)
            kinds = [t for t, n in spec.types for _ in range(n)]
            for kind, share in zip(kinds, _core_shares(spec.nodes), strict=True):
                simulated.add_node(**_simulated_node(share, kind))
            simulated.wait_for_nodes()
            ray.init(address=simulated.address, log_to_driver=False, logging_level="ERROR")
        else:
            try:
                ray.init(address=spec.address, log_to_driver=False, logging_level="ERROR")
            except ConnectionError as exc:
                raise UserError(f"--cluster {spec.address}: no Ray cluster there ({exc})") from None
        nodes = [
            _node_facts(n)
            for n in ray.nodes()
            if n.get("Alive") and NODE_RESOURCE in n.get("Resources", {})
        ]
        if not nodes:
            raise UserError(
                f"--cluster {spec.words()}: no node offers the resource {NODE_RESOURCE!r}; "
                f"start each node with `ray start ... --resources '{{\"{NODE_RESOURCE}\": 1}}'`"
            )
        yield Session(spec, nodes, simulated)
    finally:
        if ray.is_initialized():
            ray.shutdown()
        if simulated is not None:
            simulated.shutdown()
        if saved_tmp is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = saved_tmp


def _simulated_node(cores: tuple[int, ...], node_type: str) -> dict[str, Any]:
    return {
        "num_cpus": len(cores),
        "resources": {
            NODE_RESOURCE: 1,
            cores_resource(cores): 1,
            f"{TYPE_PREFIX}{node_type}": 1,
        },
        "object_store_memory": SIMULATED_OBJECT_STORE,
    }
