"""builtin:tiny-lm — a small GPT-2 trained on first use on the Python standard library.

No pretrained language model can be downloaded here, so the built-in makes its own:
`transformers`' own `GPT2LMHeadModel` (4 layers, 192 wide, about 2.6 M parameters)
and a byte-level BPE tokenizer (4,096 tokens, `tokenizers`), both trained on the
lines of the standard library's source files, comments and docstrings included.
Every Python ships that text and nobody on this project wrote it. Training takes
about a minute on 2 cores and is cached per Python version (the text is that
Python's); the folder is an ordinary Hugging Face causal-LM folder, so it goes
through the same loading code as a user's own.

A file is held out by a hash of its path (one in `HELD_OUT_EVERY`), never by line,
so neither the prompts nor the perplexity text were seen in training, not even as
a neighbour's context. Prompts are held-out lines, short and long ones both
(`PROMPTS_PER_LENGTH` each), so that prefill is measured at two lengths.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import sysconfig
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bakeoff.paths import cache_dir
from bakeoff.stacks.schedule import Schedule
from bakeoff.workload import GenerationWorkload, WorkloadSpec, generation_workload_from_spec

VERSION = 1  # bump when anything below changes what is trained
SEED = 0
HELD_OUT_EVERY = 8
SKIP_PARTS = frozenset({"test", "tests", "idle_test", "site-packages", "__pycache__"})
MIN_LINE, MAX_LINE = 16, 200  # characters: no blank lines or walls of data
VOCAB = 4096
EOT = "<|endoftext|>"
CONTEXT = 128  # tokens per training window
MAX_POSITIONS = 256  # prompt plus generated tokens
WIDTH, LAYERS, HEADS = 192, 4, 4
STEPS, BATCH, LR, WARMUP = 128, 16, 3e-3, 16
SHORT_PROMPT = (16, 40)  # characters
LONG_PROMPT = (80, MAX_LINE)
PROMPTS_PER_LENGTH = 16
PERPLEXITY_LINES = 256
# Training lines AWQ and GPTQ calibrate INT4 on: the text the model learned from,
# never the prompts or the perplexity text that judge it.
CALIBRATION_LINES = 64
CALIBRATION_FILE = "calibration.txt"


@dataclass(frozen=True)
class Corpus:
    train: list[str]  # lines, file by file
    held_out: list[str]


def _files(stdlib: Path) -> list[Path]:
    return [
        f for f in sorted(stdlib.rglob("*.py")) if not SKIP_PARTS & set(f.relative_to(stdlib).parts)
    ]


def _lines(file: Path) -> list[str]:
    try:
        text = file.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return []
    lines = (line.strip() for line in text.splitlines())
    return [line for line in lines if MIN_LINE <= len(line) <= MAX_LINE]


def corpus(stdlib: Path | None = None) -> Corpus:
    """The standard library's lines, split by file into training and held-out text."""
    root = stdlib or Path(sysconfig.get_paths()["stdlib"])
    train: list[str] = []
    held: list[str] = []
    for file in _files(root):
        key = zlib.crc32(file.relative_to(root).as_posix().encode())
        (held if key % HELD_OUT_EVERY == 0 else train).extend(_lines(file))
    if not train or not held:
        raise RuntimeError(f"no standard-library text found under {root}")
    return Corpus(train, held)


def prompts_and_text(held_out: list[str]) -> tuple[list[str], list[str]]:
    """Short and long held-out lines as prompts; other held-out lines for perplexity."""
    rng = random.Random(SEED)
    unique = sorted(set(held_out))
    rng.shuffle(unique)

    def pick(bounds: tuple[int, int]) -> list[str]:
        return [line for line in unique if bounds[0] <= len(line) <= bounds[1]][:PROMPTS_PER_LENGTH]

    prompts = pick(SHORT_PROMPT) + pick(LONG_PROMPT)
    chosen = set(prompts)
    text = [line for line in unique if line not in chosen][:PERPLEXITY_LINES]
    return prompts, text


def calibration_lines(train: list[str]) -> list[str]:
    """A fixed sample of the training lines, long ones (a calibration passage of a
    few tokens tells AWQ and GPTQ little)."""
    long = sorted({line for line in train if len(line) >= LONG_PROMPT[0]})
    return random.Random(SEED).sample(long, min(CALIBRATION_LINES, len(long)))


def _calibration_file(folder: Path) -> Path:
    """The folder's calibration lines, written once where a folder trained before
    they existed has none (the same lines a fresh build writes)."""
    path = folder / CALIBRATION_FILE
    if not path.exists():
        tmp = path.with_name(f".{CALIBRATION_FILE}.{os.getpid()}")
        _write_lines(tmp, calibration_lines(corpus().train))
        os.replace(tmp, path)
    return path


def _tokenizer(lines: list[str]) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2TokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        min_frequency=2,
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(lines, trainer)
    return GPT2TokenizerFast(tokenizer_object=tok, bos_token=EOT, eos_token=EOT, unk_token=EOT)


