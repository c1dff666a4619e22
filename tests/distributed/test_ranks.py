"""The multi-process and framework-loop training stacks on the real libraries: DDP,
FSDP2, DeepSpeed and Lightning's DDP strategy in two ranks under real torchrun,
over gloo, and Lightning's `Trainer.fit` and fastai's `Learner.fit` in one process,
on the digits CNN.

make test runs DDP through a whole run beside torch (its scaling references and
communication share are the run's), and trains FSDP, DeepSpeed, Lightning and fastai
for a few steps in a worker of their own; the whole run of all of them together is
`slow`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import psutil
import pytest

from bakeoff import stacks
from bakeoff.stacks.spec import TrainSpec
from bakeoff.training.messages import TrainJob
from bakeoff.trials.jobs import Exit
from bakeoff.trials.launcher import LocalLauncher, WorkerFailed
from short_recipe import short_run, steps_like_the_reference, train_alone, trains_like_the_reference

STACKS = ("torch", "ddp", "fsdp", "lightning", "fastai")


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return short_run(tmp_path_factory.mktemp("ddp"), ("torch", "ddp"))


@pytest.fixture(scope="module")
def alone(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    return train_alone(
        tmp_path_factory.mktemp("alone"), ("torch", "fsdp", "deepspeed", "lightning", "fastai")
    )


@pytest.fixture(scope="module")
def all_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return short_run(tmp_path_factory.mktemp("all"), STACKS)


def test_ddp_trains_in_two_ranks_and_says_how_it_scales(ddp_run: dict) -> None:
    by = {c["id"]: c for c in ddp_run["candidates"]}
    # The scaling references are timed beside them, but they are no candidate.
    assert list(by) == ["torch", "ddp"]
    two_ranks_and_scaling(by["ddp"], by["torch"])


def test_fsdp_shards_over_two_ranks_and_reloads_its_distributed_checkpoint_alone(
    alone: dict[str, dict],
) -> None:
    fsdp = alone["fsdp"]
    steps_like_the_reference(fsdp, alone["torch"])
    assert fsdp["settings"]["sharding"] == "FSDP2 fully_shard"
    assert fsdp["settings"]["processes"] == 2 and len(fsdp["peak_rss_mb_ranks"]) == 2
    # Every rank wrote its own shards (DCP) and read them back in place.
    assert fsdp["checkpoint"]["format"].startswith("torch.distributed.checkpoint")
    assert fsdp["communication_share"] is None  # FSDP2 has no communication hook


def test_lightning_trains_in_one_process_through_its_own_loop_alone(
    alone: dict[str, dict],
) -> None:
    lit = alone["lightning"]
    steps_like_the_reference(lit, alone["torch"])
    assert lit["settings"]["loop"] == "Trainer.fit"
    assert lit["settings"]["framework"].startswith("lightning ")
    assert len(lit["peak_rss_mb_ranks"]) == 1
    assert lit["checkpoint"]["format"].startswith("Lightning checkpoint")


def test_fastai_trains_through_its_learner_alone(alone: dict[str, dict]) -> None:
    """fastai's own loop (`Learner.fit`, its callbacks) takes the reference's steps
    from the same weights, and its own checkpoint brings them back."""
    fastai = alone["fastai"]
    steps_like_the_reference(fastai, alone["torch"])
    assert fastai["settings"]["loop"] == "Learner.fit"
    assert fastai["settings"]["framework"].startswith("fastai 2.")
    assert len(fastai["peak_rss_mb_ranks"]) == 1
    assert fastai["checkpoint"]["format"].startswith("fastai checkpoint")


@pytest.mark.slow
def test_ddp_fsdp_lightning_and_fastai_in_one_run(all_run: dict) -> None:
    by = {c["id"]: c for c in all_run["candidates"]}
    assert list(by) == list(STACKS)
    two_ranks_and_scaling(by["ddp"], by["torch"])
    fastai = by["fastai"]
    assert fastai["status"] == "ok", fastai["reason"]
    assert fastai["checkpoint"]["reload_identical"] is True
    trains_like_the_reference(fastai, by["torch"])


@pytest.mark.slow
def test_lightning_ddp_trains_in_two_ranks_and_says_how_it_scales(tmp_path: Path) -> None:
    """Slow (make test-slow): Lightning's DDP strategy is Lightning's loop (tested in
    one process below) over the rank machinery ddp's test covers; with its two scaling
    references it added a fifth of the distributed run's minutes to make test."""
    by = {c["id"]: c for c in short_run(tmp_path, ("torch", "lightning-ddp"))["candidates"]}
    two_ranks_and_scaling(by["lightning-ddp"], by["torch"])


