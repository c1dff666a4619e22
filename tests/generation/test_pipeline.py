"""`bakeoff run` on a text-generation workload: a tiny random GPT-2 folder of the
test's own, its prompts and held-out text, through the real runtimes on the trial
engine (issue 22)."""

from __future__ import annotations

import html
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bakeoff import api, generators
from bakeoff.cli import app
from bakeoff.errors import UserError
from bakeoff.workload import parse_spec
from browser import CHROMIUM, look_at
from extras import require_program
from front_door import call
from tiny_gpt2 import generation_workload
from widths import WIDTHS, assert_fits, printed_at


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    folder = tmp_path_factory.mktemp("gen")
    wl = generation_workload(folder)
    result = CliRunner().invoke(
        app,
        [
            "run",
            str(wl),
            "--quick",
            "--budget",
            "3",
            "--runtimes",
            # torch-compile's compile would double this fixture's time: its greedy
            # text is checked in tests/generators/test_generators.py instead, as are
            # the GenAI runtimes' INT8 and INT4 folders
            "torch,onnxruntime-genai,openvino-genai,llama-cpp,mlx",
            "--precisions",
            "fp32,f16",
            "--concurrency",
            "2,4",
            "--json",
            str(folder / "g.json"),
            "--store",
            str(folder / ".bakeoff" / "bakeoff.db"),
        ],
    )
    assert result.exit_code == 0, result.output
    return json.loads((folder / "g.json").read_text()), result.output


def test_the_stored_run_is_shown_and_other_commands_refuse_it(
    run: tuple[dict, str], tmp_path: Path
) -> None:
    doc, _ = run
    store = str(Path(doc["workload"]["folder"]).parent / ".bakeoff" / "bakeoff.db")
    shown = CliRunner().invoke(app, ["show", doc["run_id"], "--store", store])
    assert shown.exit_code == 0 and "time per output token at batch 1" in shown.output
    for argv in (
        ["export", doc["run_id"], "--out", str(tmp_path / "x")],
        ["compare", doc["run_id"], doc["run_id"]],
    ):
        refused = CliRunner().invoke(app, [*argv, "--store", store])
        assert isinstance(refused.exception, UserError), argv
        assert "text-generation run" in str(refused.exception)
    # serve starts the engine's own server, or says why it cannot and what to run
    argv = ["serve", doc["run_id"], "--candidate", "onnxruntime-genai-fp32", "--store", store]
    served = CliRunner().invoke(app, argv)
    assert served.exit_code == 1 and "ONNX Runtime GenAI has no server of its own" in served.output
    off = CliRunner().invoke(app, ["serve", doc["run_id"], "--host", "0.0.0.0", "--store", store])
    assert isinstance(off.exception, UserError) and "--token" in str(off.exception)


def _report(run: tuple[dict, str], path: Path, fmt: str) -> str:
    doc, _ = run
    store = str(Path(doc["workload"]["folder"]).parent / ".bakeoff" / "bakeoff.db")
    argv = ["report", doc["run_id"], "--format", fmt, "-o", str(path), "--store", store]
    written = CliRunner().invoke(app, argv)
    assert written.exit_code == 0, written.output
    return path.read_text()


