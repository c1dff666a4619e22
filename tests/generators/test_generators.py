"""Generative models (issue 22, first part): the generation quality gate and timings
(pure), the PyTorch generation runtimes on a tiny random GPT-2 folder, and the
`builtin:tiny-lm` recipe."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from bakeoff import generators
from bakeoff.builtins import tiny_lm
from bakeoff.judge import generation as gen
from tiny_gpt2 import PROMPTS, greedy, tiny_gpt2, with_tokenizer

# ---- the gate and the timings, by hand ----------------------------------------


def test_token_agreement_counts_prompts_whose_first_n_tokens_match() -> None:
    reference = [[1, 2, 3, 4], [5, 6, 7, 8], [9, 9], [1, 1, 1, 1]]
    candidate = [[1, 2, 3, 4], [5, 6, 0, 8], [9, 9, 3], [1, 1, 1, 1]]
    share, prefix = gen.token_agreement(reference, candidate, n=3)
    # prompt 1 differs at token 3; prompt 3: the reference stopped after 2 tokens, the
    # candidate went on, so its first 3 are not the reference's.
    assert share == pytest.approx(2 / 4)
    assert prefix == pytest.approx((4 + 2 + 2 + 4) / 4)
    assert gen.token_agreement(reference, candidate, n=2)[0] == 1.0  # all agree that far
    with pytest.raises(ValueError, match="3 candidate outputs for 4 prompts"):
        gen.token_agreement(reference, candidate[:3])


def test_perplexity_is_exp_of_the_mean_nll() -> None:
    assert gen.perplexity(10 * math.log(7.0), 10) == pytest.approx(7.0)
    assert gen.perplexity(math.inf, 3) == math.inf
    with pytest.raises(ValueError):
        gen.perplexity(1.0, 0)


def test_the_gate_passes_an_exact_variant_and_names_what_failed_otherwise() -> None:
    exact = gen.judge([[1, 2]] * 4, [[1, 2]] * 4, 20.0, 20.0)
    assert exact.passed and exact.perplexity_rise == 0.0
    drifted = gen.judge([[1, 2]] * 4, [[1, 3]] * 4, 20.0, 25.0, max_drop=0.1)
    assert not drifted.passed
    assert drifted.token_agreement == 0.0 and drifted.perplexity_rise == pytest.approx(0.25)
    words = drifted.describe()
    assert words.startswith("rejected on token agreement and perplexity")
    assert "perplexity 25.00 vs reference 20.00 (+25.0%" in words
    only_ppl = gen.judge([[1, 2]] * 4, [[1, 2]] * 4, 20.0, 30.0)
    assert only_ppl.describe().startswith("rejected on perplexity:")
    better = gen.judge([[1, 2]] * 4, [[1, 2]] * 4, 20.0, 19.0)
    assert better.passed  # lower perplexity by chance is never a rejection
    doc = drifted.to_json()
    assert {"token_agreement", "common_prefix", "perplexity", "reference_perplexity"} <= set(doc)
    assert doc["passed"] is False


def test_time_to_first_token_and_per_output_token() -> None:
    t = gen.RequestTiming(1_000, (4_000, 5_000, 6_000, 9_000))
    assert t.ttft_ns == 3_000
    assert t.tpot_ns == pytest.approx((9_000 - 4_000) / 3)
    assert t.total_ns == 8_000 and t.tokens == 4
    assert gen.RequestTiming(0, (5,)).tpot_ns is None
    with pytest.raises(ValueError, match="no token"):
        _ = gen.RequestTiming(0, ()).ttft_ns


# ---- the PyTorch runtimes on a tiny random GPT-2 -------------------------------


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_gpt2(tmp_path_factory.mktemp("gpt2"))


def test_torch_reports_each_greedy_token_as_it_arrives_and_scores_text(gpt2: Path) -> None:
    eager = generators.load("torch", gpt2, threads=1)
    ref, ref_timing = greedy(eager)
    again, timing = greedy(eager)
    assert again == ref  # greedy: the same text every time
    assert all(len(o) == 16 for o in ref)  # eos is token 0, which this model never picks
    # every token was reported as it arrived, in order, after its request started
    for t, o in zip(ref_timing + timing, ref + again, strict=True):
        assert t.tokens == len(o) and t.ttft_ns > 0
        assert list(t.token_ns) == sorted(t.token_ns)
    text = list(range(1, 40))
    nll, n = eager.nll(text)
    assert n == 38 and nll > 0
    assert eager.nll(text[:1]) == (0.0, 0)


def test_torch_serves_arrivals_through_transformers_continuous_batching(gpt2: Path) -> None:
    """The server scenario's path for eager torch: requests join transformers'
    continuous batching as they arrive; those that arrive together run beside one
    another, each gets as many tokens as alone, and a later one starts when it comes."""
    from bakeoff.generators.arrivals import Arrival

    g = generators.load("torch", gpt2, threads=1)
    assert g.settings["server_batching"].startswith("continuous batching: transformers'")
    assert not hasattr(generators.load("torch-compile", gpt2, threads=1), "serve")
    alone = [g.generate(p, 8, lambda _t: None) for p in PROMPTS]
    schedule = [Arrival(0, p) for p in PROMPTS] + [Arrival(300_000_000, PROMPTS[0])]
    for _ in range(2):  # the manager is started once and serves every send
        served = g.serve(schedule, 8)  # type: ignore[attr-defined]
        assert [s.tokens for s in served] == [len(t) for t in alone] + [len(alone[0])]
        assert all(s.arrived_ns < s.first_ns <= s.last_ns for s in served)
        assert min(s.running for s in served[:4]) > 1.0  # batched beside one another
        assert served[4].first_ns >= 300_000_000  # not before it arrived


# Slow (about 45 s on 2 cores: torch.compile compiles a GPT-2 at each shape): make test
# keeps torch eager and the genai runtimes; make test-slow runs it.
@pytest.mark.slow
def test_torch_compile_writes_eagers_greedy_tokens_and_scores_alike(gpt2: Path) -> None:
    """One prompt length: each new length costs torch.compile another compile, and
    the text is what is checked here (the run checks every prompt's)."""
    eager = generators.load("torch", gpt2, threads=1)
    compiled = generators.load("torch-compile", gpt2, threads=1)
    prompt = PROMPTS[1]
    ref = eager.generate(prompt, 16, lambda _t: None)
    assert compiled.generate(prompt, 16, lambda _t: None) == ref  # compiles here
    stamps: list[int] = []
    assert compiled.generate(prompt, 16, lambda _t: stamps.append(1)) == ref  # compiled
    assert len(stamps) == 16
    text = list(range(1, 40))
    assert compiled.nll(text) == pytest.approx(eager.nll(text), rel=1e-5)


@pytest.fixture(scope="module")
def decoder_export(gpt2: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict]:
    """The run's steps folder and the tiny GPT-2's decoder export in it."""
    from bakeoff.transforms import cached_step, genai_export

    steps = str(tmp_path_factory.mktemp("steps"))
    return steps, cached_step(steps, "decoder-onnx", lambda d: genai_export.decoder_onnx(gpt2, d))


@pytest.fixture(scope="module")
def genai_folders(gpt2: Path, decoder_export: tuple[str, dict]) -> dict[str, Path]:
    """ONNX Runtime GenAI's and OpenVINO GenAI's folders of the tiny GPT-2, built as a
    run builds them: one export, each runtime's steps from it."""
    from bakeoff.transforms import cached_step, genai_export, ov_genai

    steps, export = decoder_export
    folders = {}
    for precision in ("fp32", "int4"):
        built = cached_step(
            steps,
            f"onnxruntime-genai-{precision}",
            lambda d, p=precision: genai_export.ort_genai_folder(export, p, 1, d),
        )
        folders[f"onnxruntime-genai-{precision}"] = Path(built["path"])
    for precision in ("fp32", "int8", "int4"):
        built = cached_step(
            steps,
            f"openvino-genai-{precision}",
            lambda d, p=precision: ov_genai.openvino_genai_folder(export, gpt2, p, d),
        )
        folders[f"openvino-genai-{precision}"] = Path(built["path"])
    built = cached_step(
        steps,
        "onnxruntime-genai-int4-gptq",
        lambda d: genai_export.ort_genai_folder(export, "int4", 1, d, "gptq", CALIBRATION),
    )
    folders["onnxruntime-genai-int4-gptq"] = Path(built["path"])
    built = cached_step(
        steps,
        "openvino-genai-int4-gptq",
        lambda d: ov_genai.openvino_genai_folder(
            export, gpt2, "int4", d, method="gptq", calibration=CALIBRATION
        ),
    )
    folders["openvino-genai-int4-gptq"] = Path(built["path"])
    return folders


# Calibration text for AWQ and GPTQ: token ids the prompts do not use.
CALIBRATION = [list(range(60, 90)), list(range(120, 140)), [200, 201, 202] * 5]


@pytest.mark.parametrize("runtime", ["onnxruntime-genai", "openvino-genai"])
def test_gptq_tunes_int4_to_its_calibration_text_and_still_generates(
    genai_folders: dict[str, Path], runtime: str
) -> None:
    folder = genai_folders[f"{runtime}-int4-gptq"]
    q = json.loads((folder / "step.json").read_text())["settings"]["quantization"]
    assert (q["method"], q["calibration_samples"]) == ("gptq", 3)
    plain = json.loads((genai_folders[f"{runtime}-int4"] / "step.json").read_text())
    weights = "int4_matmuls" if runtime == "onnxruntime-genai" else "int4_weights"
    # every layer plain INT4 made INT4, GPTQ did too
    assert q[weights] == plain["settings"]["quantization"][weights] > 0
    g = generators.load(runtime, folder, 1, "int4")
    tokens, _ = greedy(g, new=4)
    assert all(len(t) <= 4 for t in tokens) and any(tokens)


def test_awq_on_a_gelu_model_is_not_needed_and_says_why(
    gpt2: Path, decoder_export: tuple[str, dict]
) -> None:
    """GPT-2's MLP has GELU, which NNCF's AWQ does not scale through: NNCF finds no
    pattern, so the candidate would be plain INT4 under another name. The step says
    so, and says it again to a later caller in the run."""
    from bakeoff.transforms import StepNotNeeded, cached_step, ov_genai

    steps, export = decoder_export

    def awq(d: Path) -> dict:
        return ov_genai.openvino_genai_folder(
            export, gpt2, "int4", d, method="awq", calibration=CALIBRATION
        )

    for _ in range(2):
        with pytest.raises(StepNotNeeded, match=r"AWQ found none of its layer patterns.*GELU"):
            cached_step(steps, "openvino-genai-int4-awq", awq)


def test_awq_rescales_a_model_with_an_activation_nncf_scales_through(tmp_path: Path) -> None:
    """With SiLU in its MLP (LLaMA's family of activations) NNCF's AWQ finds its
    MatMul-activation-MatMul pattern: the candidate is AWQ's own, says so, and the
    gate judges it like any other."""
    from bakeoff.transforms import cached_step, genai_export, ov_genai

    model = tiny_gpt2(tmp_path / "silu", vocab=320, activation="silu")
    steps = str(tmp_path / "steps")
    export = cached_step(steps, "decoder-onnx", lambda d: genai_export.decoder_onnx(model, d))
    built = cached_step(
        steps,
        "openvino-genai-int4-awq",
        lambda d: ov_genai.openvino_genai_folder(
            export, model, "int4", d, method="awq", calibration=CALIBRATION
        ),
    )
    folder = Path(built["path"])
    q = json.loads((folder / "step.json").read_text())["settings"]["quantization"]
    assert (q["method"], q["calibration_samples"]) == ("awq", 3) and q["int4_weights"] > 0
    torch_gen = generators.load("torch", model, threads=1)
    awq = generators.load("openvino-genai", folder, 1, "int4")
    reference, _ = greedy(torch_gen, new=4)
    tokens, _ = greedy(awq, new=4)
    text = list(range(1, 60))
    judged = gen.judge(
        reference, tokens, gen.perplexity(*torch_gen.nll(text)), gen.perplexity(*awq.nll(text))
    )
    assert 0.0 <= judged.token_agreement <= 1.0 and judged.perplexity > 0


@pytest.mark.parametrize("runtime", ["onnxruntime-genai", "openvino-genai"])
def test_genai_runtimes_write_torchs_greedy_tokens_at_fp32_and_score_alike(
    gpt2: Path, genai_folders: dict[str, Path], runtime: str
) -> None:
    """The issue's check: torch and two other runtimes agree exactly at FP32 (on
    every prompt, 16 tokens each), on folders bakeoff wrote itself."""
    eager = generators.load("torch", gpt2, threads=1)
    other = generators.load(runtime, genai_folders[f"{runtime}-fp32"], threads=1)
    ref, _ = greedy(eager)
    out, timings = greedy(other)
    assert out == ref
    assert all(len(t.token_ns) == len(o) for t, o in zip(timings, out, strict=True))
    text = list(range(1, 60))
    assert other.nll(text) == pytest.approx(eager.nll(text), rel=1e-5)
    assert other.settings["threads"] == 1 and other.settings["batching"]


def test_mlx_writes_torchs_greedy_tokens_at_fp32_and_quantizes_as_it_loads(gpt2: Path) -> None:
    """mlx-lm on MLX's CPU backend reads the folder transformers wrote: at FP32 it
    writes torch's text and scores it alike; bf16, 8-bit and 4-bit are applied as it
    loads, and say so."""
    eager = generators.load("torch", gpt2, threads=1)
    mlx = generators.load("mlx", gpt2, threads=1)
    ref, _ = greedy(eager)
    out, timings = greedy(mlx)
    assert out == ref
    assert all(len(t.token_ns) == len(o) for t, o in zip(timings, out, strict=True))
    text = list(range(1, 60))
    assert mlx.nll(text) == pytest.approx(eager.nll(text), rel=1e-5)
    assert mlx.settings["mlx_device"].startswith("Device(cpu") and mlx.settings["batching"]
    assert mlx.generate_batch(PROMPTS, 8).tokens == [
        mlx.generate(p, 8, lambda _t: None) for p in PROMPTS
    ]
    for precision, bits in (("int8", 8), ("int4", 4)):
        quantized = generators.load("mlx", gpt2, threads=1, precision=precision)
        assert quantized.settings["quantization"]["bits"] == bits
        assert quantized.weights_bytes < mlx.weights_bytes  # type: ignore[attr-defined]
        assert quantized.nll(text)[0] == pytest.approx(eager.nll(text)[0], rel=0.05)
    assert generators.load("mlx", gpt2, threads=1, precision="bf16").settings["dtype"] == "bfloat16"


@pytest.mark.parametrize("runtime", ["torch", "onnxruntime-genai", "openvino-genai"])
def test_a_batch_of_prompts_gets_each_prompts_own_greedy_tokens(
    gpt2: Path, genai_folders: dict[str, Path], runtime: str
) -> None:
    """Prompts of different lengths submitted together, padded as the runtime masks
    padding: each row is what the prompt gets alone, and its first token is timed."""
    folder = gpt2 if runtime == "torch" else genai_folders[f"{runtime}-fp32"]
    g = generators.load(runtime, folder, threads=1)
    alone = [g.generate(p, 8, lambda _t: None) for p in PROMPTS]
    batch = g.generate_batch(PROMPTS, 8)
    assert batch.tokens == alone
    assert len(batch.first_token_ns) == len(PROMPTS) and min(batch.first_token_ns) > 0


def test_openvino_genais_continuous_batching_refuses_the_folder_and_the_label_says_why(
    genai_folders: dict[str, Path],
) -> None:
    """The server scenario labels OpenVINO GenAI's batching with the measured reason
    its own scheduler is not used: ContinuousBatchingPipeline refuses the folder."""
    import openvino_genai as ovg

    g = generators.load("openvino-genai", genai_folders["openvino-genai-fp32"], threads=1)
    assert g.settings["server_batching"].startswith("static batches from a queue")
    with pytest.raises(RuntimeError, match="No ScaledDotProductAttention operation"):
        ovg.ContinuousBatchingPipeline(
            str(genai_folders["openvino-genai-fp32"]), ovg.SchedulerConfig(), "CPU"
        )


def test_genai_quantized_folders_are_smaller_and_say_how_they_were_made(
    genai_folders: dict[str, Path],
) -> None:
    from bakeoff.generation.worker import _folder_bytes

    size = {name: _folder_bytes(folder) for name, folder in genai_folders.items()}
    assert size["onnxruntime-genai-int4"] < size["onnxruntime-genai-fp32"]
    assert size["openvino-genai-int4"] < size["openvino-genai-int8"]
    assert size["openvino-genai-int8"] < size["openvino-genai-fp32"]
    ort4 = json.loads((genai_folders["onnxruntime-genai-int4"] / "step.json").read_text())
    q = ort4["settings"]["quantization"]
    # every Conv1D layer (4 a block) and the tied output head, which got a weight of its own
    assert q["int4_matmuls"] == 2 * 4 + 1 and q["transposed_weights"] == 1
    ov4 = json.loads((genai_folders["openvino-genai-int4"] / "step.json").read_text())
    assert ov4["settings"]["stateful"] and ov4["settings"]["quantization"]["int4_weights"] > 0
    config = json.loads((genai_folders["onnxruntime-genai-fp32"] / "genai_config.json").read_text())
    assert config["model"]["type"] == "decoder" and config["search"]["do_sample"] is False


def test_a_broken_variant_is_rejected_with_its_figures(gpt2: Path, tmp_path: Path) -> None:
    """The same model with its weights scrambled stands in for a quantization that
    the model does not survive: the gate rejects it and says by how much."""
    broken = tiny_gpt2(tmp_path / "broken", noise=0.5)
    eager = generators.load("torch", gpt2, threads=1)
    bad = generators.load("torch", broken, threads=1)
    ref, _ = greedy(eager)
    out, _ = greedy(bad)
    text = list(range(1, 60))
    q = gen.judge(ref, out, gen.perplexity(*eager.nll(text)), gen.perplexity(*bad.nll(text)))
    assert not q.passed
    assert q.token_agreement < 0.5 and q.perplexity_rise > 0.1
    assert q.describe().startswith("rejected on token agreement and perplexity")


def test_a_prompt_too_long_for_the_model_is_a_clear_error(gpt2: Path) -> None:
    g = generators.load("torch", gpt2, threads=1)
    with pytest.raises(ValueError, match="exceeds the model's 128 positions"):
        g.generate([1] * 120, 16, lambda _t: None)


def test_unknown_runtime_is_named() -> None:
    with pytest.raises(ValueError, match="unknown generative runtime 'nope'"):
        generators.availability("nope")
    assert generators.availability("torch") is None


# ---- builtin:tiny-lm ----------------------------------------------------------


def test_tiny_lm_holds_out_whole_files_and_picks_short_and_long_prompts(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    for i in range(40):
        pkg = lib / ("test" if i == 0 else f"pkg{i}")
        pkg.mkdir(parents=True)
        lines = [f"line {j} of file number {i} with text" for j in range(5)]
        lines += ["x" * 90 + f" long line of file {i}", "short", "", "y" * 300]
        (pkg / "mod.py").write_text("\n".join(lines))
    corpus = tiny_lm.corpus(lib)

    def files(lines: list[str]) -> set[str]:
        return {line.split("file number ")[1].split()[0] for line in lines if "number" in line}

    train_files, held_files = files(corpus.train), files(corpus.held_out)
    assert train_files and held_files and not train_files & held_files
    assert "0" not in train_files | held_files  # test folders are left out
    everything = corpus.train + corpus.held_out
    assert "short" not in everything and not any(line.startswith("y") for line in everything)
    prompts, text = tiny_lm.prompts_and_text(corpus.held_out)
    lengths = sorted(len(p) for p in prompts)
    assert lengths[0] <= tiny_lm.SHORT_PROMPT[1] and lengths[-1] >= tiny_lm.LONG_PROMPT[0]
    assert not set(prompts) & set(text)


# Slow (about 30 s on 2 cores, training a 2M-parameter GPT-2 for a few steps): the
# generative runs in make test use the small GPT-2 of tests/tiny_gpt2.py.
@pytest.mark.slow
def test_tiny_lm_builds_an_ordinary_causal_lm_folder_and_caches_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A few steps instead of the recipe's, so the test stays short; the folder, its
    files and the cache are what the full recipe writes."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setenv("BAKEOFF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(tiny_lm, "STEPS", 3)
    said: list[str] = []
    folder = tiny_lm.train_if_needed(said.append)
    assert folder == tiny_lm.folder_path() and said[0].startswith("tiny-lm: training")
    recipe = json.loads((folder / "recipe.json").read_text())
    assert recipe["steps"] == 3 and recipe["vocab"] == tiny_lm.VOCAB
    assert recipe["parameters"] > 2_000_000
    tokenizer = AutoTokenizer.from_pretrained(folder / "model", local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(folder / "model", local_files_only=True)
    assert type(model).__name__ == "GPT2LMHeadModel"
    line = "def __init__(self, name):"
    assert tokenizer.decode(tokenizer(line)["input_ids"]) == line
    prompts = (folder / "prompts.txt").read_text().splitlines()
    assert len(prompts) == 2 * tiny_lm.PROMPTS_PER_LENGTH
    held = (folder / "heldout.txt").read_text().splitlines()
    assert len(held) == tiny_lm.PERPLEXITY_LINES
    # AWQ and GPTQ calibrate on training lines, never on the text that judges them
    calibration = (folder / tiny_lm.CALIBRATION_FILE).read_text().splitlines()
    assert len(calibration) == tiny_lm.CALIBRATION_LINES
    assert set(calibration) <= set(tiny_lm.corpus().train)
    assert not set(calibration) & (set(prompts) | set(held))
    again: list[str] = []
    assert tiny_lm.train_if_needed(again.append) == folder and again == []  # cached
    # A folder trained before the calibration file existed gets the same lines
    (folder / tiny_lm.CALIBRATION_FILE).unlink()
    w = tiny_lm.workload()
    assert (folder / tiny_lm.CALIBRATION_FILE).read_text().splitlines() == calibration
    assert w.calibration_source == "data.calibration_text"
    assert w.calibration == [tokenizer(line)["input_ids"] for line in calibration]


# ---- the GGUF writer (gguf alone; llama.cpp itself is in test_generation_llama_cpp) ----


def test_a_gpt2_folder_is_written_as_the_gguf_llama_cpp_reads(tmp_path: Path) -> None:
    import gguf
    from safetensors.numpy import load_file

    from bakeoff.transforms import gguf_export

    # the byte-level alphabet alone is 256 tokens; 320 rows leave some unused
    folder = with_tokenizer(tiny_gpt2(tmp_path / "gpt2", vocab=320))
    weights = load_file(str(folder / "model.safetensors"))
    for precision, matrix_type in (("f32", "F32"), ("f16", "F16")):
        written = gguf_export.write_gguf(folder, tmp_path / "m.gguf", precision)
        reader = gguf.GGUFReader(str(written))
        tensors = {t.name: t for t in reader.tensors}
        per_block = [
            f"blk.{i}.{part}.{kind}"
            for i in range(2)
            for part in ("attn_norm", "attn_qkv", "attn_output", "ffn_norm", "ffn_up", "ffn_down")
            for kind in ("weight", "bias")
        ]
        expected = {"token_embd.weight", "position_embd.weight", "output.weight"}
        expected |= {"output_norm.weight", "output_norm.bias", *per_block}
        assert set(tensors) == expected
        qkv = tensors["blk.0.attn_qkv.weight"]
        assert qkv.tensor_type.name == matrix_type
        assert tensors["blk.0.attn_qkv.bias"].tensor_type.name == "F32"  # biases stay F32
        # Hugging Face's Conv1D keeps (in, out); GGUF rows are outputs
        want = weights["transformer.h.0.attn.c_attn.weight"].T
        got = np.asarray(qkv.data, dtype=np.float32).reshape(want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-3 if precision == "f16" else 0, atol=1e-3)
        field = reader.fields["tokenizer.ggml.tokens"]
        assert len(field.data) == 320  # the embedding's rows, the unused ones padded
        types = reader.fields["tokenizer.ggml.token_type"]
        assert int(types.parts[types.data[-1]][0]) == int(gguf.TokenType.UNUSED)


def test_a_folder_that_is_not_gpt2_is_refused_by_name(tmp_path: Path) -> None:
    from bakeoff.transforms import gguf_export

    (tmp_path / "config.json").write_text(
        json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]})
    )
    refused = r"GPT-2 folders only; this one is LlamaForCausalLM"
    with pytest.raises(gguf_export.GgufUnsupported, match=refused):
        gguf_export.write_gguf(tmp_path, tmp_path / "m.gguf")


def test_a_request_the_model_ends_at_once_is_timed_not_failed() -> None:
    """A prompt whose greedy answer is the end of text at once: a request of 0
    tokens, timed to its end, not a worker failure."""
    from bakeoff.generation.messages import GenerateSpec
    from bakeoff.generation.worker import Generating

    class EndsShortPrompts:
        runtime = "test"

        def generate(self, prompt: list[int], max_new_tokens: int, on_token) -> list[int]:
            if len(prompt) > 1:
                on_token(7)
                on_token(8)
                return [7, 8]
            return []

        def nll(self, tokens: list[int]) -> tuple[float, int]:
            return 0.0, 0

    spec = GenerateSpec("test", "fp32", "/m", "/a", "/in.json", "/out.json", 4, 1)
    timed = Generating(EndsShortPrompts(), spec, [[1], [1, 2, 3]]).requests(4)
    assert timed.extra["tokens"] == [0, 2, 0, 2]
    assert len(timed.latency_ns) == 4 and min(timed.latency_ns) >= 0
    assert timed.latency_ns[0] == timed.extra["ttft_ns"][0] > 0  # 0 tokens: TPOT is TTFT
    assert timed.block_ns >= sum(timed.extra["total_ns"])