def two_ranks_and_scaling(mine: dict, torch: dict) -> None:
    assert mine["status"] == "ok", mine["reason"]
    assert mine["processes"] == 2 and mine["threads_per_process"] == 1
    assert mine["settings"]["backend"] == "gloo" and mine["settings"]["launcher"] == "torchrun"
    assert mine["settings"]["micro_batch"] == 32
    peak = mine["peak_rss_mb"]
    assert len(peak["ranks"]) == 2 and peak["sum"] == pytest.approx(sum(peak["ranks"]))
    assert peak["max_rank"] == max(peak["ranks"]) > 0
    sps = mine["samples_per_s"]
    assert sps["ci95"][0] <= sps["value"] <= sps["ci95"][1]
    scaling = mine["scaling"]
    # Its own samples/s over the 1-process references', each timed in the same rounds.
    assert scaling["efficiency_vs_one_process"] == pytest.approx(
        sps["value"] / scaling["one_process_samples_per_s"]
    )
    assert scaling["efficiency_vs_one_thread"] == pytest.approx(
        sps["value"] / (2 * scaling["one_thread_samples_per_s"])
    )
    assert 0 < scaling["communication_share"] < 1
    # Both ranks reloaded the checkpoint and took the same step to the same loss.
    assert mine["checkpoint"]["reload_identical"] is True
    trains_like_the_reference(mine, torch)


@pytest.mark.slow
def test_fsdp_shards_over_two_ranks_and_reloads_its_distributed_checkpoint(
    all_run: dict,
) -> None:
    by = {c["id"]: c for c in all_run["candidates"]}
    fsdp = by["fsdp"]
    assert fsdp["status"] == "ok", fsdp["reason"]
    assert fsdp["processes"] == 2 and fsdp["settings"]["sharding"] == "FSDP2 fully_shard"
    assert len(fsdp["peak_rss_mb"]["ranks"]) == 2
    # Every rank wrote its own shards (DCP) and read them back in place.
    ck = fsdp["checkpoint"]
    assert ck["reload_identical"] is True and ck["format"].startswith(
        "torch.distributed.checkpoint"
    )
    assert ck["size_mb"] > 0
    scaling = fsdp["scaling"]
    assert scaling["efficiency_vs_one_process"] > 0 and scaling["efficiency_vs_one_thread"] > 0
    # FSDP2 has no communication hook: not timed, and said so rather than a 0.
    assert scaling["communication_share"] is None and "not timed" in scaling["reason"]
    trains_like_the_reference(fsdp, by["torch"])


@pytest.mark.slow
def test_deepspeed_runs_zero_2_on_its_cpu_accelerator(tmp_path: Path) -> None:
    """Slow (make test-slow): the whole run, with its scaling references."""
    by = {c["id"]: c for c in short_run(tmp_path, ("torch", "deepspeed"))["candidates"]}
    ds = by["deepspeed"]
    assert ds["status"] == "ok", ds["reason"]
    assert ds["processes"] == 2 and ds["settings"]["zero_stage"] == 2
    assert ds["settings"]["accelerator"] in ("cpu", "cuda")
    assert ds["checkpoint"]["reload_identical"] is True
    assert ds["checkpoint"]["format"].startswith("DeepSpeed checkpoint")
    assert ds["scaling"]["efficiency_vs_one_process"] > 0
    assert ds["scaling"]["communication_share"] is None
    trains_like_the_reference(ds, by["torch"])


def test_deepspeed_steps_zero_2_on_its_cpu_accelerator_alone(alone: dict[str, dict]) -> None:
    """DeepSpeed's few steps in make test, without compiling its shared-memory op
    (only its inference calls it; on a CPU it took 40 s of gcc a session); its
    scaling is the slow test's."""
    ds = alone["deepspeed"]
    steps_like_the_reference(ds, alone["torch"])
    assert ds["settings"]["processes"] == 2 and ds["settings"]["zero_stage"] == 2
    assert len(ds["peak_rss_mb_ranks"]) == 2
    assert ds["checkpoint"]["format"].startswith("DeepSpeed checkpoint")
    if ds["settings"]["accelerator"] == "cpu":
        assert ds["settings"]["shm_comm_op"].startswith("not built")


def test_deepspeed_is_installed_with_the_train_extra() -> None:
    assert stacks.availability("deepspeed") is None


def test_fastai_is_installed_beside_the_cpu_torch_without_torchvision() -> None:
    """make test installs fastai as `make fastai` does: without the torchvision it
    requires, whose wheel is built for CUDA torch and fails to import beside ours."""
    import importlib.metadata
    import importlib.util

    assert stacks.availability("fastai") is None
    assert importlib.metadata.version("torch") == "2.13.0+cpu"
    assert importlib.util.find_spec("torchvision") is None


@pytest.mark.slow
def test_lightning_trains_in_one_process_through_its_own_loop(all_run: dict) -> None:
    by = {c["id"]: c for c in all_run["candidates"]}
    lit = by["lightning"]
    assert lit["status"] == "ok", lit["reason"]
    assert lit["processes"] == 1 and lit["threads_per_process"] == 2
    assert lit["settings"]["loop"] == "Trainer.fit"
    assert lit["settings"]["framework"].startswith("lightning ")
    assert lit["scaling"] is None and by["torch"]["scaling"] is None
    assert "ranks" not in lit["peak_rss_mb"]
    assert 0 <= lit["data_wait_share"] < 1
    ck = lit["checkpoint"]
    assert ck["reload_identical"] is True and ck["format"].startswith("Lightning checkpoint")
    trains_like_the_reference(lit, by["torch"])


