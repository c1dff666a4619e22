"""`bakeoff sweep WORKLOAD... --cluster ...`: whole bake-offs, one per workload,
spread over a Ray cluster's nodes.

Each node's `NodeRunner` takes the next workload as soon as it is idle; a finished
run's rows come back into the local store as an ordinary run (`bakeoff show RUN_ID`
works on it) whose environment carries `node` {id, type, fingerprint}. Every
attempt is recorded in the store's `sweep_runs` as it starts and ends, so a
killed sweep resumes (`--resume SWEEP_ID`) without running a finished workload
again.

A node that dies while it runs a workload (its runner's process or the node
itself) fails that attempt with "node lost", and the workload goes back to the
head of the queue for another node, up to MAX_ATTEMPTS attempts. The sweep never
waits on a dead node: it waits for results `heartbeat_s` at a time, and between
waits asks Ray which nodes are alive.
"""

from __future__ import annotations

import secrets
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bakeoff.cluster.runner import NodeRunner
from bakeoff.distributed.session import (
    NODE_RESOURCE,
    Node,
    Session,
    connect,
    import_ray,
    parse_cluster,
    short_tmp,
)
from bakeoff.errors import UserError
from bakeoff.inference.options import STORED_FIELDS
from bakeoff.loader import workload_ref
from bakeoff.paths import DEFAULT_STORE
from bakeoff.store import Store, check_store

# The sweep's JSON document. Version 1: the first.
SCHEMA_VERSION = 1
MAX_ATTEMPTS = 3  # a workload whose node was lost is requeued at most this often
# The `RunOptions` a node's run takes from the sweep: every stored one but its threads
# (bakeoff's default under the node's pinning) and its share (a split sets it).
RUN_OPTIONS = STORED_FIELDS - {"threads", "share"}


@dataclass(frozen=True)
class SweepOptions:
    cluster: str | None = None  # local:N, an address; RAY_ADDRESS where None
    cluster_tmp: Path | None = None  # Ray's files (default: beside the store, short)
    store: Path = DEFAULT_STORE
    # `RunOptions` fields for every run (quick, budget_s, runtimes, ...): plain values,
    # kept with the sweep for --resume; each node sets its own threads and store.
    run_options: dict[str, Any] = field(default_factory=dict)
    resume: str | None = None  # the id of a sweep to finish
    heartbeat_s: float = 2.0  # how often liveness is checked while runs are out
    # Each workload once on a node of each machine type the cluster has, rather than
    # once anywhere (`bakeoff run --per-node-type`).
    per_node_type: bool = False


class SweepEvents(Protocol):
    def note(self, message: str) -> None: ...

    def connected(self, session: Session) -> None:
        """The cluster is up, with these nodes."""
        ...

    def assigned(self, workload: str, node: Node) -> None:
        """`workload` has started on `node`."""
        ...


@dataclass
class SweepResult:
    sweep_id: str
    document: dict[str, Any]

    @property
    def exit_code(self) -> int:
        return 0 if all(r["status"] == "done" for r in self.document["runs"]) else 1


@dataclass
class _Attempt:
    workload: str
    number: int
    node: Node
    started: float = field(default_factory=time.time)


# An entry of a sweep: a workload, or a workload on one machine type ("W on TYPE").
_ON = " on "


def entry(workload: str, node_type: str | None = None) -> str:
    return workload if node_type is None else f"{workload}{_ON}{node_type}"


def parse_entry(key: str) -> tuple[str, str | None]:
    """(workload, the machine type it must run on, or None)."""
    workload, on, node_type = key.rpartition(_ON)
    return (workload, node_type) if on else (key, None)


def check_run_options(run_options: dict[str, Any]) -> None:
    unknown = set(run_options) - RUN_OPTIONS
    if unknown:
        raise UserError(f"not for a run on a cluster node: {', '.join(sorted(unknown))}")


def failure_words(exc: Any) -> str:
    """What a bake-off that raised on a node (a `RayTaskError`) says: a UserError's own
    words, anything else's type too."""
    cause = exc.cause if getattr(exc, "cause", None) is not None else exc
    return str(cause) if isinstance(cause, UserError) else f"{type(cause).__name__}: {cause}"


def import_node_run(store: Store, node: Node, result: dict[str, Any], **tags: Any) -> str:
    """A node's finished run (`NodeRunner.run`'s result) into the local store, its
    environment's `node` saying where and when it ran (with `tags` beside); its id."""
    where = {
        "id": node.node_id,
        "type": node.node_type,
        "fingerprint": result["fingerprint"],
        "cores": result["cores"],
        "ran": [result["started"], result["ended"]],  # wall clock, on the node
        **tags,
    }
    return store.import_run(result["rows"], {"node": where})


