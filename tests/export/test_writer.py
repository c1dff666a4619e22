"""The variant cache (build steps shared between runs) and `bakeoff export`.

The run-level tests share one pair of identical runs of a tiny MLP on ONNX
Runtime and OpenVINO (FP32 and INT8): the first builds and fills the cache,
the second must build nothing. Exports are loaded back in fresh processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from bakeoff import api, cache
from bakeoff.source import ModelSource
from bakeoff.transforms import StepFailed, cached_step
from front_door import call
from tiny_mlp import TINY_MLP, write_tiny_workload
from widths import WIDTHS, assert_fits, printed_at

MODEL_MODULE = TINY_MLP


def _workload(folder: Path, module_text: str = MODEL_MODULE, extra: str = "") -> Path:
    return write_tiny_workload(folder, module_text, extra)


def _by_id(doc: dict) -> dict[str, dict]:
    return {c["id"]: c for c in doc["candidates"]}


def _run_dir(store: Path, run_id: str) -> Path:
    return store.parent / "runs" / run_id


def _cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bakeoff.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,  # never wait for an answer
    )


@dataclass
class Runs:
    root: Path
    cache_dir: Path
    store: Path
    first: api.RunResult
    second: api.RunResult
    keys_after_second: set[str]
    other: api.RunResult  # another model (another seed) after the two identical runs
    env: dict[str, str]


# Hand-written candidates for the other model: one ONNX Runtime variant twice, once
# with an option it does not have (a failed candidate), and PyTorch eager.
OTHER_CANDIDATES = """
[[candidates]]
label = "ort"
runtime = "onnxruntime"
[[candidates]]
label = "ort-bad"
runtime = "onnxruntime"
options = { no_such_option = 1 }
[[candidates]]
label = "pt"
runtime = "torch"
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    root = tmp_path_factory.mktemp("cache-export")
    cache_dir = root / "cache"
    with pytest.MonkeyPatch.context() as mp:
        # A cache of this module's own: other test files build the same tiny model.
        mp.setenv("BAKEOFF_CACHE_DIR", str(cache_dir))
        mp.delenv(cache.DISABLE_ENV, raising=False)
        wl = _workload(root / "wl")
        store = root / "store" / "bakeoff.db"
        opts = api.RunOptions(
            quick=True,
            store=store,
            budget_s=2,
            runtimes=["onnxruntime", "openvino"],
            precisions=["fp32", "int8"],
            batch_sizes=[1],
        )
        first = api.run(str(wl), opts)
        second = api.run(str(wl), opts)
        keys = {e.key for e in cache.entries(cache_dir)}
        changed = MODEL_MODULE.replace("torch.manual_seed(0)", "torch.manual_seed(1)")
        other_wl = _workload(root / "other", changed, OTHER_CANDIDATES)
        other = api.run(
            str(other_wl), api.RunOptions(quick=True, store=store, budget_s=1, batch_sizes=[1])
        )
        yield Runs(root, cache_dir, store, first, second, keys, other, dict(os.environ))