def test_a_generative_run_has_an_html_and_a_markdown_report(
    run: tuple[dict, str], tmp_path: Path
) -> None:
    doc, _ = run
    ok = [c["id"] for c in doc["candidates"] if c["status"] == "ok"]
    page = _report(run, tmp_path / "r.html", "html")
    for section in ("verdict", "speed", "results", "concurrency", "workload"):
        assert f'id="section-{section}"' in page
    assert doc["verdict"]["tpot_batch_1"]["headline"] in html.unescape(page)
    assert all(cid in page for cid in ok)
    for c in doc["candidates"]:  # why each one did not run, where one did not
        if c["status"] != "ok":
            assert html.escape(c["reason"]) in page, c["id"]
    summary = _report(run, tmp_path / "r.md", "md")
    assert (
        f"**time per output token at batch 1**: {doc['verdict']['tpot_batch_1']['headline']}"
        in (summary)
    )
    rows = [line for line in summary.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + len(doc["candidates"])  # the header, then one row each


@pytest.mark.browser
def test_the_generative_report_renders_in_headless_chromium(
    run: tuple[dict, str], tmp_path: Path
) -> None:
    require_program(CHROMIUM, "apt-get install chromium (make browser)")
    doc, _ = run
    page = tmp_path / "r.html"
    _report(run, page, "html")
    seen = look_at(page, tmp_path / "profile")
    assert seen["errors"] == []
    assert seen["requests"] == [page.resolve().as_uri()]  # the page itself, nothing else
    assert seen["outside"] == []  # no label runs past its chart
    by_id = {c["id"]: c for c in seen["charts"]}
    ok = [c for c in doc["candidates"] if c["status"] == "ok"]
    assert by_id["gen-tpot"]["marks"] == len(ok)
    assert all(c["hit"] and c["titled"] for c in seen["charts"]), seen["charts"]


def test_every_candidate_is_ok_rejected_or_unavailable_with_why(run: tuple[dict, str]) -> None:
    doc, _ = run
    by = {c["id"]: c for c in doc["candidates"]}
    assert set(by) == {
        "torch-fp32",
        "onnxruntime-genai-fp32",
        "openvino-genai-fp32",
        "llama-cpp-f16",
        "mlx-fp32",
    }
    for cid in ("onnxruntime-genai-fp32", "openvino-genai-fp32", "mlx-fp32"):
        assert by[cid]["status"] == "ok", by[cid]["reason"]
        assert by[cid]["quality"]["token_agreement"] == 1.0  # FP32 writes torch's text
        assert by[cid]["model_size_mb"] > 0 and by[cid]["cold_start_s"]["build"] >= 0
    llama_why = generators.availability("llama-cpp")
    if llama_why:  # make test does not install llama-cpp-python (minutes to build)
        assert by["llama-cpp-f16"]["status"] == "unavailable"
        assert "bakeoff[llama-cpp]" in llama_why
    else:
        assert by["llama-cpp-f16"]["status"] in ("ok", "rejected")
    for c in by.values():
        assert c["status"] in ("ok", "rejected", "unavailable")
        assert c["status"] == "ok" or c["reason"]


def test_an_ok_candidate_has_every_figure_the_issue_names(run: tuple[dict, str]) -> None:
    doc, _ = run
    ok = [c for c in doc["candidates"] if c["status"] == "ok"]
    assert "torch-fp32" in {c["id"] for c in ok}
    for c in ok:
        for key in ("ttft_ms", "tpot_ms"):
            fig = c[key]
            assert {"p50", "p90", "p99", "ci95"} <= set(fig)
            lo, hi = fig["ci95"]["p50"]
            assert 0 < lo <= fig["p50"] <= hi
        rate = c["tokens_per_s"]
        assert rate["value"] > 0 and rate["ci95"][0] <= rate["value"] <= rate["ci95"][1]
        assert c["peak_rss_mb"] > 0 and c["model_size_mb"] > 0
        q = c["quality"]
        assert {"token_agreement", "common_prefix", "perplexity", "reference_perplexity"} <= set(q)
        assert c["cold_start_s"]["load"] > 0 and c["cold_start_s"]["first_token"] > 0
    torch = next(c for c in ok if c["id"] == "torch-fp32")
    # the reference against itself: the same tokens and the same perplexity
    assert torch["quality"]["token_agreement"] == 1.0
    assert torch["quality"]["perplexity"] == pytest.approx(doc["reference"]["perplexity"])


def test_the_verdict_names_a_tpot_winner_and_a_tokens_per_s_winner_under_concurrency(
    run: tuple[dict, str],
) -> None:
    doc, output = run
    v = doc["verdict"]["tpot_batch_1"]
    ok = {c["id"] for c in doc["candidates"] if c["status"] == "ok"}
    assert v["winner"] in ok and v["baseline"] == "torch-fp32" and v["headline"]
    conc = doc["verdict"]["tokens_per_s_concurrency"]
    assert conc["at_concurrency"] == 4 and set(conc["per_concurrency"]) == {"2", "4"}
    for level in conc["per_concurrency"].values():
        assert level["winner"] in ok and level["baseline"] == "torch-fp32" and level["headline"]
        assert set(level["ranking"]) == ok  # raced out on TPOT or not, every ok one is swept
    assert conc["winner"] == conc["per_concurrency"]["4"]["winner"]
    # One `verdicts` list, as every kind's document has; `verdict` kept for one version.
    assert doc["verdicts"] == [v, conc]
    wl = doc["workload"]
    assert wl["prompts"] == 4 and wl["prompt_tokens"]["max"] > wl["prompt_tokens"]["min"]
    assert "time per output token at batch 1" in output and "TPOT p50 ms" in output
    assert "tokens/s, 4 requests at once:" in output and "by requests at once" in output


def test_each_ok_candidate_has_tokens_per_s_and_ttft_p99_at_each_concurrency(
    run: tuple[dict, str],
) -> None:
    doc, _ = run
    for c in doc["candidates"]:
        if c["status"] != "ok":
            assert "concurrency" not in c
            continue
        assert set(c["concurrency"]) == {"1", "2", "4"}, c["id"]
        for level, figures in c["concurrency"].items():
            rate = figures["tokens_per_s"]
            assert 0 < rate["ci95"][0] <= rate["value"] <= rate["ci95"][1], (c["id"], level)
            assert figures["ttft_ms"]["p99"] >= figures["ttft_ms"]["p50"] > 0
            # whole passes over the 4 prompts, every round (one a round in the sweep)
            assert figures["requests"] % 4 == 0 and figures["requests"] >= 4 * figures["rounds"]
            if level != "1":
                assert figures["requests"] == 4 * figures["rounds"]
        # at 1, the TPOT rounds' own figures
        assert c["concurrency"]["1"]["tokens_per_s"]["value"] == c["tokens_per_s"]["value"]
        assert c["settings"]["batching"]


def test_concurrency_levels_are_checked(tmp_path: Path) -> None:
    wl = generation_workload(tmp_path)
    for bad in ("1,2", "2,2", "x", "-4"):
        got = CliRunner().invoke(app, ["run", str(wl), "--concurrency", bad])
        assert isinstance(got.exception, UserError), bad
        assert str(got.exception).startswith("--concurrency: distinct whole numbers")


def test_a_spec_for_generation_names_what_it_misses(tmp_path: Path) -> None:
    def spec(text: str) -> None:
        parse_spec(text, "gen.toml")

    head = 'name = "x"\n[model]\nkind = "hf"\npath = "m"\n'
    with pytest.raises(UserError, match="needs \\[data\\] prompts"):
        spec(head + 'task = "text-generation"\n[data]\ntext = "t.txt"\n')
    with pytest.raises(UserError, match=r"data\.prompts needs"):
        spec(head + '[data]\nprompts = "p.txt"\n')
    with pytest.raises(UserError, match="max_new_tokens, perplexity_text and calibration_text go"):
        spec(head + '[data]\ntext = "t.txt"\nmax_new_tokens = 4\n')
    with pytest.raises(UserError, match="calibration_text go with prompts"):
        spec(head + '[data]\ntext = "t.txt"\ncalibration_text = "c.txt"\n')
    with pytest.raises(UserError, match='"perplexity" goes with task = "text-generation"'):
        spec(
            head
            + 'task = "text-generation"\n[data]\nprompts = "p.txt"\n[quality]\nmetric = "cosine"\n'
        )
    ok = parse_spec(head + 'task = "text-generation"\n[data]\nprompts = "p.txt"\n', "gen.toml")
    assert ok.quality.metric == "perplexity" and ok.quality.max_drop == pytest.approx(0.10)


def test_a_prompt_too_long_for_the_model_is_refused_before_anything_runs(tmp_path: Path) -> None:
    wl = generation_workload(tmp_path, extra_data="")
    (tmp_path / "prompts.txt").write_text("self " * 200 + "\n")
    with pytest.raises(UserError, match="exceeds the model's 128 positions"):
        api.load_generation(str(wl))


def test_calibration_text_is_what_awq_and_gptq_tune_on_else_the_prompts(tmp_path: Path) -> None:
    plain = api.load_generation(str(generation_workload(tmp_path / "a")))
    assert plain.calibration_source == "prompts" and plain.calibration == plain.prompts
    folder = tmp_path / "b"
    folder.mkdir()
    (folder / "calib.txt").write_text("class A:\n    pass\n\n")
    given = api.load_generation(
        str(generation_workload(folder, extra_data='calibration_text = "calib.txt"'))
    )
    assert given.calibration_source == "data.calibration_text" and len(given.calibration) == 2
    (folder / "calib.txt").write_text("\n")
    with pytest.raises(UserError, match=r"data\.calibration_text = 'calib\.txt'"):
        api.load_generation(str(folder / "gen.toml"))


def test_a_model_that_is_not_a_causal_lm_is_refused(tmp_path: Path) -> None:
    from transformers import BertConfig, BertModel

    wl = generation_workload(tmp_path)
    config = BertConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
        vocab_size=320,
    )  # fmt: skip
    BertModel(config).save_pretrained(tmp_path / "model")
    with pytest.raises(UserError, match="needs a causal language model"):
        api.load_generation(str(wl))


