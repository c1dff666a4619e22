"""DDP across the nodes of a real Ray cluster of simulated nodes (`bakeoff train
--cluster local:2`), through Ray Train's real TorchTrainer over gloo (issue 23):
the 2-node candidate measured like the single-node one, with its samples/s CI,
scaling efficiency against itself on one node and the all-reduce's share of step
time, each rank pinned to its own node's cores. The arguments' checks need no
cluster. The training across nodes is `slow` (a minute of a 2-core machine): Ray
itself is in make test through the sweeps' cluster (tests/cluster/test_sweep.py), and ddp
through torchrun (tests/distributed/test_ranks.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from bakeoff import api
from bakeoff.cli import app
from bakeoff.errors import UserError
from bakeoff.store import Store
from extras import require_module
from short_recipe import SHORT_RECIPE

require_module("ray", "pip install 'bakeoff[cluster]'")


def _listing(folder: Path) -> set[str]:
    return {str(p) for p in folder.rglob("*")} if folder.exists() else set()


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("cluster-train")
    recipe = root / "recipe.toml"
    # The user's model module says where each process imported it from: the ranks
    # import the copy shipped to their nodes, not the recipe's folder.
    imports = root / "imported-from.txt"
    (root / "digits_model.py").write_text(
        "from bakeoff.builtins.digits import untrained as build\n"
        f"with open({str(imports)!r}, 'a') as f:\n"
        "    f.write(__file__ + '\\n')\n"
    )
    factory = 'factory = "bakeoff.builtins.digits:untrained"'
    assert factory in SHORT_RECIPE
    recipe.write_text(SHORT_RECIPE.replace(factory, 'factory = "digits_model:build"'))
    # Ray's sockets need a short path: the given temp folder sits in the system's.
    ray_tmp = Path(tempfile.mkdtemp(prefix="bkt-", dir="/tmp"))
    home = Path(os.environ["HOME"])
    home_before = _listing(home)
    got = CliRunner().invoke(
        app,
        ["train", str(recipe), "--stacks", "ddp", "--cluster", "local:2",
         "--cluster-tmp", str(ray_tmp), "--quick", "--seeds", "1", "--budget", "5",
         "--store", str(root / "s.db"), "--json", str(root / "out.json")],
    )  # fmt: skip
    yield {
        "exit_code": got.exit_code,
        "output": got.output,
        "exception": got.exception,
        "doc": json.loads((root / "out.json").read_text()) if got.exit_code == 0 else None,
        "imported_from": imports.read_text().splitlines() if imports.exists() else [],
        "recipe_folder": root,
        # Not Ray Train's ~/ray_results. (The tests' TMPDIR and torch's compile cache
        # are under their HOME, where conftest puts them.)
        "new_in_home": _listing(home)
        - home_before
        - _listing(home / "tmp")
        - {str(home / "inductor")},
    }
    shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.mark.slow
def test_ddp_trains_across_two_nodes_with_its_scaling_against_one_node(
    trained: dict[str, Any],
) -> None:
    assert trained["exit_code"] == 0, (trained["output"], trained["exception"])
    doc = trained["doc"]
    assert doc["environment"]["cluster"] == {"spec": "local:2", "nodes": 2}
    # The ranks imported the user's module from its copy on their nodes.
    shipped = [f for f in trained["imported_from"] if Path(f).parent != trained["recipe_folder"]]
    assert shipped, trained["imported_from"]
    assert all("bakeoff-rank-" in f and f.endswith("factory/digits_model.py") for f in shipped)
    # No GEMM peak of this machine: every candidate trained on the nodes.
    assert "every stack trains on the cluster's nodes" in doc["peaks"]["fp32"]["why"]
    # The one-node reference is timed beside it, but it is no candidate.
    [ddp] = doc["candidates"]
    assert ddp["id"] == "ddp" and ddp["status"] == "ok", ddp["reason"]
    assert ddp["nodes"] == 2 and ddp["processes"] == 2
    sps = ddp["samples_per_s"]
    assert sps["value"] > 0 and sps["ci95"][0] <= sps["value"] <= sps["ci95"][1]
    scaling = ddp["scaling"]
    assert scaling["nodes"] == 2 and scaling["one_node_samples_per_s"] > 0
    assert scaling["efficiency_vs_one_node"] == pytest.approx(
        sps["value"] / (2 * scaling["one_node_samples_per_s"])
    )
    # DDP's communication hook timed the all-reduce inside the ranks, across nodes.
    assert 0 < scaling["communication_share"] < 1
    # Trained like the single-node stack: a seed to its end, a checkpoint reloaded.
    [seed] = ddp["seeds"]
    assert not seed["diverged"] and seed["final_metric"] > 0.5
    assert ddp["checkpoint"]["reload_identical"]
    assert ddp["peak_rss_mb"]["ranks"] and len(ddp["peak_rss_mb"]["ranks"]) == 2


@pytest.mark.slow
def test_each_rank_ran_on_a_node_of_its_own_pinned_to_that_nodes_cores(
    trained: dict[str, Any],
) -> None:
    settings = trained["doc"]["candidates"][0]["settings"]
    assert settings["launcher"] == "Ray Train TorchTrainer" and settings["backend"] == "gloo"
    nodes = settings["nodes"]
    assert len({n["id"] for n in nodes}) == 2
    # Each simulated node's share of this machine's cores, and no core in both.
    first, second = (set(n["cores"]) for n in nodes)
    assert first and second and not first & second
    assert first | second <= os.sched_getaffinity(0)
    assert all(1 <= n["threads"] <= len(n["cores"]) for n in nodes)


@pytest.mark.slow
def test_the_table_says_how_ddp_scaled_across_nodes(trained: dict[str, Any]) -> None:
    out = " ".join(trained["output"].split())
    assert "ddp: 2 nodes x 1 rank x" in out
    assert "against 2x itself in 1 rank on one node" in out
    assert "the all-reduce in flight" in out
    # The run's resume command, said first, brings the cluster back.
    assert re.search(r"`bakeoff train --resume train-\S+ .*?--cluster local:2`", out)


@pytest.mark.slow
def test_ray_train_writes_nothing_under_home(trained: dict[str, Any]) -> None:
    assert not trained["new_in_home"], sorted(trained["new_in_home"])[:20]


def test_a_cluster_is_for_ddp_on_two_nodes_or_more(tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(SHORT_RECIPE)
    two = api.NodeCluster("127.0.0.1:1", 2, "local:2", str(tmp_path))
    with pytest.raises(UserError, match="only ddp trains across a cluster's nodes"):
        api.train(str(recipe), api.TrainOptions(stacks=("torch",), cluster=two))
    one = api.NodeCluster("127.0.0.1:1", 1, "local:1", str(tmp_path))
    with pytest.raises(UserError, match="needs 2 bakeoff nodes or more; the cluster has 1"):
        api.train(str(recipe), api.TrainOptions(stacks=("ddp",), cluster=one))
    got = CliRunner().invoke(app, ["train", str(recipe), "--cluster-tmp", str(tmp_path)])
    assert isinstance(got.exception, UserError)
    assert "--cluster-tmp goes with --cluster" in str(got.exception)


def test_a_run_resumes_on_as_many_nodes_as_it_started_on(tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(SHORT_RECIPE)
    on_nodes = {"run_id": "r1", "settings": {"cluster": "local:2", "cluster_nodes": 2}}
    here = {"run_id": "r2", "settings": {"cluster": None}}
    plain = api.TrainOptions(stacks=("ddp",))
    with pytest.raises(UserError, match="resume it with --cluster local:2"):
        api.train(str(recipe), plain, resume_record=on_nodes)
    three = api.NodeCluster("127.0.0.1:1", 3, "local:3", str(tmp_path))
    with_three = api.TrainOptions(stacks=("ddp",), cluster=three)
    with pytest.raises(UserError, match="trained across 2 nodes; --cluster local:3 has 3"):
        api.train(str(recipe), with_three, resume_record=on_nodes)
    with pytest.raises(UserError, match="trained on this machine alone"):
        api.train(str(recipe), with_three, resume_record=here)


def test_what_a_run_or_resume_would_refuse_is_refused_before_a_cluster_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "s.db"
    with Store(store) as s:
        for run_id, status, cluster in (
            ("train-here", "interrupted", None),
            ("train-done", "done", "local:2"),
        ):
            settings = {"kind": "train", "recipe_digest": "d", "cluster": cluster}
            s.start_run(run_id, "mlp", {}, settings)
            s.finish_run(run_id, status, None)

    def no_cluster(*args: Any) -> None:
        raise AssertionError("a cluster was started for a resume its run's record refuses")

    monkeypatch.setattr("bakeoff.distributed.session.connect", no_cluster)
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(SHORT_RECIPE)
    for args, said in (
        (["--resume", "train-here"], "trained on this machine alone: resume it without --cluster"),
        (["--resume", "train-done"], "already finished"),
        (["--resume", "train-none"], "train-none"),
        ([str(recipe), "--stacks", "torch"], "only ddp trains across a cluster's nodes"),
        ([str(recipe), "--stacks", "dpp"], "no training stack 'dpp'"),
        ([str(tmp_path / "none.toml")], "no such training recipe"),
    ):
        got = CliRunner().invoke(
            app, ["train", *args, "--cluster", "local:2", "--store", str(store)]
        )
        assert isinstance(got.exception, UserError), got.output
        assert said in str(got.exception)


@pytest.mark.slow
def test_a_node_removed_mid_training_fails_the_trial_with_node_lost(tmp_path: Path) -> None:
    """A seed trained across local:2 whose second node is removed once both ranks are
    stepping: the worker fails at once, saying which node was lost (no hang)."""
    import threading
    import time

    import ray

    from bakeoff.distributed.session import connect, parse_cluster
    from bakeoff.stacks.spec import TrainSpec
    from bakeoff.training.messages import TargetJob
    from bakeoff.trials.launcher import LocalLauncher, WorkerFailed
    from short_recipe import write_digits_and_init

    data, init = write_digits_and_init(tmp_path)
    ray_tmp = Path(tempfile.mkdtemp(prefix="bkl-", dir="/tmp"))
    removed: list[str] = []
    try:
        with connect(parse_cluster("local:2"), ray_tmp) as session:
            spec = TrainSpec(
                stack="ddp", factory="bakeoff.builtins.digits:untrained", init_path=str(init),
                data_path=str(data), seed=0, batch_size=64, lr=2e-3, threads=2,
                processes=2, cluster_address=session.address, cluster_tmp=str(ray_tmp),
            )  # fmt: skip
            # Far more steps than the test waits for: the node goes mid-training.
            job = TargetJob(train=spec, max_steps=10**6, eval_every=10**6, target=1.0)

            def remove_when_training() -> None:
                # Each rank writes its shipped files into a folder of its own under the
                # cluster's temp folder just before it connects back and steps.
                deadline = time.monotonic() + 240
                while len(list(ray_tmp.glob("bakeoff-rank-*"))) < 2:
                    if time.monotonic() > deadline:
                        return
                    time.sleep(0.5)
                time.sleep(5)  # connected, and stepping
                victim = session.simulated.list_all_nodes()[-1]
                removed.append(victim.node_id)
                session.simulated.remove_node(victim)

            threading.Thread(target=remove_when_training, daemon=True).start()
            started = time.monotonic()
            with pytest.raises(WorkerFailed) as failed:
                LocalLauncher(tmp_path / "logs").run(job, "ddp-nodes", 300)
            assert time.monotonic() - started < 290
            assert removed and f"node lost: {removed[0]}" in str(failed.value)
            assert ray.is_initialized()
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