def test_second_identical_run_builds_nothing(runs: Runs) -> None:
    one, two = runs.first.document, runs.second.document
    c1, c2 = _by_id(one), _by_id(two)
    assert set(c1) == set(c2)
    assert one["variant_cache"]["reused"] == 0 and one["variant_cache"]["variants"] >= 5
    assert one["timing_s"]["build_saved_by_cache"] == 0
    vc = two["variant_cache"]
    assert vc["reused"] == vc["variants"] == one["variant_cache"]["variants"]
    assert two["timing_s"]["build_saved_by_cache"] > 0
    assert "torch-fp32" in vc["nothing_to_build"]  # the reference: no artifact to build
    for cid, c in c2.items():
        if c1[cid]["status"] == "unavailable":
            assert c["status"] == "unavailable" and c["reason"] == c1[cid]["reason"]
            continue
        assert c1[cid]["cache_hit"] is False, cid
        assert c["cache_hit"] is True, cid
        # the same files give the same results
        assert c["status"] == c1[cid]["status"], (cid, c["reason"])
        assert c["quality"]["value"] == pytest.approx(c1[cid]["quality"]["value"], abs=1e-6)
    # no build process of the second run built anything; the first built every step
    logs1 = _build_logs(_run_dir(runs.store, runs.first.run_id))
    logs2 = _build_logs(_run_dir(runs.store, runs.second.run_id))
    assert ": building" in logs1 and "from the variant cache" not in logs1
    assert ": building" not in logs2
    assert logs2.count("from the variant cache") == len(runs.keys_after_second)
    # each step's files in the second run are the first run's, byte for byte
    a1 = _run_dir(runs.store, runs.first.run_id) / "artifacts"
    a2 = _run_dir(runs.store, runs.second.run_id) / "artifacts"
    steps1, steps2 = dict(cache.iter_steps(a1)), dict(cache.iter_steps(a2))
    assert set(steps1) == set(steps2) and steps1
    for name, origin in steps2.items():
        assert origin["from_cache"] is True and steps1[name]["from_cache"] is False
        assert origin["files"] == steps1[name]["files"], name
    # the second run's artifacts live in its own folder (not pointing into the cache)
    variants = json.loads((a2 / cache.VARIANTS_FILE).read_text())
    for vid, artifact in variants.items():
        if "path" in artifact:
            assert Path(artifact["path"]).is_relative_to(a2), vid
            assert Path(artifact["path"]).is_file()


def _build_logs(run_dir: Path) -> str:
    return "\n".join(p.read_text() for p in sorted((run_dir / "logs").glob("build-*.log")))


def test_different_model_misses_the_cache(runs: Runs) -> None:
    result = runs.other
    cands = _by_id(result.document)
    assert cands["ort-b1"]["status"] == "ok", cands["ort-b1"]["reason"]
    assert cands["ort-b1"]["cache_hit"] is False
    assert result.document["variant_cache"]["reused"] == 0
    logs = _build_logs(_run_dir(runs.store, result.run_id))
    assert "step onnx-fp32: building" in logs
    assert "from the variant cache" not in logs
    new = [e for e in cache.entries(runs.cache_dir) if e.key not in runs.keys_after_second]
    assert [e.step for e in new] == ["onnx-fp32"]


def test_export_refuses_failed_and_unknown_candidates(runs: Runs, tmp_path: Path) -> None:
    result = runs.other
    assert _by_id(result.document)["ort-bad-b1"]["status"] == "failed"
    # export refuses a failed candidate and an unknown one, with the reason (exit 2)
    failed = _cli(
        "export",
        result.run_id,
        "--candidate",
        "ort-bad-b1",
        "--out",
        str(tmp_path / "x"),
        "--store",
        str(runs.store),
        env=runs.env,
        cwd=tmp_path,
    )
    said = " ".join(failed.stderr.split())  # the console wraps long lines
    assert failed.returncode == 2, said
    assert "candidate ort-bad-b1" in said and "is failed" in said and "no_such_option" in said
    assert "Traceback" not in said
    unknown = _cli(
        "export",
        result.run_id,
        "--candidate",
        "nope-b1",
        "--out",
        str(tmp_path / "y"),
        "--store",
        str(runs.store),
        env=runs.env,
        cwd=tmp_path,
    )
    said = " ".join(unknown.stderr.split())
    assert unknown.returncode == 2, said
    assert "no candidate 'nope-b1'" in said and "ok candidates: ort-b1" in said
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