# make test keeps a rank that fails to start.
@pytest.mark.slow  # torchrun ranks started to be killed (~11 s)
def test_a_killed_worker_takes_its_ranks_with_it(
    tmp_path: Path, digits_train_spec: Callable[..., TrainSpec]
) -> None:
    """The worker is the engine's only handle on the stack: when it is killed (a
    hang, a timeout), torchrun and every rank go with it, nothing left running."""
    spec = digits_train_spec(stack="ddp", threads=2, processes=2)
    worker = LocalLauncher(tmp_path / "logs").start(TrainJob(train=spec), "ddp")
    try:
        ready = worker.reply(300)
        assert ready["settings"]["processes"] == 2
        ranks = psutil.Process(worker.proc.pid).children(recursive=True)
        assert len(ranks) >= 3  # torchrun and its two ranks
        worker.proc.kill()
        worker.proc.wait()
        _, alive = psutil.wait_procs(ranks, timeout=60)
        assert not alive, [p.cmdline() for p in alive]
    finally:
        worker.close()


# make test keeps a rank that fails to start.
@pytest.mark.slow  # torchrun ranks started to be closed (~11 s)
def test_a_worker_that_exits_closes_its_ranks(
    tmp_path: Path, digits_train_spec: Callable[..., TrainSpec]
) -> None:
    """The usual end: Exit reports each rank's peak memory, then the ranks stop."""
    spec = digits_train_spec(stack="ddp", threads=2, processes=2)
    worker = LocalLauncher(tmp_path / "logs").start(TrainJob(train=spec), "ddp")
    try:
        worker.reply(300)
        ranks = psutil.Process(worker.proc.pid).children(recursive=True)
        said = worker.request(Exit(), 120)
        assert len(said["worker"]["peak_rss_mb_ranks"]) == 2
        _, alive = psutil.wait_procs(ranks, timeout=60)
        assert not alive
    finally:
        worker.close()


def test_a_batch_that_does_not_split_over_the_ranks_is_unavailable(tmp_path: Path) -> None:
    """Said before anything trains (the run marks the stack so, `why_unavailable`)."""
    from bakeoff.builtins import digits
    from bakeoff.training.pipeline import candidate, why_unavailable
    from bakeoff.training.recipe import load_recipe

    x_train, y_train, x_val, y_val = digits.train_and_validation()
    np.savez(tmp_path / "d.npz", x_train=x_train, y_train=y_train, x_val=x_val, y_val=y_val)
    (tmp_path / "recipe.toml").write_text(
        'name = "odd"\n[model]\nkind = "torch"\nfactory = "bakeoff.builtins.digits:untrained"\n'
        '[train]\ndata = "d.npz"\nlr = 0.002\nbatch_size = 63\nsteps = 20\n'
        'stacks = ["torch", "ddp"]\ntarget = { value = 0.5 }\n'
    )
    recipe = load_recipe(str(tmp_path / "recipe.toml"), quick=True)
    assert why_unavailable(candidate("torch", recipe, None), recipe, threads=2) is None
    why = why_unavailable(candidate("ddp", recipe, None), recipe, threads=2)
    assert why is not None and "63" in why and "2 processes" in why


def test_a_rank_that_fails_to_start_says_why_in_the_workers_error(
    tmp_path: Path, digits_train_spec: Callable[..., TrainSpec]
) -> None:
    """What a rank raised reaches the engine as the worker's error, not as a closed
    socket (the group waits for torchrun to end before the worker answers)."""
    spec = digits_train_spec(stack="ddp", threads=2, processes=2, batch_size=63)
    worker = LocalLauncher(tmp_path / "logs").start(TrainJob(train=spec), "ddp")
    try:
        # Both ranks raise it; whichever the group hears of first is the one named.
        with pytest.raises(WorkerFailed, match=r"rank [01]: ValueError: .*63.* 2 processes"):
            worker.reply(300)
    finally:
        worker.close()


def test_only_a_rank_with_the_groups_token_takes_a_ranks_place() -> None:
    """Any local process can reach the loopback port the ranks connect to: one that
    does not know the token, or says nothing, is dropped, and the real rank is kept."""
    import json
    import socket
    import subprocess
    import sys
    from multiprocessing.connection import Connection

    from bakeoff.distributed.ranks import RankGroup

    group = RankGroup.__new__(RankGroup)
    group.processes, group.token = 1, "the-token"
    group.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    try:
        impostor = Connection(socket.create_connection(("127.0.0.1", port)).detach())
        impostor.send_bytes(json.dumps({"rank": 0, "token": "a guess"}).encode())
        rank = Connection(socket.create_connection(("127.0.0.1", port)).detach())
        rank.send_bytes(json.dumps({"rank": 0, "token": "the-token"}).encode())
        (kept,) = group._accept(listener)
        kept.send_bytes(b"for the rank")
        assert rank.recv_bytes() == b"for the rank"
        with pytest.raises(EOFError):
            impostor.recv_bytes()  # its connection was closed
    finally:
        listener.close()
        group.proc.kill()
        group.proc.wait()
