"""`bakeoff sweep` on a real Ray cluster of simulated nodes (`--cluster local:2`):
fake-backend workloads, so what is checked is the cluster's part: every workload's
run in the local store tagged with its node, no two runs overlapping on one node,
a node removed mid-run and its workload run again elsewhere, resume, nothing
written outside the temp folder it is given (issue 23)."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from bakeoff import api
from bakeoff.cli import app
from bakeoff.cluster.sweep import SweepOptions, run_sweep
from bakeoff.distributed.session import Node, Session, parse_cluster
from bakeoff.errors import UserError
from bakeoff.store import Store
from extras import require_module

require_module("ray", "pip install 'bakeoff[cluster]'")


def _workload(folder: Path, name: str, options: str) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / "d.npz", input=np.random.default_rng(0).random((32, 8), dtype=np.float32))
    path = folder / f"{name}.toml"
    path.write_text(
        f'name = "{name}"\n[model]\nkind = "fake"\noptions = {options}\n'
        '[data]\npath = "d.npz"\n[search]\nprecisions = ["fp32", "int8"]\nbatch_sizes = [1]\n'
    )
    return str(path)


class _RemoveSlowNode:
    """The sweep's events; removes the node the slow workload (or the share naming
    `victim`) first started on, a moment after it started (as a cloud takes a node
    away)."""

    def __init__(self, victim: str = "slow") -> None:
        self.victim = victim
        self.session: Session | None = None
        self.started: list[tuple[str, str]] = []
        self.removed: str | None = None
        self.notes: list[str] = []

    def note(self, message: str) -> None:
        self.notes.append(message)

    def connected(self, session: Session) -> None:
        self.session = session

    def assigned(self, workload: str, node: Node) -> None:
        self.started.append((Path(workload).stem, node.node_id))
        hit = Path(workload).stem == self.victim or workload.endswith(self.victim)
        if hit and self.removed is None:
            self.removed = node.node_id
            # Soon after the start, while the run is surely still going (it is seconds
            # long): a removal after it ended would race the cluster's own shutdown.
            threading.Timer(1.0, self._remove, [node.node_id]).start()

    def _remove(self, node_id: str) -> None:
        assert self.session is not None and self.session.simulated is not None
        for raylet in self.session.simulated.list_all_nodes():
            if raylet.node_id == node_id:
                self.session.simulated.remove_node(raylet)


# The short Ray temp folders the cluster tests make in /tmp (this module's, and those
# of tests/distributed/test_nodes.py, which a parallel pytest worker may run meanwhile):
# bakeoff itself never names a folder so.
TESTS_RAY_TMP = ("bkr-", "bkt-", "bkl-")


def _listing(folder: Path) -> set[str]:
    return {str(p) for p in folder.rglob("*")} if folder.exists() else set()


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("sweep")
    workloads = [
        # about 8 s of rounds: its node is removed while it runs
        _workload(root / "w", "slow", "{ latency_ms = 1.0, wall_ms = 4.0 }"),
        _workload(root / "w", "fast", "{ latency_ms = { fp32 = 2.0, int8 = 1.0 } }"),
        _workload(root / "w", "tied", "{ latency_ms = 1.5 }"),
    ]
    # Ray's sockets need a short path: the given temp folder sits in the system's.
    ray_tmp = Path(tempfile.mkdtemp(prefix="bkr-", dir="/tmp"))
    home = Path(os.environ["HOME"])
    system_tmp = {p.name for p in Path("/tmp").iterdir()}
    session_tmp = Path(tempfile.gettempdir())  # the system temp folder, as tests see it
    tmp_before = _listing(session_tmp)
    home_before = _listing(home) - tmp_before
    # bakeoff's own variant cache too (BAKEOFF_CACHE_DIR), for this test only
    saved_cache = os.environ["BAKEOFF_CACHE_DIR"]
    os.environ["BAKEOFF_CACHE_DIR"] = str(ray_tmp / "bakeoff-cache")
    events = _RemoveSlowNode()
    started = time.perf_counter()
    try:
        result = _sweep(workloads, ray_tmp, root, events)
    finally:
        os.environ["BAKEOFF_CACHE_DIR"] = saved_cache
    yield {
        "result": result,
        "events": events,
        "seconds": time.perf_counter() - started,
        "store": root / "store" / "bakeoff.db",
        "new_in_tmp": {
            p.name
            for p in Path("/tmp").iterdir()
            if p.name not in system_tmp and not p.name.startswith(TESTS_RAY_TMP)
        }
        | (_listing(session_tmp) - tmp_before),
        "new_in_home": _listing(home) - _listing(session_tmp) - home_before,
        "ray_tmp": ray_tmp,
        "workloads": workloads,
    }
    shutil.rmtree(ray_tmp, ignore_errors=True)


def _sweep(workloads: list[str], ray_tmp: Path, root: Path, events: Any) -> Any:
    return run_sweep(
        workloads,
        SweepOptions(
            cluster="local:2",
            cluster_tmp=ray_tmp,
            store=root / "store" / "bakeoff.db",
            run_options={"quick": True, "budget_s": 3},
            heartbeat_s=1.0,
        ),
        events,
    )


def test_every_workload_comes_back_as_an_ordinary_run_tagged_with_its_node(
    swept: dict[str, Any],
) -> None:
    doc = swept["result"].document
    assert set(doc) >= {"schema_version", "sweep_id", "runs"}
    assert [r["workload"] for r in doc["runs"]] == swept["workloads"]
    for r in doc["runs"]:
        assert r["status"] == "done", r
        assert set(r) >= {"workload", "run_id", "node_id", "node_type", "status", "winners"}
        assert r["node_type"] == "local" and r["winners"]["1"]
        record = api.show_run(r["run_id"], swept["store"])  # an ordinary run in the store
        node = record["environment"]["node"]
        assert node["id"] == r["node_id"] and node["type"] == "local"
        assert node["fingerprint"]["cpu"] and len(node["cores"]) == 1
        assert record["document"]["environment"]["node"]["id"] == r["node_id"]
    fast = next(r for r in doc["runs"] if r["workload"].endswith("fast.toml"))
    assert fast["winners"]["1"] == "fake-int8-b1"
    assert swept["result"].exit_code == 0


def test_runs_on_one_node_never_overlap_in_time(swept: dict[str, Any]) -> None:
    by_node: dict[str, list[tuple[float, float]]] = {}
    for r in swept["result"].document["runs"]:
        start, end = api.show_run(r["run_id"], swept["store"])["environment"]["node"]["ran"]
        by_node.setdefault(r["node_id"], []).append((start, end))
    for spans in by_node.values():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert end <= start


def test_a_removed_nodes_workload_is_requeued_and_completed_elsewhere(
    swept: dict[str, Any],
) -> None:
    events = swept["events"]
    slow = next(r for r in swept["result"].document["runs"] if r["workload"].endswith("slow.toml"))
    assert events.removed is not None
    assert slow["attempts"] == 2 and slow["node_id"] != events.removed
    assert any("slow.toml: node" in n and "lost" in n and "requeued" in n for n in events.notes)
    with Store(swept["store"]) as store:
        attempts = store.sweep(swept["result"].sweep_id)["attempts"]
    first = next(a for a in attempts if a["workload"].endswith("slow.toml") and a["attempt"] == 1)
    assert first["status"] == "failed" and first["reason"].startswith("node lost")
    assert swept["seconds"] < 300  # no hang on the dead node


def test_nothing_is_written_outside_the_given_temp_folder(swept: dict[str, Any]) -> None:
    """Not Ray's files, nor those of the bake-offs on the nodes: not even the node that
    was removed mid-run (its scratch folder is inside the given one)."""
    assert not swept["new_in_tmp"], sorted(swept["new_in_tmp"])[:5]
    assert not swept["new_in_home"], sorted(swept["new_in_home"])[:5]
    assert any(p.name.startswith("session_") for p in swept["ray_tmp"].iterdir())


def test_a_finished_sweep_resumed_runs_nothing_again(swept: dict[str, Any]) -> None:
    again = run_sweep(
        [],
        SweepOptions(cluster="local:2", store=swept["store"], resume=swept["result"].sweep_id),
        swept["events"],
    )
    assert again.document["runs"] == swept["result"].document["runs"]
    assert any("3 workload(s) finished before" in n for n in swept["events"].notes)


def test_cluster_arguments_are_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert parse_cluster(None) is None
    assert parse_cluster("local:3").nodes == 3  # type: ignore[union-attr]
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert parse_cluster(None).address == "10.0.0.1:6379"  # type: ignore[union-attr]
    typed = parse_cluster("local:c7i=1,m7a=2")
    assert typed is not None and typed.types == (("c7i", 1), ("m7a", 2)) and typed.nodes == 3
    assert typed.words() == "local:c7i=1,m7a=2" and parse_cluster("local:2").words() == "local:2"  # type: ignore[union-attr]
    for bad in ("local:x", "local:0", "local:c7i=0", "local:=2"):
        with pytest.raises(UserError, match=r"local:N \(N simulated nodes\)"):
            parse_cluster(bad)
    monkeypatch.delenv("RAY_ADDRESS")
    got = CliRunner().invoke(app, ["sweep", "builtin:digits", "--store", str(tmp_path / "s.db")])
    assert isinstance(got.exception, UserError) and "needs --cluster" in str(got.exception)
    store = tmp_path / "new" / "s.db"
    got = CliRunner().invoke(
        app, ["sweep", str(tmp_path / "nope.toml"), "--cluster", "local:1", "--store", str(store)]
    )
    assert isinstance(got.exception, UserError) and "no such workload file" in str(got.exception)
    assert not store.parent.exists()  # refused before the store was made


def test_without_ray_the_cluster_flag_exits_2_with_the_install_command(tmp_path: Path) -> None:
    """In a process where `import ray` fails (a package of that name that raises, first
    on the path), as where the extra is not installed; the single-machine path there
    imports no Ray at all."""
    import subprocess
    import sys

    fake = tmp_path / "no-ray" / "ray"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError(\"No module named 'ray'\")\n")
    env = {
        **os.environ,
        "PYTHONPATH": f"{fake.parent}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    got = subprocess.run(
        [sys.executable, "-m", "bakeoff.cli", "sweep", "builtin:digits", "--cluster", "local:1",
         "--store", str(tmp_path / "s.db")],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert got.returncode == 2, got.stderr
    assert "pip install 'bakeoff[cluster]'" in got.stderr
    got = subprocess.run(
        [sys.executable, "-m", "bakeoff.cli", "train", "builtin:digits-train", "--stacks", "ddp",
         "--cluster", "local:2", "--store", str(tmp_path / "s.db")],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert got.returncode == 2, got.stderr
    assert "pip install 'bakeoff[cluster]'" in got.stderr
    probe = "import sys, bakeoff.cli, bakeoff.api; print('ray' in sys.modules)"
    quiet = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    assert quiet.stdout.strip() == "False", quiet.stderr


@pytest.fixture
def ray_tmp() -> Iterator[Path]:
    """A short folder for Ray's sockets, in the system temp folder, removed after."""
    folder = Path(tempfile.mkdtemp(prefix="bkr-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


# make test keeps Ray in the node-tagged runs test.
@pytest.mark.slow  # a second Ray cluster of its own (~20 s)
def test_per_node_type_measures_on_each_type_and_names_the_cheapest(
    tmp_path: Path, ray_tmp: Path
) -> None:
    """Two machine types, priced: every ok candidate gets USD per million inferences at
    its measured throughput, and objective = "cost" names the lowest."""
    path = Path(_workload(tmp_path / "w", "priced", "{ latency_ms = { fp32 = 2.0, int8 = 1.0 } }"))
    path.write_text(
        path.read_text().replace("[search]\n", '[search]\nobjective = "cost"\n')
        + "[cost]\nusd_per_hour = { big = 0.40, small = 0.10 }\n"
    )
    out = tmp_path / "types.json"
    got = CliRunner().invoke(
        app,
        ["run", str(path), "--cluster", "local:big=1,small=1", "--per-node-type", "--quick",
         "--budget", "2", "--json", str(out), "--store", str(tmp_path / "s" / "bakeoff.db"),
         "--cluster-tmp", str(ray_tmp)],
    )  # fmt: skip
    assert got.exit_code == 0, got.output
    doc = json.loads(out.read_text())
    assert doc["kind"] == "per_node_type" and set(doc["types"]) == {"big", "small"}
    for node_type, t in doc["types"].items():
        assert (
            t["status"] == "done" and t["usd_per_hour"] == {"big": 0.40, "small": 0.10}[node_type]
        )
        assert t["verdicts"][0]["objective"] == "throughput"  # cost on one machine
    ok = [r for r in doc["candidates"] if r["status"] == "ok"]
    assert {r["node_type"] for r in ok} == {"big", "small"}
    for r in ok:
        usd, sps = r["cost"]["usd_per_million"], r["throughput"]["samples_per_s"]
        assert usd == pytest.approx(r["cost"]["usd_per_hour"] / sps / 3600 * 1e6)
        lo, hi = r["cost"]["ci95"]
        assert lo <= usd <= hi
    cheapest = min(ok, key=lambda r: r["cost"]["usd_per_million"])
    verdict = doc["cost_verdict"]
    assert verdict["winner"] == {"node_type": cheapest["node_type"], "candidate": cheapest["id"]}
    assert verdict["winner"]["node_type"] == "small"  # the same speed at a quarter the price
    assert "Cheapest:" in got.output and "USD per million" in got.output


def test_cost_needs_prices_and_per_node_type(tmp_path: Path) -> None:
    path = Path(_workload(tmp_path / "w", "x", "{ latency_ms = 1.0 }"))
    path.write_text(path.read_text().replace("[search]\n", '[search]\nobjective = "cost"\n'))
    got = CliRunner().invoke(app, ["run", str(path), "--cluster", "local:1", "--per-node-type"])
    assert isinstance(got.exception, UserError) and "needs prices" in str(got.exception)
    prices = tmp_path / "prices.toml"
    prices.write_text("usd_per_hour = { a = -1 }\n")
    got = CliRunner().invoke(
        app,
        ["run", str(path), "--cluster", "local:1", "--per-node-type", "--cost-file", str(prices)],
    )
    assert isinstance(got.exception, UserError) and "a price above 0" in str(got.exception)
    got = CliRunner().invoke(app, ["run", str(path), "--per-node-type"])
    assert isinstance(got.exception, UserError) and "go with --cluster" in str(got.exception)


SPLIT = """name = "split"
[model]
kind = "fake"
[data]
path = "d.npz"
[search]
batch_sizes = [1]
"""


def _split_workload(folder: Path, candidates: dict[str, str]) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / "d.npz", input=np.random.default_rng(0).random((32, 8), dtype=np.float32))
    text = SPLIT + "".join(
        f'[[candidates]]\nlabel = "{label}"\nruntime = "fake"\noptions = {options}\n'
        for label, options in candidates.items()
    )
    (folder / "split.toml").write_text(text)
    return str(folder / "split.toml")


def _split(workload: str, tmp_path: Path, events: Any, **options: Any) -> dict[str, Any]:
    from bakeoff.cluster.split import run_split

    run_options = {"quick": True, "budget_s": 2, **options}
    keys, baseline = api.plan_shares(workload, api.RunOptions(**run_options))
    ray_tmp = Path(tempfile.mkdtemp(prefix="bkr-", dir="/tmp"))
    try:
        return run_split(
            workload, run_options, keys, baseline, "local:2", ray_tmp,
            tmp_path / "s" / "bakeoff.db", events, heartbeat_s=1.0,
        )  # fmt: skip
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)