def start_runner(node: Node, scratch: Path | None) -> Any:
    """The `NodeRunner` actor of `node`, holding the whole node: the resource
    `bakeoff_node` and every CPU Ray counts there, placed on that node and nowhere else,
    never restarted (a lost node's runner is lost with it)."""
    ray = import_ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return (
        ray.remote(NodeRunner)
        .options(
            resources={NODE_RESOURCE: 1},
            num_cpus=node.cpus,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False),
            max_restarts=0,
            max_task_retries=0,
        )
        .remote(
            list(node.cores) if node.cores else None,
            str(scratch / node.node_id[:12]) if scratch else None,
        )
    )


def _resolve(workloads: list[str]) -> list[str]:
    """Built-ins as they are, files as absolute paths (a node must see the same path:
    a shared file system, or the same checkout on every node)."""
    missing = [w for w in workloads if not w.startswith("builtin:") and not Path(w).is_file()]
    if missing:
        raise UserError(f"{missing[0]}: no such workload file")
    out = [workload_ref(w) for w in workloads]
    if len(set(out)) != len(out):
        raise UserError("bakeoff sweep: a workload is named twice")
    return out


def run_sweep(workloads: list[str], opts: SweepOptions, events: SweepEvents) -> SweepResult:
    spec = parse_cluster(opts.cluster)
    if spec is None:
        raise UserError("bakeoff sweep needs --cluster (local:N, a Ray address, or RAY_ADDRESS)")
    check_store(opts.store)  # a store that cannot be is said before Ray is imported
    if not opts.resume:  # bad input is said before the store is made (it loses nothing)
        workloads = _resolve(workloads)
        if not workloads:
            raise UserError("bakeoff sweep: name at least one workload")
        check_run_options(opts.run_options)
    import_ray()  # before anything is recorded: without Ray, say how to install it
    store_path = Path(opts.store).resolve()
    with Store(store_path) as store:
        entries: list[str] | None = None  # decided once the cluster's types are known
        if opts.resume:
            record = store.sweep(opts.resume)
            sweep_id, entries = record["sweep_id"], record["workloads"]
            settings = record["settings"]
            store.set_sweep_status(sweep_id, "running")
            before = record["attempts"]
        else:
            sweep_id = time.strftime("sweep-%Y%m%d-%H%M%S-") + secrets.token_hex(2)
            settings = {
                "cluster": spec.words(),
                "run_options": opts.run_options,
                "per_node_type": opts.per_node_type,
            }
            before = []
        done = {a["workload"] for a in before if a["status"] == "done"}
        if done:
            events.note(f"{len(done)} workload(s) finished before: not run again")
        tmp = opts.cluster_tmp or short_tmp(store_path.parent / "ray")
        try:
            if entries is None or len(done) < len(entries):
                with connect(spec, tmp) as session:
                    events.connected(session)
                    if entries is None:
                        types = sorted({n.node_type for n in session.nodes})
                        entries = (
                            [entry(w, t) for w in workloads for t in types]
                            if opts.per_node_type
                            else workloads
                        )
                        store.start_sweep(sweep_id, entries, settings)
                    events.note(f"sweep {sweep_id}: {len(entries)} run(s) on {spec.words()}")
                    sweeper = _Sweeper(sweep_id, entries, settings, store, session, events, opts)
                    sweeper.start_runners(tmp / "nodes" if spec.simulated else None)
                    sweeper.run()
        except KeyboardInterrupt:
            store.set_sweep_status(sweep_id, "interrupted")
            events.note(f"interrupted: `bakeoff sweep --resume {sweep_id}` finishes it")
            raise
        record = store.sweep(sweep_id)
        document = _document(record, store)
        store.set_sweep_status(sweep_id, "done")
        return SweepResult(sweep_id, document)


