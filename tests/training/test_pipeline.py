"""The training bake-off on real PyTorch: the digits CNN on the torch stacks, through
the trial engine's interleaved rounds and a fresh worker per seed."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from bakeoff import api, stacks
from bakeoff.cli import app
from bakeoff.errors import UserError
from bakeoff.stacks.spec import TrainSpec
from bakeoff.training.candidate import TrainCandidate
from bakeoff.training.gate import FirstLossGate
from bakeoff.training.messages import JOBS, TargetJob, TrainJob
from bakeoff.trials.jobs import message_from_json
from bakeoff.trials.launcher import LocalLauncher
from front_door import call
from short_recipe import SHORT_RECIPE
from widths import WIDTHS, assert_fits, printed_at

# What every candidate of a training document carries (the interface other work
# relies on); `scaling` is null but for the multi-process stacks.
CANDIDATE_KEYS = {
    "id",
    "stack",
    "status",
    "reason",
    "processes",
    "threads_per_process",
    "samples_per_s",
    "data_wait_share",
    "peak_rss_mb",
    "seeds",
    "time_to_target_s",
    "final_metric",
    "checkpoint",
    "compile_s",
    "trainable_parameters",
    "scaling",
}
VERDICT_KEYS = {"objective", "winner", "baseline", "ratio", "ranking", "ties", "reason"}


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("train")
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("BAKEOFF_GEMM_PEAK", raising=False)  # the efficiency is checked here
        return _trained(root)


def _trained(root: Path) -> dict:
    # The built-in's model and data at 60 steps rather than its 200: the seeds' curves,
    # checkpoints and verdicts are the same things to check, in less of make test.
    recipe = root / "recipe.toml"
    recipe.write_text(SHORT_RECIPE)
    result = api.train(
        str(recipe),
        api.TrainOptions(
            stacks=("torch", "torch-bf16", "torch-accumulate"),
            seeds=2,
            quick=True,
            budget_s=5,  # the minimum 5 rounds, then a close call stops at once
            store=root / "s.db",
            tensorboard=root / "tb",
        ),
    )
    assert result.exit_code == 0
    return {**result.document, "tensorboard": str(root / "tb"), "store": str(root / "s.db")}


def test_the_report_of_a_training_run_has_its_charts_and_table(
    trained: dict, tmp_path: Path
) -> None:
    """`bakeoff report` on a training run: bars for samples/s (with CIs), memory and
    time to target; a loss and a validation curve per stack; every stack's row."""
    page, md = tmp_path / "r.html", tmp_path / "r.md"
    store = trained["store"]
    for fmt, path in (("html", page), ("md", md)):
        done = CliRunner().invoke(
            app, ["report", trained["run_id"], "--format", fmt, "-o", str(path), "--store", store]
        )
        assert done.exit_code == 0, done.output
    html = page.read_text()
    for section in ("verdict", "speed-memory", "curves", "results", "recipe"):
        assert f'id="section-{section}"' in html
    assert "<script" not in html and "http://" not in html.replace("http://www.w3.org", "")
    n = len(trained["candidates"])
    reached = sum(1 for c in trained["candidates"] if c["time_to_target_s"])
    for chart, bars in (
        ("train-throughput", n),
        ("train-memory", n),
        ("train-time-to-target", reached),
    ):
        if bars:
            start = html.index(f'id="{chart}"')
            assert html[start : html.index("</svg>", start)].count('class="bar"') == bars
    throughput = html[html.index('id="train-throughput"') :]
    assert throughput[: throughput.index("</svg>")].count('class="ci"') == n
    for chart in ("train-loss", "train-metric"):
        start = html.index(f'id="{chart}"')
        assert html[start : html.index("</svg>", start)].count('class="line"') == n
    for c in trained["candidates"]:
        assert f"<td>{c['id']}</td>" in html
    text = md.read_text()
    assert "highest samples/s" in text and text.count("| torch |") == 1


def test_compare_takes_two_training_runs_stack_by_stack(trained: dict) -> None:
    """Compare the run with itself: every stack's samples/s B/A is 1, and 'same'."""
    from bakeoff import compare

    cmp = compare.compare(trained["run_id"], trained["run_id"], trained["store"])
    assert sorted(r.candidate for r in cmp.rows) == sorted(c["id"] for c in trained["candidates"])
    for r in cmp.rows:
        assert r.objective == "throughput" and r.ratio == pytest.approx(1.0)
        assert r.ratio_lo <= 1.0 <= r.ratio_hi and r.change == "same"