def test_other_commands_say_they_do_not_take_generative_workloads_yet(tmp_path: Path) -> None:
    from bakeoff.loader import load_workload

    with pytest.raises(UserError, match="text-generation workload"):
        load_workload(str(generation_workload(tmp_path)))
    with pytest.raises(UserError, match="text-generation workload"):
        load_workload("builtin:tiny-lm")
    flags = CliRunner().invoke(app, ["run", str(tmp_path / "gen.toml"), "--batch-sizes", "1,8"])
    assert isinstance(flags.exception, UserError)
    assert str(flags.exception).startswith("--batch-sizes: not for a text-generation workload")


# Loaded into every worker through PYTHONPATH (Python imports `sitecustomize` at
# start): the runtimes named in BAKEOFF_TEST_CRASH_AT_PROMPT ("runtime:length,...")
# kill their worker with SIGSEGV on a prompt of that many tokens, as a native crash
# at one prompt length would.
CRASH_AT_PROMPT = """
import os

_SPEC = os.environ.get("BAKEOFF_TEST_CRASH_AT_PROMPT")
if _SPEC:
    import resource
    import signal

    from bakeoff import generators

    _AT = {r: int(n) for r, n in (pair.rsplit(":", 1) for pair in _SPEC.split(","))}
    _load = generators.load

    def load(runtime, folder, threads, *more):
        gen = _load(runtime, folder, threads, *more)
        if runtime not in _AT:
            return gen
        generate, generate_batch = gen.generate, gen.generate_batch

        def crash_on(prompts):
            if any(len(p) == _AT[runtime] for p in prompts):
                resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file
                os.kill(os.getpid(), signal.SIGSEGV)

        def crashing(prompt, max_new_tokens, on_token):
            crash_on([prompt])
            return generate(prompt, max_new_tokens, on_token)

        def crashing_batch(prompts, max_new_tokens):
            crash_on(prompts)
            return generate_batch(prompts, max_new_tokens)

        gen.generate, gen.generate_batch = crashing, crashing_batch
        return gen

    generators.load = load
"""


