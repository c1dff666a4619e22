"""Every output a model returns, judged by name: a variant's outputs matched to the
reference's (by name, by a name's plain form, else by shape and position, said in
the document), each compared with its own metric, the variant failing on its worst.

A worker saves its first output as `<id>.npy`, as it always has (exports and older
runs read that file), and, where the model returns more than one, every output
beside it in `<id>.outputs.npz`: the names in order, then the arrays."""

from __future__ import annotations

import dataclasses
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.judge.quality import Quality, evaluate

# (name, array) pairs in the model's own order.
Named = list[tuple[str, np.ndarray]]

# The one output of a file that holds one (a run stored before names were kept).
ONLY_OUTPUT = "output"


def named_path(outputs_path: str | Path) -> Path:
    """Where every output goes, beside the first output's `.npy`."""
    path = Path(outputs_path)
    return path.with_name(path.stem + ".outputs.npz")


def save_named(outputs_path: str | Path, outputs: Named) -> None:
    """The first output as `.npy`; all of them beside it where there are several."""
    np.save(outputs_path, outputs[0][1])
    every = named_path(outputs_path)
    if len(outputs) == 1:
        every.unlink(missing_ok=True)
        return
    arrays: dict[str, Any] = {f"o{i}": array for i, (_, array) in enumerate(outputs)}
    arrays["names"] = np.array([name for name, _ in outputs])
    # np.savez adds ".npz" to a name without it: this one ends in it already.
    np.savez(every, **arrays)


def load_named(outputs_path: str | Path) -> Named:
    """What `save_named` wrote (read without pickle)."""
    every = named_path(outputs_path)
    if not every.exists():
        return [(ONLY_OUTPUT, np.load(outputs_path, allow_pickle=False))]
    with np.load(every, allow_pickle=False) as saved:
        return [(str(name), saved[f"o{i}"]) for i, name in enumerate(saved["names"])]


def copy_named(source: str | Path, target: str | Path) -> None:
    """`save_named`'s files at `source` to `target`."""
    shutil.copyfile(source, target)
    if named_path(source).exists():
        shutil.copyfile(named_path(source), named_path(target))
    else:
        named_path(target).unlink(missing_ok=True)


@dataclass(frozen=True)
class Pairing:
    """Which variant output is compared with which reference output, and how they
    were matched ("" where the names matched or there is one output each)."""

    pairs: tuple[tuple[str, str], ...]  # (reference output, variant output)
    how: str = ""


class Unmatched(ValueError):
    """A variant's outputs that cannot be matched to the reference's."""


def _plain(name: str) -> str:
    """A name as formats rewrite it: TensorFlow's ":0" tensor suffix, the TFLite
    converter's "serving_default_" / "StatefulPartitionedCall" wrapping, case."""
    name = re.sub(r":\d+$", "", name.strip()).lower()
    return name.removeprefix("serving_default_")


def _by_name(wanted: Sequence[str], variant: Sequence[str]) -> Pairing | None:
    if set(wanted) <= set(variant):
        return Pairing(tuple((w, w) for w in wanted))
    plain: dict[str, list[str]] = {}
    for name in variant:
        plain.setdefault(_plain(name), []).append(name)
    found = [plain.get(_plain(w), []) for w in wanted]
    if all(len(f) == 1 for f in found):
        pairs = tuple((w, f[0]) for w, f in zip(wanted, found, strict=True))
        renamed = ", ".join(f"{w} = {v}" for w, v in pairs if w != v)
        return Pairing(pairs, f"by name as formats rewrite it ({renamed})")
    return None