LOAD_AND_PREDICT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import bakeoff.export

    folder, data_path, bs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    predict = bakeoff.export.load(folder)
    with np.load(data_path, allow_pickle=False) as z:
        quality = {n: z[f"quality/{n}"] for n in predict.input_names}
    n = len(next(iter(quality.values())))
    outs = [
        predict({k: v[i : i + bs] for k, v in quality.items()}) for i in range(0, n, bs)
    ]
    np.save(sys.argv[4], np.concatenate(outs))
    heavy = ("torch", "onnxruntime", "openvino", "nncf", "transformers")
    print(json.dumps({m: m in sys.modules for m in heavy}))
    """
)


@pytest.mark.parametrize(
    ("which", "candidate", "runtime"),
    [
        # the second run: its artifacts came from the cache
        ("second", "onnxruntime-fp32-b1", "onnxruntime"),
        ("second", "openvino-fp32-b1", "openvino"),
        ("other", "pt-b1", "torch"),  # a torch.export program
    ],
)
def test_export_loads_in_a_fresh_process_with_only_its_runtime(
    runs: Runs, tmp_path: Path, which: str, candidate: str, runtime: str
) -> None:
    result: api.RunResult = getattr(runs, which)
    run_id = result.run_id
    out = tmp_path / "export"
    proc = _cli(
        "export",
        run_id,
        "--candidate",
        candidate,
        "--out",
        str(out),
        "--store",
        str(runs.store),
        env=runs.env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    cand = _by_id(result.document)[candidate]
    assert manifest["candidate"] == candidate and manifest["run_id"] == run_id
    assert manifest["runtime"] == runtime and manifest["runtime_version"]
    assert manifest["precision"] == "fp32"
    assert manifest["model_verified_against_run"] is True  # the files that were measured
    assert manifest["settings"] == cand["settings"]
    assert manifest["quality"]["value"] == cand["quality"]["value"]
    assert manifest["inputs"] == [
        {"name": "input", "dtype": "float32", "shape": [1, 64], "batch_axis": 0}
    ]
    expected_files = {
        "onnxruntime": {"model.onnx"},
        "openvino": {"model.xml", "model.bin"},
        "torch": {"model.pt2"},
    }[runtime]
    assert set(manifest["files"]) == expected_files
    run_dir = _run_dir(runs.store, run_id)
    outputs = tmp_path / "outputs.npy"
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            LOAD_AND_PREDICT,
            str(out),
            str(run_dir / "data.npz"),
            "1",
            str(outputs),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert loaded.returncode == 0, loaded.stderr
    imported = json.loads(loaded.stdout.strip().splitlines()[-1])
    assert imported.pop(runtime) is True
    assert not any(imported.values()), imported  # only the runtime the manifest names
    measured = np.load(run_dir / "outputs" / f"{candidate}.npy")
    np.testing.assert_allclose(np.load(outputs), measured, rtol=1e-5, atol=1e-6)


def test_export_defaults_to_the_winner_and_refuses_a_tampered_folder(
    runs: Runs, tmp_path: Path
) -> None:
    from bakeoff import export
    from bakeoff.errors import UserError

    out = tmp_path / "winner"
    manifest = export.export(runs.first.run_id, out, store=runs.store)
    verdict = runs.first.document["verdicts"][0]
    # the pick: the recommendation among tied leaders, else the winner (issue 45)
    assert manifest["candidate"] == (verdict.get("recommended") or verdict["winner"])
    main = out / manifest["file"]
    main.write_bytes(main.read_bytes() + b"\0")
    with pytest.raises(UserError, match="does not match its sha256"):
        export.load(out)
    with pytest.raises(UserError, match="not an empty folder"):
        export.export(runs.first.run_id, out, store=runs.store)


def test_cache_ls_and_clear_and_exports_survive_clearing(
    runs: Runs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = runs.env
    listed = _cli("cache", "ls", "--json", env=env, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    payload = json.loads(listed.stdout)
    steps = {e["step"] for e in payload["entries"]}
    from bakeoff.transforms.ort_quantize import reduce_range_here

    # x86 without VNNI: ONNX Runtime's dynamic INT8 with 7-bit weights, a step of its own
    dynamic = "ort-int8-dynamic" + ("-7bit-weights" if reduce_range_here() else "")
    assert {"onnx-fp32", dynamic, "ort-int8-static", "ov-fp32", "ov-int8-nncf"} <= steps
    for e in payload["entries"]:
        assert e["bytes"] > 0 and e["created"] <= e["last_used"]
        assert len(e["model_hash"]) == 64
    table = _cli("cache", "ls", env=env, cwd=tmp_path)
    assert table.returncode == 0 and "ort-int8-static" in table.stdout
    monkeypatch.setenv("BAKEOFF_CACHE_DIR", env["BAKEOFF_CACHE_DIR"])
    for width in WIDTHS:  # the short keys whole in an ordinary terminal
        shown = printed_at(width, lambda: call("cache", "ls").stdout)
        assert_fits(shown, width, [e["key"][:12] for e in payload["entries"]])
    refused = _cli("cache", "clear", env=env, cwd=tmp_path)  # no --yes, no terminal
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert len(cache.entries(runs.cache_dir)) == len(payload["entries"])
    cleared = _cli("cache", "clear", "--yes", env=env, cwd=tmp_path)
    assert cleared.returncode == 0, cleared.stderr
    assert f"removed {len(payload['entries'])} entries" in cleared.stdout
    assert "freed" in cleared.stdout
    assert cache.entries(runs.cache_dir) == []
    empty = _cli("cache", "ls", "--json", env=env, cwd=tmp_path)
    assert json.loads(empty.stdout)["entries"] == []
    # run folders hold their own files: an earlier run still exports after clearing
    proc = _cli(
        "export",
        runs.first.run_id,
        "--candidate",
        "openvino-int8-nncf-b1",
        "--out",
        str(tmp_path / "after-clear"),
        "--store",
        str(runs.store),
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "after-clear" / "model.bin").stat().st_size > 0


# ------------------------------------------------ cached_step without a full run


def _fake_run(root: Path, name: str, seed: int = 1) -> Path:
    """A run's artifacts folder with a cache key, as the orchestrator writes it."""
    artifacts = root / "runs" / name / "artifacts"
    artifacts.mkdir(parents=True)
    data = root / "runs" / name / "data.npz"
    np.savez(data, **{"calib/x": np.arange(12, dtype=np.float32).reshape(4, 3)})
    source = ModelSource("fake", None, None, None, {"seed": seed})
    note = cache.prepare_run(artifacts, source, data, ["x"], {"onnx": "1.0"})
    assert note.startswith("variant cache:"), note
    return artifacts