# make test keeps Ray in the node-tagged runs test.
@pytest.mark.slow  # a second Ray cluster of its own (~20 s)
def test_split_judges_each_candidate_by_its_ratio_on_its_node_and_survives_a_lost_node(
    tmp_path: Path,
) -> None:
    """Four candidates over two nodes, each running the baseline too; the node with the
    stuck candidate is removed mid-run: its share fails "node lost", the other
    finishes, and nothing hangs."""
    wl = _split_workload(
        tmp_path / "w",
        {
            "base": "{ latency_ms = 2.0 }",
            "fast": "{ latency_ms = 1.6 }",
            "slow": "{ latency_ms = 2.5 }",
            "same": "{ latency_ms = 2.0 }",
            "stuck": "{ latency_ms = 2.0, wall_ms = 500.0 }",  # its node goes first
        },
    )
    events = _RemoveSlowNode(victim="stuck")
    started = time.perf_counter()
    doc = _split(wl, tmp_path, events)
    assert time.perf_counter() - started < 300
    assert doc["kind"] == "split" and doc["baseline"] == "base"
    by = {c["key"]: c for c in doc["candidates"]}
    assert set(by) == {"fast", "slow", "same", "stuck"}
    lost = [n for n in doc["nodes"] if n["status"] == "failed"]
    assert [n["node_id"] for n in lost] == [events.removed]
    assert lost[0]["reason"].startswith("node lost") and "stuck" in lost[0]["share"]
    for key in lost[0]["share"][1:]:
        assert by[key]["status"] == "failed" and by[key]["reason"].startswith("node lost")
    survivors = [k for k in by if k not in lost[0]["share"]]
    assert survivors and all(by[k]["status"] == "ok" for k in survivors)
    expected = {"fast": (0.8, "faster"), "slow": (1.25, "slower"), "same": (1.0, "equivalent")}
    for key in survivors:
        true, decision = expected[key]
        lo, hi = by[key]["ratio"]["ci"]
        assert lo <= true <= hi and by[key]["ratio"]["decision"] == decision, by[key]
    [verdict] = doc["verdicts"]
    assert verdict["leader"].rsplit("-b", 1)[0] in survivors
    store_runs = {n["run_id"] for n in doc["nodes"] if n["run_id"]}
    for run_id in store_runs:  # each node's share is an ordinary run, tagged
        node = api.show_run(run_id, tmp_path / "s" / "bakeoff.db")["environment"]["node"]
        assert node["split_share"][0] == "base"


# make test keeps Ray in the node-tagged runs test.
@pytest.mark.slow  # a second Ray cluster of its own (~25 s)
def test_a_candidate_on_several_nodes_is_pooled_over_them(tmp_path: Path) -> None:
    wl = _split_workload(
        tmp_path / "w", {"base": "{ latency_ms = 2.0 }", "fast": "{ latency_ms = 1.6 }"}
    )
    doc = _split(wl, tmp_path, _RemoveSlowNode(victim="nothing"))
    [fast] = doc["candidates"]
    assert len(fast["node_ids"]) == 2 and len(fast["ratio"]["per_node"]) == 2
    lo, hi = fast["ratio"]["ci"]
    assert lo <= 0.8 <= hi and fast["ratio"]["decision"] == "faster"


def test_the_split_deals_candidates_round_robin() -> None:
    from bakeoff.cluster.split import deal

    assert deal(["a", "b", "c"], "base", 2) == [["base", "a", "c"], ["base", "b"]]
    assert deal(["a"], "base", 2) == [["base", "a"], ["base", "a"]]
    assert deal(["a", "b"], "base", 5) == [
        ["base", "a"], ["base", "a"], ["base", "b"], ["base", "b"]
    ]  # fmt: skip