def _token_stream(tokenizer: Any, lines: list[str]) -> Any:
    """The training text as one token stream, file after file, lines joined by
    newlines, so that context runs across lines as it does in the files; training
    windows are drawn from it at random."""
    import torch

    text = "\n".join(lines)
    ids = tokenizer(text, return_attention_mask=False)["input_ids"]
    return torch.tensor(ids, dtype=torch.long)


def _train(
    tokenizer: Any, stream: Any, steps: int, progress: Callable[[str], None]
) -> tuple[Any, list[float]]:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(SEED)
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=MAX_POSITIONS,
        n_embd=WIDTH,
        n_layer=LAYERS,
        n_head=HEADS,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = GPT2LMHeadModel(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
    generator = torch.Generator().manual_seed(SEED)
    # The training stacks' own schedule: warm-up, then half a cosine to the end.
    schedule = Schedule(LR, "cosine", min(WARMUP, steps - 1), steps)
    losses: list[float] = []
    model.train()
    # Gradients on whatever the process set before (a torch runtime loaded in this
    # process turns them off for the whole process).
    with torch.enable_grad():
        for step in range(steps):
            starts = torch.randint(0, len(stream) - CONTEXT - 1, (BATCH,), generator=generator)
            batch = torch.stack([stream[s : s + CONTEXT] for s in starts.tolist()])
            for group in optimizer.param_groups:
                group["lr"] = schedule.at(step)
            loss = model(input_ids=batch, labels=batch).loss
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            losses.append(loss.item())
            if step % 20 == 0 or step == steps - 1:
                progress(f"tiny-lm: step {step + 1}/{steps}, loss {losses[-1]:.3f}")
    return model.eval(), losses


def folder_path() -> Path:
    """Where the trained folder lives: per recipe version and Python version."""
    py = f"py{sys.version_info.major}{sys.version_info.minor}"
    return cache_dir() / f"tiny-lm-v{VERSION}-{py}"


@contextmanager
def _lock(path: Path) -> Iterator[None]:
    import fcntl

    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        yield


def _write_lines(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def build(
    target: Path, steps: int | None = None, progress: Callable[[str], None] = lambda _: None
) -> dict[str, Any]:
    """Train the tokenizer and the model and write the folder at `target` (which must
    not exist yet): the model folder in `model/`, `prompts.txt`, `heldout.txt`,
    `calibration.txt`, and
    `recipe.json` with what was trained and how it ended."""
    steps = STEPS if steps is None else steps
    started = time.perf_counter()
    text = corpus()
    prompts, held_text = prompts_and_text(text.held_out)
    tokenizer = _tokenizer(text.train)
    stream = _token_stream(tokenizer, text.train)
    model, losses = _train(tokenizer, stream, steps, progress)
    model.generation_config.pad_token_id = tokenizer.eos_token_id
    target.mkdir(parents=True)
    model.save_pretrained(target / "model")
    tokenizer.save_pretrained(target / "model")
    _write_lines(target / "prompts.txt", prompts)
    _write_lines(target / "heldout.txt", held_text)
    _write_lines(target / CALIBRATION_FILE, calibration_lines(text.train))
    recipe = {
        "version": VERSION,
        "python": sys.version.split()[0],
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab": len(tokenizer),
        "steps": steps,
        "batch": BATCH,
        "context": CONTEXT,
        "training_tokens": len(stream),
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "train_s": round(time.perf_counter() - started, 1),
        "prompts": len(prompts),
        "heldout_lines": len(held_text),
    }
    (target / "recipe.json").write_text(json.dumps(recipe, indent=2) + "\n")
    return recipe


def train_if_needed(progress: Callable[[str], None] = lambda _: None) -> Path:
    """The cached folder, trained first if this cache has none. Two processes asking at
    once train it once (a lock); the folder appears whole or not at all (renamed
    into place)."""
    path = folder_path()
    if (path / "recipe.json").exists():
        return path
    with _lock(path):
        if (path / "recipe.json").exists():
            return path
        progress("tiny-lm: training the built-in language model once (about a minute)")
        scratch = Path(tempfile.mkdtemp(dir=path.parent, prefix=path.name + "."))
        try:
            build(scratch / "out", progress=progress)
            if path.exists():  # a half folder from a process killed mid-rename
                shutil.rmtree(path)
            os.replace(scratch / "out", path)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return path


MAX_NEW_TOKENS = 32


def workload(progress: Callable[[str], None] = lambda _: None) -> GenerationWorkload:
    folder = train_if_needed(progress)
    spec = WorkloadSpec.model_validate(
        {
            "name": "tiny-lm",
            "description": "a 2.6 M-parameter GPT-2 trained on the Python standard library",
            "model": {"kind": "hf", "path": str(folder / "model"), "task": "text-generation"},
            "data": {
                "prompts": str(folder / "prompts.txt"),
                "perplexity_text": str(folder / "heldout.txt"),
                "calibration_text": str(_calibration_file(folder)),
                "max_new_tokens": MAX_NEW_TOKENS,
            },
        }
    )
    return generation_workload_from_spec(spec, origin="builtin:tiny-lm", base_dir=None)
