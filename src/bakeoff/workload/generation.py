"""A text-generation workload: a causal-LM folder, its prompts and held-out text, all
tokenized once here by the folder's own tokenizer, so that every runtime is given
the same token ids and judged on the same tokens."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bakeoff.errors import UserError
from bakeoff.judge.generation import DEFAULT_COMPARED_TOKENS, DEFAULT_MIN_AGREEMENT
from bakeoff.workload.checks import check_hf_folder
from bakeoff.workload.data import TOKENIZER_FILES, read_text_lines
from bakeoff.workload.spec import WorkloadSpec, resolve_path

DEFAULT_MAX_NEW_TOKENS = 32


@dataclass(frozen=True)
class GenerationWorkload:
    spec: WorkloadSpec
    origin: str
    folder: Path
    prompts: list[list[int]]  # token ids, one list per prompt
    text: list[list[int]]  # held-out passages for perplexity, token ids
    max_new_tokens: int
    max_positions: int
    architecture: str
    # What AWQ and GPTQ calibrate INT4 on, token ids, and where it came from:
    # data.calibration_text, else the prompts.
    calibration: list[list[int]] = field(default_factory=list)
    calibration_source: str = "prompts"

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def max_drop(self) -> float:
        """The relative perplexity rise a variant may show."""
        return self.spec.quality.max_drop

    @property
    def min_token_agreement(self) -> float:
        q = self.spec.quality.min_token_agreement
        return DEFAULT_MIN_AGREEMENT if q is None else q

    @property
    def compared_tokens(self) -> int:
        return self.spec.quality.compared_tokens or DEFAULT_COMPARED_TOKENS


def is_generation(spec: WorkloadSpec) -> bool:
    return spec.model.task == "text-generation"


def generation_workload_from_spec(
    spec: WorkloadSpec, origin: str, base_dir: str | None
) -> GenerationWorkload:
    from transformers import AutoTokenizer

    assert spec.data is not None and spec.data.prompts is not None and spec.model.path
    folder = resolve_path(base_dir, spec.model.path)
    key = f"{origin}: model.path = {spec.model.path!r}"
    if not folder.is_dir():
        raise UserError(f"{key}: {folder} is not a folder (a Hugging Face causal-LM folder)")
    config, _ = check_hf_folder(spec.model, str(folder), origin)
    architectures = list(getattr(config, "architectures", None) or [])
    if not any(a.endswith("ForCausalLM") or a.endswith("LMHeadModel") for a in architectures):
        raise UserError(
            f"{key}: task = 'text-generation' needs a causal language model; its config "
            f"lists {architectures or 'no architectures'}"
        )
    if not any((folder / name).exists() for name in TOKENIZER_FILES):
        raise UserError(f"{key}: no tokenizer in the folder (one of {', '.join(TOKENIZER_FILES)})")
    tokenizer = AutoTokenizer.from_pretrained(
        str(folder), local_files_only=True, trust_remote_code=False
    )
    positions = int(
        getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", 0) or 0
    )
    new = spec.data.max_new_tokens or DEFAULT_MAX_NEW_TOKENS
    prompts_key = f"{origin}: data.prompts = {spec.data.prompts!r}"
    lines = read_text_lines(resolve_path(base_dir, spec.data.prompts), prompts_key)
    prompts = [list(tokenizer(line)["input_ids"]) for line in lines]
    for line, ids in zip(lines, prompts, strict=True):
        if not ids:
            raise UserError(f"{prompts_key}: the prompt {line!r} has no tokens")
        if positions and len(ids) + new > positions:
            raise UserError(
                f"{prompts_key}: a {len(ids)}-token prompt plus max_new_tokens = {new} exceeds "
                f"the model's {positions} positions ({line[:40]!r}...)"
            )
    if spec.data.perplexity_text is not None:
        text_key = f"{origin}: data.perplexity_text = {spec.data.perplexity_text!r}"
        passages = read_text_lines(resolve_path(base_dir, spec.data.perplexity_text), text_key)
    else:
        passages = lines
    limit = positions or None
    text = [list(tokenizer(p)["input_ids"])[:limit] for p in passages]
    text = [t for t in text if len(t) >= 2]
    if not text:
        raise UserError(f"{origin}: no held-out passage of 2 tokens or more for perplexity")
    calibration, calibration_source = prompts, "prompts"
    if spec.data.calibration_text is not None:
        calib_key = f"{origin}: data.calibration_text = {spec.data.calibration_text!r}"
        calib_lines = read_text_lines(resolve_path(base_dir, spec.data.calibration_text), calib_key)
        calibration = [list(tokenizer(p)["input_ids"])[:limit] for p in calib_lines]
        calibration = [c for c in calibration if c]
        if not calibration:
            raise UserError(f"{calib_key}: no passage with tokens to calibrate on")
        calibration_source = "data.calibration_text"
    return GenerationWorkload(
        spec,
        origin,
        folder,
        prompts,
        text,
        new,
        positions,
        architectures[0] if architectures else "?",
        calibration,
        calibration_source,
    )