def test_every_stack_is_measured_with_a_ci_over_rounds_and_its_seeds(trained: dict) -> None:
    doc = trained
    assert doc["kind"] == "train" and doc["schema_version"] == 1 and doc["run_id"]
    assert doc["peaks"]["fp32"]["gflops"] > 0
    assert {"workload", "environment", "candidates", "verdicts"} <= set(doc)
    assert [c["id"] for c in doc["candidates"]] == ["torch", "torch-bf16", "torch-accumulate"]
    for c in doc["candidates"]:
        assert set(c) >= CANDIDATE_KEYS, CANDIDATE_KEYS - set(c)
        assert c["status"] == "ok", c["reason"]
        sps = c["samples_per_s"]
        assert sps["ci95"][0] <= sps["value"] <= sps["ci95"][1] and sps["value"] > 0
        assert 0 <= c["data_wait_share"] < 1
        assert c["peak_rss_mb"]["max_rank"] > 0 and c["threads_per_process"] >= 1
        assert [s["seed"] for s in c["seeds"]] == [0, 1]
        for s in c["seeds"]:
            assert not s["diverged"] and 0 < s["final_metric"] <= 1
            assert s["time_to_target_s"] is None or s["time_to_target_s"] > 0
            assert len(s["losses"]) == s["steps"]
        # Two seeds: their mean, not an olympic score (that needs five).
        assert c["time_to_target_s"]["method"] == "mean"
        assert c["final_metric"]["reference"] == doc["candidates"][0]["final_metric"]["mean"]
        # One step's GEMM work (see the hand count below), at the measured rate, as a
        # share of this machine's GEMM peak for the stack's precision.
        assert c["flops_per_step"] == 64 * 2_006_784
        eff = c["efficiency"]
        assert eff["flops_per_step"] == c["flops_per_step"] and 0 < eff["fraction"] < 1
        assert eff["achieved_gflops"] == pytest.approx(
            c["flops_per_step"] * sps["value"] / 64 / 1e9, rel=1e-3
        )
        assert eff["precision"] == ("bf16" if c["id"] == "torch-bf16" else "fp32")
        # Saved, one more step, loaded, the same step again: the same loss, bit for bit.
        ck = c["checkpoint"]
        assert ck["reload_identical"] is True and ck["size_mb"] > 0
        assert ck["save_s"] >= 0 and ck["load_s"] >= 0
    by = {c["id"]: c for c in doc["candidates"]}
    # The digits CNN: two convolutions and two dense layers, every weight trained.
    cnn = (1 * 16 * 9 + 16) + (16 * 32 * 9 + 32) + (512 * 64 + 64) + (64 * 10 + 10)
    assert {c["trainable_parameters"] for c in doc["candidates"]} == {cnn}
    assert by["torch-accumulate"]["settings"]["accumulation_steps"] == 2
    assert by["torch-bf16"]["settings"]["precision"] == "bf16 autocast"
    # The same initial weights and data order: accumulating two halves reaches the
    # same final accuracy as the whole batch at once, seed by seed.
    for mine, ref in zip(by["torch-accumulate"]["seeds"], by["torch"]["seeds"], strict=True):
        assert mine["final_metric"] == pytest.approx(ref["final_metric"], abs=0.02)
    assert [v["objective"] for v in doc["verdicts"]] == [
        "samples_per_s",
        "time_to_target",
        "peak_memory",
    ]
    memory = doc["verdicts"][2]
    lowest = min(c["peak_rss_mb"]["sum"] for c in doc["candidates"])
    assert by[memory["winner"]]["peak_rss_mb"]["sum"] == lowest
    assert memory["ranking"][0] == memory["winner"]
    for v in doc["verdicts"]:
        assert set(v) >= VERDICT_KEYS
        assert v["baseline"] == "torch"


def test_tensorboards_own_reader_finds_one_series_per_stack_and_seed(trained: dict) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    root = Path(trained["tensorboard"]) / trained["run_id"]
    runs = sorted(str(p.relative_to(root)) for p in root.glob("*/seed*"))
    stacks_run = ("torch", "torch-bf16", "torch-accumulate")
    assert runs == sorted(f"{s}/seed{k}" for s in stacks_run for k in (0, 1))
    for c in trained["candidates"]:
        for seed in c["seeds"]:
            events = EventAccumulator(str(root / c["id"] / f"seed{seed['seed']}"))
            events.Reload()
            assert {"train/loss", "validation/accuracy"} <= set(events.Tags()["scalars"])
            losses = [e.value for e in events.Scalars("train/loss")]
            assert losses == pytest.approx(seed["losses"], rel=1e-6)
            assert [e.step for e in events.Scalars("validation/accuracy")] == [
                int(step) for step, _, _ in seed["evals"]
            ]