def _per_sample(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(shape[1:])


def _by_shape(reference: Named, variant: Named) -> dict[str, str] | None:
    """Outputs of one per-sample shape paired in order, where each shape has as many
    outputs on both sides; None where it has not."""
    groups: dict[tuple[int, ...], tuple[list[str], list[str]]] = {}
    for side, outputs in enumerate((reference, variant)):
        for name, array in outputs:
            groups.setdefault(_per_sample(array.shape), ([], []))[side].append(name)
    if any(len(ours) != len(theirs) for ours, theirs in groups.values()):
        return None
    return {r: v for ours, theirs in groups.values() for r, v in zip(ours, theirs, strict=True)}


def pair_outputs(reference: Named, variant: Named, only: Sequence[str] | None = None) -> Pairing:
    """The variant's outputs matched to the reference's `only` (default: all of them)."""
    ref_names, var_names = [n for n, _ in reference], [n for n, _ in variant]
    wanted = list(only) if only else ref_names
    if len(reference) == 1 and len(variant) == 1:
        return Pairing(((ref_names[0], var_names[0]),))
    found = _by_name(wanted, var_names)
    if found is not None:
        return found
    shaped = _by_shape(reference, variant)
    if shaped is not None:
        pairs = tuple((w, shaped[w]) for w in wanted)
        stated = ", ".join(f"{w} = {v}" for w, v in pairs)
        return Pairing(pairs, f"by shape and position, the names differing ({stated})")
    raise Unmatched(
        f"the variant returns {len(variant)} outputs ({', '.join(var_names)}) and the "
        f"reference {len(reference)} ({', '.join(ref_names)}): they match neither by name "
        "nor by shape; [quality] outputs = [...] names the ones to judge"
    )


@dataclass(frozen=True)
class OutputRule:
    """How one output is judged: `[quality.per_output.<name>]`, else `[quality]`'s."""

    metric: str
    max_drop: float


def _badness(q: Quality) -> tuple[bool, float]:
    """A failing output first, then the largest drop for its allowance."""
    ratio = q.drop / q.max_drop if q.max_drop > 0 else (0.0 if q.drop <= 0 else float("inf"))
    return (not q.passed, float("inf") if not np.isfinite(ratio) else ratio)


def judge_outputs(
    variant: Named,
    reference: Named,
    labels: np.ndarray | None,
    rule: OutputRule,
    only: Sequence[str] | None = None,
    per_output: Mapping[str, OutputRule] | None = None,
) -> Quality:
    """Each matched output against the reference's; the worst one's figure, with
    every output's beside it (`Quality.outputs`) where there are several."""
    pairing = pair_outputs(reference, variant, only)
    theirs, ours = dict(reference), dict(variant)
    found = []
    for ref_name, var_name in pairing.pairs:
        own = (per_output or {}).get(ref_name, rule)
        try:
            q = evaluate(own.metric, ours[var_name], theirs[ref_name], labels, own.max_drop)
        except ValueError as exc:
            if len(pairing.pairs) == 1:
                raise
            raise ValueError(f"output {ref_name}: {exc}") from None
        found.append(dataclasses.replace(q, output=ref_name))
    if len(found) == 1 and len(reference) == 1:
        return dataclasses.replace(found[0], output=None)
    worst = max(found, key=_badness)
    return dataclasses.replace(worst, outputs=tuple(found), matched=pairing.how)


@dataclass(frozen=True)
class OutputGate:
    """The workload's quality gate as rules: `[quality]`'s metric and max_drop, the
    outputs it restricts the comparison to, and each output's own rule. Build steps
    that tune against the gate (NNCF's accuracy control) judge with it too."""

    rule: OutputRule
    only: tuple[str, ...] | None = None
    per_output: dict[str, OutputRule] = dataclasses.field(default_factory=dict)

    def without_labels(self) -> OutputGate:
        """The gate on data without labels (a calibration split): agreement with the
        reference's top-1 stands in for accuracy, the closest label-free figure."""

        def free(rule: OutputRule) -> OutputRule:
            return OutputRule("agreement", rule.max_drop) if rule.metric == "accuracy" else rule

        per_output = {name: free(rule) for name, rule in self.per_output.items()}
        return OutputGate(free(self.rule), self.only, per_output)

    def on(self, names: Sequence[str]) -> OutputGate:
        """The gate for outputs named `names` (a converted model's): the outputs and
        rules it names that are not among them are left out, and where none of
        `only` is, every output is judged."""
        only = tuple(n for n in self.only or () if n in names) or None
        per_output = {n: r for n, r in self.per_output.items() if n in names}
        return OutputGate(self.rule, only, per_output)

    def judge(self, variant: Named, reference: Named, labels: np.ndarray | None = None) -> Quality:
        return judge_outputs(variant, reference, labels, self.rule, self.only, self.per_output)

    def key(self) -> str:
        """Names the gate in a cache step's name: metric and max_drop, and a digest
        of the rest where there is more."""
        base = f"{self.rule.metric}-{self.rule.max_drop:g}"
        if not self.only and not self.per_output:
            return base
        import hashlib
        import json

        more = {
            "only": list(self.only or ()),
            "per_output": {n: [r.metric, r.max_drop] for n, r in sorted(self.per_output.items())},
        }
        digest = hashlib.sha256(json.dumps(more, sort_keys=True).encode()).hexdigest()
        return f"{base}-{digest[:8]}"


def default_gate() -> OutputGate:
    """The gate of a workload that sets none: `[quality]`'s defaults."""
    return OutputGate(OutputRule("cosine", 0.01))


def worst_ratio(quality: Quality) -> float:
    """How far the worst output is into its allowance: its drop over its max_drop
    (1 at the limit); 0 with no drop, infinite past a max_drop of 0."""
    return _badness(quality)[1]