def test_a_runtime_that_crashes_on_one_prompt_length_fails_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch (the reference too) dies on the longest prompt, OpenVINO GenAI on the
    shortest: each fails on its own, ONNX Runtime GenAI is checked and timed, and the
    run ends with its verdict. The reference runs again without the prompt it died
    on, which no candidate is quality-checked on, and the document says so."""
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(CRASH_AT_PROMPT)
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(inject), os.environ.get("PYTHONPATH")]))
    )
    wl = generation_workload(tmp_path)
    w = api.load_generation(str(wl))
    assert w is not None
    lengths = [len(p) for p in w.prompts]
    longest, shortest = max(lengths), min(lengths)
    assert lengths.count(longest) == lengths.count(shortest) == 1
    monkeypatch.setenv("BAKEOFF_TEST_CRASH_AT_PROMPT", f"torch:{longest},openvino-genai:{shortest}")
    result = CliRunner().invoke(
        app,
        [
            "run", str(wl), "--quick", "--budget", "3",
            "--runtimes", "torch,onnxruntime-genai,openvino-genai", "--precisions", "fp32",
            "--concurrency", "2", "--json", str(tmp_path / "g.json"),
            "--store", str(tmp_path / "s.db"),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "g.json").read_text())
    by = {c["id"]: c for c in doc["candidates"]}
    for failed in ("torch-fp32", "openvino-genai-fp32"):
        assert by[failed]["status"] == "failed" and "SIGSEGV" in by[failed]["reason"]
    ort = by["onnxruntime-genai-fp32"]
    assert ort["status"] == "ok", ort["reason"]
    assert ort["quality"]["passed"] is True and ort["tpot_ms"] is not None
    (gone,) = doc["reference"]["prompts_left_out"]
    assert gone["prompt"] == lengths.index(longest) and gone["prompt_tokens"] == longest
    assert "SIGSEGV" in gone["reason"]
    assert f"prompt {gone['prompt']} ({longest} tokens): left out" in result.output
    assert doc["verdict"]["tpot_batch_1"]["winner"] == "onnxruntime-genai-fp32"


def test_the_generative_tables_fit_ordinary_terminals(run: tuple[dict, str]) -> None:
    doc, _ = run
    store = str(Path(doc["workload"]["folder"]).parent / ".bakeoff" / "bakeoff.db")
    ids = [doc["run_id"], *(c["id"] for c in doc["candidates"])]
    for width in WIDTHS:
        shown = printed_at(width, lambda: call("show", doc["run_id"], "--store", store).stdout)
        assert_fits(shown, width, ids)


def _torch_and_vllm(tmp_path: Path, *flags: str, budget: str = "3") -> tuple[dict, dict]:
    """A quick run of torch and vLLM at FP32 with `flags`: its document and vLLM's
    candidate (skipped where vLLM's environment is not made)."""
    if generators.availability("vllm"):
        pytest.skip(str(generators.availability("vllm")))
    wl = generation_workload(tmp_path)
    result = CliRunner().invoke(
        app,
        [
            "run", str(wl), "--quick", "--budget", budget, "--runtimes", "torch,vllm",
            "--precisions", "fp32", *flags, "--json", str(tmp_path / "g.json"),
            "--store", str(tmp_path / "s.db"),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "g.json").read_text())
    return doc, next(c for c in doc["candidates"] if c["id"] == "vllm-fp32")


@pytest.mark.vllm
def test_vllm_runs_in_its_own_environment_through_the_gate_and_the_sweep(tmp_path: Path) -> None:
    """Its workers run the vLLM venv's Python on the same protocol: FP32 writes the
    reference's tokens, and the sweep labels its batching as vLLM's continuous one."""
    _doc, vllm = _torch_and_vllm(tmp_path, "--concurrency", "4")
    assert vllm["status"] == "ok", vllm["reason"]
    assert vllm["quality"]["token_agreement"] == 1.0
    assert vllm["settings"]["batching"].startswith("continuous batching")
    assert vllm["settings"]["vllm_version"] == "0.32.0"
    assert set(vllm["concurrency"]) == {"1", "4"} and vllm["tpot_ms"]["ci95"]


def test_slo_belongs_to_the_server_scenario(tmp_path: Path) -> None:
    wl = generation_workload(tmp_path)
    said = call("run", str(wl), "--slo", "ttft_p99_ms=100")
    assert said.code == 2 and "--slo: the target of --scenario server" in said.stderr
    said = call("run", str(wl), "--scenario", "server", "--slo", "ttft=1")
    assert said.code == 2 and "--slo: 'ttft=1'" in said.stderr
    said = call("run", str(wl), "--scenario", "offline")
    assert said.code == 2 and "--scenario" in said.stderr


@pytest.mark.vllm
def test_vllm_serves_arrivals_through_its_own_scheduler(tmp_path: Path) -> None:
    """In the server scenario vLLM takes each request as it arrives: at the higher
    rates it runs several at once (continuous batching), which a static queue cannot
    do between its batches."""
    # a search long enough to double past vLLM's one-at-a-time rate, where requests overlap
    doc, vllm = _torch_and_vllm(tmp_path, "--scenario", "server", budget="15")
    assert vllm["server"]["batching"].startswith("continuous batching")
    assert max(s["mean_running"] for s in vllm["server"]["tested"]) > 1.0
    assert doc["verdict"]["server_rate"]["ranking"]
    # `bakeoff serve RUN` starts vLLM's own OpenAI-compatible server; one completion
    answer = _complete_through_served(doc["run_id"], tmp_path / "s.db", "vllm-fp32")
    assert answer["choices"] and answer["model"] == "tiny-gpt2"


def _complete_through_served(run_id: str, store: Path, candidate: str) -> dict:
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    bakeoff = str(Path(sys.executable).parent / "bakeoff")
    served = subprocess.Popen(
        [bakeoff, "serve", run_id, "--candidate", candidate, "--port", str(port),
         "--store", str(store)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            assert served.poll() is None, served.stdout.read() if served.stdout else ""
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2)
                break
            except OSError:
                time.sleep(1)
        body = json.dumps({"model": "tiny-gpt2", "prompt": "def f(self):", "max_tokens": 4})
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/completions",
            data=body.encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as reply:
            return json.loads(reply.read())
    finally:
        served.terminate()
        served.wait(timeout=60)