def test_the_json_document_and_table_come_from_the_command(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    result = CliRunner().invoke(
        app,
        [
            "train",
            "builtin:digits-train",
            "--quick",
            "--stacks",
            "torch",
            "--seeds",
            "1",
            "--json",
            str(out),
            "--store",
            str(tmp_path / "s.db"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "samples/s" in result.output and "time to accuracy" in result.output
    doc = json.loads(out.read_text())
    assert doc["candidates"][0]["status"] == "ok"
    # The run is in the store: listed, shown again, its timed steps kept.
    store = ["--store", str(tmp_path / "s.db")]
    listed = CliRunner().invoke(app, ["ls", *store])
    assert listed.exit_code == 0 and doc["run_id"] in listed.output
    assert "samples_per_s: torch" in listed.output
    shown = CliRunner().invoke(app, ["show", doc["run_id"], *store])
    assert shown.exit_code == 0 and "time to accuracy" in shown.output
    record = api.show_run(doc["run_id"], tmp_path / "s.db")
    assert record["settings"]["kind"] == "train" and record["document"] == doc
    assert [c["id"] for c in record["candidates"]] == ["torch"]
    from bakeoff.store import Store

    with Store(tmp_path / "s.db") as s:
        assert len(s.samples(doc["run_id"], "torch")) == doc["candidates"][0]["rounds"]
    # Its report comes from the same store (the page itself: see the report test).
    page = tmp_path / "r.html"
    written = CliRunner().invoke(app, ["report", doc["run_id"], "-o", str(page), *store])
    assert written.exit_code == 0 and "training report" in page.read_text()


def test_a_stack_or_recipe_that_does_not_exist_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"no training stack 'tensorflow-magic'"):
        api.train(
            "builtin:digits-train",
            api.TrainOptions(stacks=("torch", "tensorflow-magic"), store=tmp_path / "s.db"),
        )
    with pytest.raises(UserError, match=r"builtin:nope: no such training recipe"):
        api.train("builtin:nope", api.TrainOptions(store=tmp_path / "s.db"))
    with pytest.raises(UserError, match=r"--seeds: at least 1"):
        api.train("builtin:digits-train", api.TrainOptions(seeds=0, store=tmp_path / "s.db"))


def test_a_first_loss_that_is_not_the_references_is_flagged() -> None:
    """Same initial weights on the same first batch give the same loss; a stack that
    starts elsewhere trains something else, and is not timed."""
    gate = FirstLossGate(2.30, {"torch-bf16": 0.02})
    c = TrainCandidate("torch", 64, worker={"first_loss": 2.30})
    assert gate.check(c, None, True).passed  # type: ignore[arg-type]
    c.worker["first_loss"] = 2.40
    found = gate.check(c, None, True)  # type: ignore[arg-type]
    assert not found.passed and "reference 2.300000" in found.words
    c.worker["first_loss"] = math.nan
    assert not gate.check(c, None, True).passed  # type: ignore[arg-type]
    bf16 = TrainCandidate("torch-bf16", 64, worker={"first_loss": 2.31})
    assert gate.check(bf16, None, True).passed  # type: ignore[arg-type]


def test_an_absurd_learning_rate_diverges_and_says_so(
    tmp_path: Path, digits_train_spec: Callable[..., TrainSpec]
) -> None:
    job = TargetJob(train=digits_train_spec(lr=1e36), max_steps=40, eval_every=20, target=0.95)
    found = LocalLauncher(tmp_path / "logs").run(job, "absurd", 120)
    assert found["diverged"] is True
    assert not math.isfinite(found["losses"][-1]) and found["steps"] < 40
    assert found["time_to_target_s"] is None


def test_training_jobs_cross_the_socket_as_json(
    digits_train_spec: Callable[..., TrainSpec],
) -> None:
    spec = digits_train_spec()
    for job in (TrainJob(train=spec), TargetJob(train=spec, max_steps=5, eval_every=5, target=0.5)):
        assert message_from_json(JOBS, json.loads(json.dumps(job.to_json()))) == job
        assert job.threads == 1


def test_every_seed_has_the_same_data_order_on_every_stack() -> None:
    a = [b.tolist() for _, b in zip(range(30), stacks.batches(100, 16, seed=3), strict=False)]
    b = [b.tolist() for _, b in zip(range(30), stacks.batches(100, 16, seed=3), strict=False)]
    other = [b.tolist() for _, b in zip(range(30), stacks.batches(100, 16, seed=4), strict=False)]
    assert a == b and a != other
    # Full batches only (6 of 16 from 100 rows), each epoch a new permutation.
    assert all(len(batch) == 16 for batch in a)
    first_epoch = sorted(i for batch in a[:6] for i in batch)
    assert len(set(first_epoch)) == 96
    with pytest.raises(ValueError, match="larger than the training set"):
        next(stacks.batches(10, 16, seed=0))


def test_two_recipes_with_a_module_of_the_same_name_each_build_their_own_model(
    tmp_path: Path,
) -> None:
    """A second recipe's `mlp:build` in the same process is its own folder's model, not
    the module the first one imported (CI: the seed weights were the other model's, so
    every worker failed to load them); the folder is not left on sys.path."""
    first, second = tmp_path / "a", tmp_path / "b"
    for folder, hidden in ((first, 8), (second, 5)):
        folder.mkdir()
        (folder / "mlp.py").write_text(
            f"import torch\n\ndef build():\n    return torch.nn.Linear(4, {hidden})\n"
        )
    assert stacks.model_factory("mlp:build", str(first))().out_features == 8
    assert stacks.model_factory("mlp:build", str(second))().out_features == 5
    assert str(first) not in sys.path and str(second) not in sys.path
    with pytest.raises(UserError, match=r"model.factory = 'mlp:nope'.*no attribute"):
        stacks.model_factory("mlp:nope", str(second))


@pytest.mark.slow
def test_torch_compile_reports_its_compile_apart(tmp_path: Path) -> None:
    result = api.train(
        "builtin:digits-train",
        api.TrainOptions(
            stacks=("torch", "torch-compile"), seeds=1, quick=True, store=tmp_path / "s.db"
        ),
    )
    by = {c["id"]: c for c in result.document["candidates"]}
    assert by["torch-compile"]["status"] == "ok", by["torch-compile"]["reason"]
    assert by["torch-compile"]["compile_s"] > 0 and by["torch"]["compile_s"] is None
    assert by["torch-compile"]["checkpoint"]["reload_identical"] is True


RECIPE_MODEL = """
import torch


def build():
    # Dropout draws a new mask at every step: the first-loss check runs in eval mode.
    return torch.nn.Sequential(
        torch.nn.Flatten(),
        torch.nn.Linear(64, 32),
        torch.nn.ReLU(),
        torch.nn.Dropout(0.2),
        torch.nn.Linear(32, 10),
    )
"""


def _recipe(folder: Path, train: str) -> Path:
    (folder / "mlp.py").write_text(RECIPE_MODEL)
    path = folder / "recipe.toml"
    path.write_text(
        'name = "mlp-digits"\n[model]\nkind = "torch"\nfactory = "mlp:build"\n[train]\n' + train
    )
    return path


# Make test trains a user's model from a TOML recipe in the crash test.
@pytest.mark.slow  # a whole run (~30 s)
def test_a_toml_recipe_trains_the_users_model_and_an_absurd_lr_diverges(tmp_path: Path) -> None:
    """The user's own factory (with dropout, which must not trip the first-loss
    check) and data; with 1e36 for one stack's learning rate, that stack diverges and
    the other finishes (every stack diverging is the slow test below)."""
    from bakeoff.builtins import digits

    x_train, y_train, x_val, y_val = digits.train_and_validation()
    np.savez(tmp_path / "d.npz", x_train=x_train, y_train=y_train, x_val=x_val, y_val=y_val)
    # One run: torch-accumulate's learning rate is absurd, so it diverges, and torch
    # still finishes on the user's model (two runs, one of them all good, cost make
    # test 25 s more; torch-accumulate's parity with torch is checked on the built-in).
    recipe = _recipe(
        tmp_path,
        'data = "d.npz"\noptimizer = "sgd"\nlr = 0.1\nsteps = 60\n'
        'stack_lr = { torch-accumulate = 1e36 }\nstacks = ["torch", "torch-accumulate"]\n'
        "target = { value = 0.5 }\n",
    )
    doc = api.train(
        str(recipe), api.TrainOptions(seeds=1, quick=True, budget_s=3, store=tmp_path / "s.db")
    ).document
    assert doc["workload"]["name"] == "mlp-digits" and doc["workload"]["optimizer"] == "sgd"
    by = {c["id"]: c for c in doc["candidates"]}
    assert by["torch-accumulate"]["status"] == "diverged"
    assert by["torch-accumulate"]["seeds"][0]["diverged"] is True
    assert by["torch"]["status"] == "ok", by["torch"]["reason"]
    assert by["torch"]["settings"]["optimizer"] == "SGD"
    assert by["torch"]["seeds"][0]["diverged"] is False
    assert by["torch"]["seeds"][0]["final_metric"] > 0.5


@pytest.mark.slow
def test_a_run_where_every_stack_diverges_ends_with_its_document(tmp_path: Path) -> None:
    """With a learning rate of 1e36 the loss goes NaN on every stack, each is
    `diverged`, and the run still ends with its document (exit 1: no winner)."""
    from bakeoff.builtins import digits

    x_train, y_train, x_val, y_val = digits.train_and_validation()
    np.savez(tmp_path / "d.npz", x_train=x_train, y_train=y_train, x_val=x_val, y_val=y_val)
    absurd = _recipe(
        tmp_path,
        'data = "d.npz"\nlr = 1e36\nsteps = 40\nstacks = ["torch", "torch-accumulate"]\n'
        "target = { value = 0.9 }\n",
    )
    result = api.train(
        str(absurd), api.TrainOptions(seeds=1, quick=True, budget_s=3, store=tmp_path / "s.db")
    )
    assert result.exit_code == 1
    for c in result.document["candidates"]:
        assert c["status"] == "diverged" and "NaN or infinite" in c["reason"]
        assert c["seeds"][0]["diverged"] is True


@pytest.mark.parametrize(
    ("train", "words"),
    [
        ('data = "d.npz"\nlr = 0.1\nsteps = 10\ntarget = { value = 0.9 }\nepochs = 3\n', "epochs"),
        ('data = "d.npz"\nlr = -1\nsteps = 10\ntarget = { value = 0.9 }\n', "train.lr"),
        (
            'data = "d.npz"\nlr = 0.1\nsteps = 10\ntarget = { value = 0.9 }\noptimizer = "lamb"\n',
            "optimizer",
        ),
        (
            'data = "missing.npz"\nlr = 0.1\nsteps = 10\ntarget = { value = 0.9 }\n',
            "does not exist",
        ),
        (
            'data = "bad.npz"\nlr = 0.1\nsteps = 10\ntarget = { value = 0.9 }\n',
            "no x_val, y_val in it",
        ),
        (
            'data = "d.npz"\nlr = 0.1\nsteps = 10\ntarget = { value = 0.9 }\nstacks = ["jaxx"]\n',
            "train.stacks: no training stack 'jaxx'",
        ),
        (
            'data = "d.npz"\nlr = 0.1\nsteps = 10\ntarget = { value = 0.9 }\n'
            "stack_lr = { loraa = 0.01 }\n",
            "train.stack_lr: no training stack 'loraa'",
        ),
        (
            'data = "d.npz"\nlr = 0.1\nsteps = 10\ntarget = { value = 0.9 }\nlora = { rank = 4 }\n',
            "train.lora.targets",
        ),
        (
            'data = "d.npz"\nlr = 0.1\nsteps = 10\ntarget = { value = 0.9 }\nschedule = "step"\n',
            "train.schedule",
        ),
        (
            'data = "d.npz"\nlr = 0.1\nsteps = 10\ntarget = { value = 0.9 }\nwarmup_steps = 10\n',
            r"train: .*warmup_steps \(10\) must be fewer than steps \(10\)",
        ),
    ],
)
def test_a_wrong_recipe_names_the_key_and_exits_2(tmp_path: Path, train: str, words: str) -> None:
    np.savez(
        tmp_path / "d.npz",
        x_train=np.zeros((8, 64)),
        y_train=np.zeros(8),
        x_val=np.zeros((4, 64)),
        y_val=np.zeros(4),
    )
    np.savez(tmp_path / "bad.npz", x_train=np.zeros((8, 64)), y_train=np.zeros(8))
    path = _recipe(tmp_path, train)
    with pytest.raises(UserError, match=words) as refused:
        api.train(str(path), api.TrainOptions(store=tmp_path / "s.db"))
    assert refused.value.exit_code == 2


def test_the_command_exits_2_on_a_wrong_recipe_and_says_why(tmp_path: Path) -> None:
    path = _recipe(tmp_path, 'data = "d.npz"\nlr = 0.1\nsteps = 10\ntarget = { value = 2 }\n')
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bakeoff.cli",
            "train",
            str(path),
            "--store",
            str(tmp_path / "s.db"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "train.target.value" in proc.stderr and "Traceback" not in proc.stderr


def test_an_inference_workload_is_not_a_recipe_and_a_recipe_is_not_a_workload(
    tmp_path: Path,
) -> None:
    path = _recipe(tmp_path, 'data = "d.npz"\nlr = 0.1\nsteps = 10\ntarget = { value = 0.9 }\n')
    with pytest.raises(UserError, match="run it with `bakeoff train"):
        api.run(str(path), api.RunOptions(store=tmp_path / "s.db"))
    inference = tmp_path / "inference.toml"
    inference.write_text('name = "x"\n[model]\nkind = "builtin"\nname = "digits"\n')
    with pytest.raises(UserError, match=r"no \[train\] section"):
        api.train(str(inference), api.TrainOptions(store=tmp_path / "s.db"))


def test_a_training_step_counts_its_forward_and_its_backward_by_hand() -> None:
    """The digits CNN on 8x8 inputs (padding 1): per sample, its forward is conv1
    8*8*16*9 + conv2 8*8*32*144 + fc1 512*64 + fc2 64*10 multiply-adds, two FLOPs
    each (the inference counter's rule). Its backward computes each layer's weight
    gradient (the forward's work again) and each input gradient but the first
    layer's (its input needs none)."""
    import torch

    from bakeoff.builtins import digits
    from bakeoff.training.throughput import step_flops

    conv1, conv2, fc1, fc2 = (2 * m for m in (8 * 8 * 16 * 9, 8 * 8 * 32 * 144, 512 * 64, 640))
    forward = conv1 + conv2 + fc1 + fc2
    assert forward == 675_072
    batch = 64
    torch.manual_seed(0)
    model = digits.untrained()
    x, y = torch.randn(batch, 1, 8, 8), torch.randint(0, 10, (batch,))
    assert step_flops(model, x, y) == batch * (forward + forward + conv2 + fc1 + fc2)
    # The count leaves no gradient behind for the first real step.
    assert all(p.grad is None for p in model.parameters())


def test_a_reload_takes_the_schedule_up_where_it_was(
    tmp_path: Path, digits_train_spec: Any
) -> None:
    """Mid-schedule, where the rate changes from step to step: a checkpoint that
    brings back everything but the update count is not reload identical."""
    from bakeoff.stacks import steps

    spec = digits_train_spec(schedule="cosine", warmup_steps=2, total_steps=12)
    driver = steps.LocalDriver(spec)
    driver.steps(3)
    assert driver.checkpoint(str(tmp_path / "good.ckpt"))["reload_identical"] is True
    assert driver.trainer.updates == 5  # 3, the check's 2, rewound to 3, its 2 again
    trainer = driver.trainer
    load = trainer.load

    def forgets_the_count(path: str) -> None:
        load(path)
        trainer.updates = 0

    trainer.load = forgets_the_count  # type: ignore[method-assign]
    found = driver.checkpoint(str(tmp_path / "bad.ckpt"))
    assert found["reload_identical"] is False
    assert found["losses_without_reload"][0] == found["losses_after_reload"][0]


def test_a_checkpoint_that_loses_the_optimizer_state_is_not_reload_identical(
    tmp_path: Path, digits_train_spec: Any
) -> None:
    """The check takes two steps after the reload: the first one's loss shows the
    weights, the second one's the update the optimizer's moments and step made."""
    from bakeoff.stacks import steps

    driver = steps.LocalDriver(digits_train_spec())
    driver.steps(5)
    assert driver.checkpoint(str(tmp_path / "good.ckpt"))["reload_identical"] is True
    trainer = driver.trainer

    def weights_only(path: str) -> None:
        import torch

        trainer.model.load_state_dict(torch.load(path, weights_only=True)["model"])

    trainer.load = weights_only  # type: ignore[method-assign]
    found = driver.checkpoint(str(tmp_path / "bad.ckpt"))
    assert found["reload_identical"] is False
    before, after = found["losses_without_reload"], found["losses_after_reload"]
    assert before[0] == after[0] and before[1] != after[1]


def test_a_verdict_without_the_references_figure_says_so_in_words() -> None:
    """`--stacks ddp` runs no torch: the winner stands, with no ratio to print."""
    from bakeoff.report.training import verdict_words

    alone = {"objective": "samples_per_s", "winner": "ddp", "baseline": "torch", "ratio": None}
    words = verdict_words({**alone, "ties": [], "reason": ""})
    assert words == "ddp, with no ratio: the reference torch has no figure to compare with"
    ratio = {"value": 1.5, "ci95": [1.4, 1.6]}
    faster = verdict_words({**alone, "ratio": ratio, "ties": [], "reason": ""})
    assert faster == "ddp, 1.50x (CI 1.40-1.60) over the reference torch"


# A model whose forward kills its process with SIGSEGV, as a native kernel that breaks
# would: under BF16 autocast (so on the torch-bf16 stack only), and on a batch of 32
# in seed 1 (torch-accumulate's micro-batches of the global 64; the rounds run seed 0).
FAULTY_MODEL = """
import os
import resource
import signal

import torch


def _crash():
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file
    os.kill(os.getpid(), signal.SIGSEGV)


class Faulty(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Flatten(), torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10)
        )

    def forward(self, x):
        if torch.is_autocast_enabled("cpu"):
            _crash()
        if x.shape[0] == 32 and torch.initial_seed() == 1:
            _crash()
        return self.net(x)


def build():
    return Faulty()
"""


def test_a_stack_or_a_seed_that_crashes_fails_alone(tmp_path: Path) -> None:
    """torch-bf16 crashes when it loads: it alone fails, and the other stacks are timed
    and judged. torch-accumulate crashes in seed 1 only: that seed fails, seed 0 and
    the stack's figures stand, and it is judged on them (the failed seed counts as a
    seed that missed the target)."""
    from bakeoff.builtins import digits

    x_train, y_train, x_val, y_val = digits.train_and_validation()
    np.savez(tmp_path / "d.npz", x_train=x_train, y_train=y_train, x_val=x_val, y_val=y_val)
    (tmp_path / "faulty.py").write_text(FAULTY_MODEL)
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(
        'name = "faulty-digits"\n[model]\nkind = "torch"\nfactory = "faulty:build"\n[train]\n'
        'data = "d.npz"\noptimizer = "sgd"\nlr = 0.1\nsteps = 20\neval_every = 10\n'
        'stacks = ["torch", "torch-accumulate", "torch-bf16"]\ntarget = { value = 0.3 }\n'
        "tolerance = 0.5\n"
    )
    result = api.train(
        str(recipe), api.TrainOptions(seeds=2, quick=True, budget_s=3, store=tmp_path / "s.db")
    )
    assert result.exit_code == 0
    by = {c["id"]: c for c in result.document["candidates"]}
    assert by["torch-bf16"]["status"] == "failed" and "SIGSEGV" in by["torch-bf16"]["reason"]
    assert by["torch"]["status"] == "ok", by["torch"]["reason"]
    assert [s["seed"] for s in by["torch"]["seeds"]] == [0, 1]
    assert by["torch"]["failed_seeds"] == []
    accumulate = by["torch-accumulate"]
    assert accumulate["status"] == "ok", accumulate["reason"]
    assert [s["seed"] for s in accumulate["seeds"]] == [0]
    (failed,) = accumulate["failed_seeds"]
    assert failed["seed"] == 1 and "SIGSEGV" in failed["reason"]
    assert "seed 1 failed" in accumulate["reason"]
    assert "judged on the other 1 seed(s)" in accumulate["reason"]
    assert accumulate["time_to_target_s"] is None  # 1 of 2 seeds: too few to score
    assert accumulate["samples_per_s"] is not None
    throughput = next(v for v in result.document["verdicts"] if v["objective"] == "samples_per_s")
    assert set(throughput["ranking"]) == {"torch", "torch-accumulate"}


def test_the_training_table_fits_ordinary_terminals(trained: dict) -> None:
    ids = [trained["run_id"], *(c["id"] for c in trained["candidates"])]
    for width in WIDTHS:
        shown = printed_at(
            width, lambda: call("show", trained["run_id"], "--store", trained["store"]).stdout
        )
        assert_fits(shown, width, ids)