def _writer(
    calls: list[str], text: str = "weights", barrier: threading.Barrier | None = None
) -> Callable[[Path], dict]:
    def build(out: Path) -> dict:
        calls.append(str(out))
        if barrier is not None:  # every builder has missed the cache before any publishes
            barrier.wait(timeout=60)
        (out / "sub").mkdir()
        (out / "sub" / "model.bin").write_text(text)
        return {"path": str(out / "sub" / "model.bin"), "setting": 3}

    return build


def test_cached_step_is_shared_by_content_and_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BAKEOFF_CACHE_DIR", str(tmp_path / "cache"))
    calls: list[str] = []
    a = _fake_run(tmp_path, "a")
    first = cached_step(str(a), "step-x", _writer(calls))
    b = _fake_run(tmp_path, "b")
    second = cached_step(str(b), "step-x", _writer(calls))
    assert len(calls) == 1  # the second run took it from the cache
    assert second == {"path": str(b / "step-x" / "sub" / "model.bin"), "setting": 3}
    assert Path(second["path"]).read_text() == Path(first["path"]).read_text() == "weights"
    assert json.loads((b / "step-x" / cache.ORIGIN_FILE).read_text())["from_cache"] is True
    # another model (seed) is another key
    cached_step(str(_fake_run(tmp_path, "c", seed=2)), "step-x", _writer(calls))
    assert len(calls) == 2
    # a cache file changed on disk is detected: the entry is dropped and rebuilt
    key = json.loads((a / "step-x" / cache.ORIGIN_FILE).read_text())["key"]
    target = cache.variants_dir() / key / "files" / "sub" / "model.bin"
    target.unlink()  # break the hard link first: the run folders keep their copy
    target.write_text("tampered")
    d = _fake_run(tmp_path, "d")
    again = cached_step(str(d), "step-x", _writer(calls))
    assert len(calls) == 3 and Path(again["path"]).read_text() == "weights"
    assert Path(first["path"]).read_text() == "weights"
    # clearing removes entries; run folders keep their files
    cleared = cache.clear()
    assert cleared.entries >= 2 and cache.entries() == []
    assert Path(second["path"]).read_text() == "weights"


