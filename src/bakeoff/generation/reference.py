"""The generative bake-off's reference: PyTorch FP32's greedy tokens on every prompt
and its perplexity on the held-out text, from a worker of its own, which the gate
compares every candidate with.

A prompt the reference's worker dies on (a crash or a hang at one prompt length)
would end the run, though every other prompt, and every other runtime, may be fine.
The worker notes each prompt as it starts (`gen_worker.progress_path`), so the
prompt it died on is known: that prompt is left out of the reference, which runs
again without it in a fresh process, and out of the quality check (no candidate can
be compared on it). Candidates are still timed on every prompt: the runtime that
dies on it fails on its own. The run gives up where the worker died before any
prompt (its load) or after them all (the perplexity pass).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bakeoff.errors import UserError
from bakeoff.generation.messages import GenerateJob, GenerateSpec
from bakeoff.generation.worker import progress_path
from bakeoff.trials.jobs import Exit
from bakeoff.trials.launcher import Launcher, WorkerFailed


@dataclass(frozen=True)
class GenReference:
    """The reference's figures, as its worker wrote them, but for `tokens`: one entry
    per prompt of the workload, None for a prompt left out; and why each prompt left
    out was (by its index)."""

    tokens: list[list[int] | None]
    nll: float
    predicted: int
    left_out: dict[int, str]

    def compared(self, candidate: list[list[int]]) -> tuple[list[list[int]], list[list[int]]]:
        """The reference's and a candidate's tokens on the prompts the reference has."""
        pairs = [(r, c) for r, c in zip(self.tokens, candidate, strict=True) if r is not None]
        return [r for r, _ in pairs], [c for _, c in pairs]

    def record(self, prompts: list[list[int]]) -> list[dict[str, Any]]:
        """The document's account of the prompts left out, and why."""
        return [
            {"prompt": i, "prompt_tokens": len(prompts[i]), "reason": why}
            for i, why in sorted(self.left_out.items())
        ]


def reference_outputs(
    spec: GenerateSpec,
    prompts: list[list[int]],
    text: list[list[int]],
    launcher: Launcher,
    timeout: float,
    say: Callable[[str], None],
) -> GenReference:
    """The reference's figures from `spec`'s worker; where it dies on a prompt, again
    without that prompt, in a fresh process, until it runs through."""
    left_out: dict[int, str] = {}
    progress = progress_path(spec.outputs_path)
    while True:
        kept = [i for i in range(len(prompts)) if i not in left_out]
        job = GenerateJob(generate=spec)
        if left_out:
            inputs = Path(spec.inputs_path).with_name("reference-inputs.json")
            inputs.write_text(json.dumps({"prompts": [prompts[i] for i in kept], "text": text}))
            job = GenerateJob(generate=dataclasses.replace(spec, inputs_path=str(inputs)))
        # A try that dies before its load must not read the last try's notes.
        progress.unlink(missing_ok=True)
        try:
            _run(job, launcher, timeout)
        except WorkerFailed as exc:
            at = _died_on(progress)
            if at is None or len(kept) == 1:
                gone = "".join(f"; prompt {i} left out: {why}" for i, why in left_out.items())
                raise UserError(f"the reference (torch-fp32) failed: {exc}{gone}") from None
            left_out[kept[at]] = str(exc)
            say(
                f"reference: torch-fp32 failed on prompt {kept[at]} ({len(prompts[kept[at]])} "
                f"tokens): {exc}; again without it, in a fresh process (no candidate is "
                "quality-checked on it)"
            )
            continue
        found = json.loads(Path(spec.outputs_path).read_text())
        tokens: list[list[int] | None] = [None] * len(prompts)
        for i, got in zip(kept, found["tokens"], strict=True):
            tokens[i] = got
        return GenReference(tokens, float(found["nll"]), int(found["predicted"]), left_out)


def _run(job: GenerateJob, launcher: Launcher, timeout: float) -> None:
    worker = launcher.start(job, "reference")
    try:
        worker.reply(timeout)
        worker.request(Exit(), timeout)
    finally:
        worker.close()


def _died_on(progress: Path) -> int | None:
    """The prompt (its index in the worker's inputs) the worker was on when it died;
    None where it died before its first prompt or after its last."""
    try:
        notes = progress.read_text().splitlines()
    except OSError:
        return None
    last = notes[-1] if notes else ""
    return int(last.removeprefix("prompt ")) if last.startswith("prompt ") else None
