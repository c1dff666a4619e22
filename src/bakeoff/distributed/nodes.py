"""A multi-process stack's ranks on a Ray cluster's nodes, one a node, through Ray
Train's `TorchTrainer` (gloo): `NodeRanks` is the worker's side (the same calls
as torchrun's `RankGroup`, which it extends), `node_rank` what each of Ray Train's
workers runs.

Ray Train starts the ranks and their process group; the worker drives them over
the same control connection as torchrun's ranks, to its own address on the
cluster's network, each rank proving itself with the group's token. Ray is never
inside a timed step: rank 0 times its steps itself, as under torchrun.

Each rank pins itself to its node's cores (a simulated node's share, named in its
`bakeoff_cores:` resource; on a real node, all of the node's) and trains with the
physical cores among them as its threads, as a plain run on that node would. The
data, the seed's initial weights and a user's model module travel in the trainer's
config, so the nodes need no shared folder: of the recipe's folder, its Python
files and the factory's package (`factory_sources`); a module that reads other
files of that folder still needs them at the same path on every node.

Placement: each rank asks for a sliver of the node resource, with STRICT_SPREAD,
so the ranks land on distinct bakeoff nodes. A sliver, not the whole node, since
the run's other workers on the cluster (the one-node scaling reference) stay up
between rounds beside this one; the trial engine times one worker at a time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import secrets
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bakeoff.distributed.ranks import GROUP_TIMEOUT_S, RankGroup, connect_back, serve
from bakeoff.hardware import NODE_RESOURCE, resource_cores
from bakeoff.stacks.spec import TrainSpec

# What each rank reserves on its node, of the node resource and of Ray's CPU count
# (bookkeeping only: the rank pins itself to the node's cores).
PLACEMENT_SHARE = 0.01
# How long a failed group asks Ray whether one of its nodes is gone.
LOST_NODE_WAIT_S = 5.0
# The files of the spec that travel with the ranks.
SHIPPED = ("data_path", "init_path")
# The most a user's model sources may weigh to travel with the ranks; a folder of
# more is imported where it is on each node, as without shipping.
SOURCES_MAX_BYTES = 32 * 1024 * 1024


class NodeRanks(RankGroup):
    """`spec.processes` ranks, one on each of as many nodes of the cluster at
    `spec.cluster_address`."""

    def __init__(self, spec: TrainSpec) -> None:
        import ray

        if not ray.is_initialized():
            ray.init(address=spec.cluster_address, log_to_driver=False, logging_level=logging.ERROR)
        self.host = ray.util.get_node_ip_address()
        self.fit_done = threading.Event()
        self.fit_error = ""
        super().__init__(spec)

    def control_host(self) -> str:
        return str(self.host)

    def launch(self, spec: TrainSpec, port: int) -> None:
        from ray.train import FailureConfig, RunConfig, ScalingConfig
        from ray.train.torch import TorchConfig, TorchTrainer

        free = sum(1 for _ in _bakeoff_nodes())
        if free < spec.processes:
            raise RuntimeError(
                f"{spec.processes} ranks, one a node, need {spec.processes} bakeoff nodes; "
                f"the cluster has {free}"
            )
        config = {
            "spec": dataclasses.asdict(spec),
            "host": self.host,
            "port": port,
            "token": self.token,
            "files": {name: Path(getattr(spec, name)).read_bytes() for name in SHIPPED},
            "sources": factory_sources(spec.factory, spec.factory_dir),
        }
        trainer = TorchTrainer(
            node_rank,
            train_loop_config=config,
            scaling_config=ScalingConfig(
                num_workers=spec.processes,
                resources_per_worker={"CPU": PLACEMENT_SHARE, NODE_RESOURCE: PLACEMENT_SHARE},
                placement_strategy="STRICT_SPREAD",
            ),
            torch_config=TorchConfig(backend="gloo", timeout_s=int(GROUP_TIMEOUT_S)),
            run_config=RunConfig(
                name=f"{spec.candidate_id or spec.stack}-{secrets.token_hex(4)}",
                # Ray Train's own files (no checkpoints of its own are taken): not
                # under ~/ray_results, its default.
                storage_path=str(Path(spec.cluster_tmp or tempfile.gettempdir()) / "train"),
                failure_config=FailureConfig(max_failures=0),  # a lost rank fails the trial
            ),
        )
        # fit() returns when every rank's function has, after the worker said exit
        # (or the ranks failed): it waits in a thread of its own meanwhile.
        threading.Thread(target=self._fit, args=(trainer,), daemon=True, name="fit").start()

    def _fit(self, trainer: Any) -> None:
        try:
            result = trainer.fit()
            if result.error is not None:
                self.fit_error = f"{type(result.error).__name__}: {result.error}"
        except BaseException as exc:  # kept for the worker's error (`ended`), not raised here
            self.fit_error = f"{type(exc).__name__}: {exc}"
        finally:
            self.fit_done.set()

    def ended(self, wait_s: float = 0.0) -> str | None:
        if not self.fit_done.wait(wait_s):
            return None
        return f"Ray Train's run ended: {self.fit_error or 'without an error'}"

    def failure(self, words: str) -> str:
        """A rank's failure, led by "node lost" where one of the group's nodes is gone
        (Ray may take a moment to notice: it is asked for a few seconds)."""
        import ray

        # (known once every rank said where it runs)
        mine = [n["id"] for n in getattr(self, "settings", {}).get("nodes", [])]
        deadline = time.monotonic() + LOST_NODE_WAIT_S
        while mine:
            try:
                alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
            except Exception:  # the cluster itself is gone: say what is known
                break
            lost = [node for node in mine if node not in alive]
            if lost:
                return f"node lost: {', '.join(lost)}; {words}"
            if time.monotonic() > deadline:
                break
            time.sleep(0.5)
        return words

    def stop(self) -> None:
        import ray

        # The ranks return once told to exit, and Ray Train then ends its run; a rank
        # that does not is ended with the worker's connection to the cluster.
        self.fit_done.wait(30)
        ray.shutdown()

    def ready(self, readies: list[dict[str, Any]]) -> None:
        self.settings.update(
            launcher="Ray Train TorchTrainer",
            nodes=[r["node"] for r in readies],
            threads=readies[0]["node"]["threads"],
        )


def _bakeoff_nodes() -> list[dict[str, Any]]:
    import ray

    return [n for n in ray.nodes() if n.get("Alive") and NODE_RESOURCE in n.get("Resources", {})]


def factory_sources(factory: str, folder: str) -> dict[str, bytes]:
    """The Python files a user's model factory is imported from, by their path in
    `folder`: the folder's own modules and, where the factory's top module is a
    package there, its modules. Nothing for bakeoff's own factories (no folder),
    nor where they weigh more than SOURCES_MAX_BYTES."""
    if not folder:
        return {}
    root = Path(folder)
    top = factory.partition(":")[0].split(".")[0]
    files = sorted(root.glob("*.py"))
    if (root / top).is_dir():
        files += sorted(f for f in (root / top).rglob("*.py") if "__pycache__" not in f.parts)
    if sum(f.stat().st_size for f in files) > SOURCES_MAX_BYTES:
        return {}
    return {str(f.relative_to(root)): f.read_bytes() for f in files}


def _pin(cores: tuple[int, ...]) -> None:
    """Every thread of this process on `cores` (Ray Train runs the rank's function
    in a thread of its own, and the threads a library starts later inherit it)."""
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(tid), cores)


def node_rank(config: dict[str, Any]) -> None:
    """One rank, as Ray Train runs it on its node, the process group already up:
    pin to the node's cores, write the shipped files, connect back to the worker,
    then answer its commands (`train_ranks.serve`)."""
    import ray
    import ray.train

    from bakeoff import environment

    rank = ray.train.get_context().get_world_rank()
    node_id = ray.get_runtime_context().get_node_id()
    node: dict[str, Any] = next((n for n in ray.nodes() if n["NodeID"] == node_id), {})
    cores = resource_cores(node.get("Resources", {}))
    if cores:
        _pin(cores)
    threads = environment.default_threads()
    spec = config["spec"]
    # On a simulated node the run's temp folder is this machine's: the files go there.
    where = spec["cluster_tmp"] or None
    if where is not None and not Path(where).is_dir():
        where = None
    with tempfile.TemporaryDirectory(prefix="bakeoff-rank-", dir=where) as tmp:
        paths = {}
        for name, blob in config["files"].items():
            path = Path(tmp) / name
            path.write_bytes(blob)
            paths[name] = str(path)
        if config["sources"]:  # the model is imported from its shipped copy
            sources = Path(tmp) / "factory"
            for name, blob in config["sources"].items():
                (sources / name).parent.mkdir(parents=True, exist_ok=True)
                (sources / name).write_bytes(blob)
            paths["factory_dir"] = str(sources)
        spec = TrainSpec(**{**spec, **paths, "threads": threads})
        conn = connect_back(config["host"], config["port"], rank, config["token"])
        facts = {
            "id": node_id,
            "cores": sorted(os.sched_getaffinity(0)),
            "threads": threads,
        }
        code = serve(conn, spec, facts={"node": facts}, checkpoint_dir=tmp)
    if code:
        raise RuntimeError("the worker that drove this rank is gone")