class _Sweeper:
    """The queue of workloads, the nodes' runners, and what comes back."""

    def __init__(
        self,
        sweep_id: str,
        workloads: list[str],
        settings: dict[str, Any],
        store: Store,
        session: Session,
        events: SweepEvents,
        opts: SweepOptions,
    ) -> None:
        self.sweep_id, self.store, self.session, self.events = sweep_id, store, session, events
        self.heartbeat_s = opts.heartbeat_s
        self.options = dict(settings["run_options"])
        before = store.sweep(sweep_id)["attempts"]
        done = {a["workload"] for a in before if a["status"] == "done"}
        self.tries = {w: sum(a["workload"] == w for a in before) for w in workloads}
        self.pending = deque(w for w in workloads if w not in done)
        self.ray = import_ray()
        self.runners: dict[str, Any] = {}
        self.idle: list[Node] = list(session.nodes)
        self.out: dict[Any, _Attempt] = {}

    def start_runners(self, scratch: Path | None) -> None:
        """One runner per node (`scratch`: a simulated node's temp folder goes under it)."""
        for node in self.session.nodes:
            self.runners[node.node_id] = start_runner(node, scratch)

    def _record(
        self, a: _Attempt, status: str, reason: str = "", run_id: str | None = None
    ) -> None:
        self.store.put_sweep_attempt(
            self.sweep_id,
            {
                "workload": a.workload,
                "attempt": a.number,
                "run_id": run_id,
                "node_id": a.node.node_id,
                "node_type": a.node.node_type,
                "status": status,
                "reason": reason,
            },
        )

    def run(self) -> None:
        while self.pending or self.out:
            self._assign()
            if not self.out:  # work left, no node left to run it
                for w in self.pending:
                    self.events.note(f"{w}: not run: no node of its kind is left")
                    self.store.put_sweep_attempt(
                        self.sweep_id,
                        {
                            "workload": w,
                            "attempt": self.tries[w] + 1,
                            "run_id": None,
                            "node_id": "-",
                            "node_type": "-",
                            "status": "failed",
                            "reason": "no node left to run it (every such node was lost)",
                        },
                    )
                return
            ready, _ = self.ray.wait(list(self.out), num_returns=1, timeout=self.heartbeat_s)
            if ready:
                self._collect(ready[0])
            else:
                self._check_nodes()

    def _assign(self) -> None:
        """Each idle node takes the first pending entry it can run (its machine type,
        where the entry names one)."""
        for node in list(self.idle):
            key = next(
                (k for k in self.pending if parse_entry(k)[1] in (None, node.node_type)), None
            )
            if key is None:
                continue
            self.pending.remove(key)
            self.idle.remove(node)
            self.tries[key] += 1
            attempt = _Attempt(key, self.tries[key], node)
            ref = self.runners[node.node_id].run.remote(parse_entry(key)[0], self.options)
            self.out[ref] = attempt
            self._record(attempt, "running")
            self.events.assigned(key, node)

    def _collect(self, ref: Any) -> None:
        from ray import exceptions as rex

        attempt = self.out.pop(ref)
        try:
            result = self.ray.get(ref)
        except rex.RayTaskError as exc:  # the bake-off raised: the node is fine
            reason = failure_words(exc)
            self._record(attempt, "failed", reason)
            self.events.note(f"{attempt.workload}: failed on {attempt.node.node_id[:8]}: {reason}")
            self.idle.append(attempt.node)
        except rex.RayError as exc:  # the runner's process or its node died
            self._lost(attempt, f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
        else:
            run_id = import_node_run(self.store, attempt.node, result)
            self._record(attempt, "done", run_id=run_id)
            self.events.note(
                f"{attempt.workload}: run {run_id} done on node {attempt.node.node_id[:8]} "
                f"({attempt.node.node_type}) in {result['ended'] - result['started']:.1f} s"
            )
            self.idle.append(attempt.node)

    def _check_nodes(self) -> None:
        """Between waits: a run on a node Ray no longer reports alive is lost now,
        rather than whenever Ray notices the runner is gone."""
        alive = self.session.alive()
        for ref, attempt in list(self.out.items()):
            if attempt.node.node_id not in alive:
                del self.out[ref]
                self._lost(attempt, "the node is no longer alive")

    def _lost(self, attempt: _Attempt, why: str) -> None:
        node_id = attempt.node.node_id
        self.runners.pop(node_id, None)
        self.idle = [n for n in self.idle if n.node_id != node_id]
        self._record(attempt, "failed", f"node lost: {why}")
        again = self.tries[attempt.workload] < MAX_ATTEMPTS
        self.events.note(
            f"{attempt.workload}: node {node_id[:8]} lost ({why})"
            + ("; requeued" if again else f"; not requeued after {MAX_ATTEMPTS} attempts")
        )
        if again:
            self.pending.appendleft(attempt.workload)


def _document(record: dict[str, Any], store: Store) -> dict[str, Any]:
    """The sweep as JSON: per workload, its last attempt, the run's winners by batch
    size and their speedup over the baseline."""
    last: dict[str, dict[str, Any]] = {}
    for a in record["attempts"]:
        last[a["workload"]] = a  # attempts come in order
    runs = []
    for w in record["workloads"]:
        a = last.get(w)
        workload, required_type = parse_entry(w)
        row: dict[str, Any] = {
            "workload": workload,
            "for_node_type": required_type,  # with --per-node-type: the type it ran on
            "run_id": a["run_id"] if a else None,
            "node_id": a["node_id"] if a else None,
            "node_type": a["node_type"] if a else None,
            "status": a["status"] if a else "not run",
            "reason": a["reason"] if a else "",
            "attempts": sum(x["workload"] == w for x in record["attempts"]),
            "winners": {},
            "speedups": {},
        }
        if a and a["run_id"]:
            doc = store.run(a["run_id"])["document"] or {}
            described = doc.get("workload", {})
            row["name"] = described.get("name") if isinstance(described, dict) else described
            for v in doc.get("verdicts", []):
                row["winners"][str(v["batch_size"])] = v["winner"]
                if v.get("speedup"):
                    row["speedups"][str(v["batch_size"])] = v["speedup"]["value"]
        runs.append(row)
    return {
        "schema_version": SCHEMA_VERSION,
        "sweep_id": record["sweep_id"],
        "settings": record["settings"],
        "runs": runs,
    }