def test_failures_are_not_cached_across_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BAKEOFF_CACHE_DIR", str(tmp_path / "cache"))
    attempts: list[int] = []

    def flaky(out: Path) -> dict:
        attempts.append(1)
        raise MemoryError("out of memory")

    a = _fake_run(tmp_path, "a")
    for _ in range(2):  # within the run, the failure is remembered
        with pytest.raises(StepFailed, match="out of memory"):
            cached_step(str(a), "step-y", flaky)
    assert len(attempts) == 1
    assert cache.entries() == []
    with pytest.raises(StepFailed):
        cached_step(str(_fake_run(tmp_path, "b")), "step-y", flaky)
    assert len(attempts) == 2  # the next run tries again


def test_concurrent_builds_publish_one_whole_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BAKEOFF_CACHE_DIR", str(tmp_path / "cache"))
    runs = [_fake_run(tmp_path, f"r{i}") for i in range(3)]
    calls: list[str] = []
    results: list[dict] = []
    barrier = threading.Barrier(len(runs))
    threads = [
        threading.Thread(
            target=lambda r=r: results.append(
                cached_step(str(r), "step-z", _writer(calls, barrier=barrier))
            )
        )
        for r in runs
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 3 and len(results) == 3  # all missed, all built
    entries = cache.entries()
    assert [e.step for e in entries] == ["step-z"]
    root = cache.variants_dir()
    assert sorted(p.name for p in root.iterdir()) == [entries[0].key]  # no temp folders left
    # a temp folder left by a killed publisher is not an entry, and clear removes it
    (root / ".tmp-deadbeef-1-abc").mkdir()
    (root / ".tmp-deadbeef-1-abc" / "half").write_text("x")
    assert [e.key for e in cache.entries()] == [entries[0].key]
    assert cached_step(str(_fake_run(tmp_path, "r9")), "step-z", _writer(calls)) is not None
    assert len(calls) == 3  # the whole entry was used
    cache.clear()
    assert list(root.iterdir()) == []


def test_cache_off_builds_every_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BAKEOFF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv(cache.DISABLE_ENV, "off")
    source = ModelSource("fake", None, None, None, {})
    calls: list[str] = []
    for name in ("a", "b"):
        artifacts = tmp_path / name / "artifacts"
        artifacts.mkdir(parents=True)
        data = tmp_path / name / "data.npz"
        np.savez(data, **{"calib/x": np.zeros((4, 2), np.float32)})
        assert "off" in cache.prepare_run(artifacts, source, data, ["x"], {})
        cached_step(str(artifacts), "step-w", _writer(calls))
    assert len(calls) == 2 and cache.entries() == []


_STEP_SCRIPT = """
import json, sys, time
from pathlib import Path
from bakeoff.transforms import cached_step

def build(out):
    with open(sys.argv[2], "a") as f:
        f.write("built\\n")
    time.sleep(1.0)  # long enough for the other process to arrive meanwhile
    (out / "model.onnx").write_text("x")
    return {"path": str(out / "model.onnx")}

print(json.dumps(cached_step(sys.argv[1], "onnx-fp32", build)))
"""


def test_a_step_two_builds_need_at_once_is_built_once(tmp_path: Path) -> None:
    """Builds run side by side and share steps: the second waits for the first and
    reuses its output instead of building it again (or removing it half-built)."""
    env = {**os.environ, "BAKEOFF_VARIANT_CACHE": "off"}
    counter = tmp_path / "built.txt"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _STEP_SCRIPT, str(tmp_path / "artifacts"), str(counter)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert counter.read_text() == "built\n"
    assert json.loads(outs[0].splitlines()[-1]) == json.loads(outs[1].splitlines()[-1])
    events = [json.loads(line) for line in (tmp_path / "artifacts" / "steps.jsonl").open()]
    assert sorted(e["outcome"] for e in events) == ["built", "run"]
