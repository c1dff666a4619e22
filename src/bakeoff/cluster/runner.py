"""The Ray actor that runs bake-offs on one node.

It runs in a process of its own on its node, pinned to the node's cores (every
worker process a bake-off starts inherits the pinning), and runs one bake-off at a
time with bakeoff's local engine, unchanged, into a store of its own in a temporary
folder. What comes back is the finished run's rows (`Store.export_run`) and the
node's fingerprint; the caller puts them in its own store. The actor takes one call
at a time (Ray's default for an actor), so two bake-offs never share a node.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any


class NodeRunner:
    def __init__(self, cores: list[int] | None, scratch: str | None = None) -> None:
        """`cores`: pin to these (a simulated node's share); `scratch`: the temp folder
        for everything its bake-offs write (a simulated node's, inside the cluster's
        own temp folder, so a node that dies mid-run leaves nothing elsewhere)."""
        if cores:
            os.sched_setaffinity(0, cores)
        self.cores = sorted(os.sched_getaffinity(0))
        if scratch:
            Path(scratch).mkdir(parents=True, exist_ok=True)
            os.environ["TMPDIR"] = scratch  # the bake-offs' worker processes inherit it
            tempfile.tempdir = scratch

    def facts(self) -> dict[str, Any]:
        """This node's fingerprint and the cores the runner is pinned to."""
        from bakeoff import environment

        return {"fingerprint": environment.fingerprint(), "cores": self.cores}

    def run(self, workload: str, options: dict[str, Any]) -> dict[str, Any]:
        """One whole bake-off of `workload` with `options` (`RunOptions` fields): its
        rows, exit code, and when it ran. Its threads are bakeoff's default, as in a
        plain run: the physical cores among those the runner is pinned to."""
        from bakeoff import api, environment
        from bakeoff.store import Store

        started = time.time()
        with tempfile.TemporaryDirectory(prefix="bakeoff-node-") as tmp:
            store = Path(tmp) / "bakeoff.db"
            result = api.run(workload, api.RunOptions(store=store, **options))
            with Store(store) as s:
                rows = s.export_run(result.run_id)
        return {
            "rows": rows,
            "exit_code": result.exit_code,
            "started": started,
            "ended": time.time(),
            "fingerprint": environment.fingerprint(),
            "cores": self.cores,
        }
