"""The quality gate: a variant's outputs on held-out data against the FP32 reference."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

# Floating-point noise must not reject an exact variant whose max_drop is 0.
_EPSILON = 1e-9


@dataclass(frozen=True)
class Quality:
    metric: str
    value: float
    reference: float
    drop: float
    max_drop: float
    worst: float | None = None  # cosine: the least similar sample
    non_finite: int = 0  # samples whose output held NaN or inf
    # A model with several outputs (judge.outputs): the figure above is the worst
    # output's, named here; every output's figure is in `outputs`, and `matched` says
    # how the variant's outputs were matched to the reference's where not by name.
    output: str | None = None
    outputs: tuple[Quality, ...] = ()
    matched: str = ""

    @property
    def passed(self) -> bool:
        return bool(np.isfinite(self.drop)) and self.drop <= self.max_drop + _EPSILON

    def describe(self) -> str:
        named = f"output {self.output}: " if self.output is not None else ""
        if self.non_finite:
            return f"{named}{self.non_finite} held-out samples gave NaN or inf outputs"
        several = f" (the worst of {len(self.outputs)} outputs)" if self.outputs else ""
        return (
            f"{named}{self.metric} {self.value:.4f} vs reference {self.reference:.4f}: "
            f"drop {self.drop:.4f} {'within' if self.passed else 'exceeds'} "
            f"max_drop {self.max_drop:g}{several}"
        )

    def to_json(self) -> dict[str, Any]:
        """The candidate document's `quality`; `from_json` reads it back."""
        doc: dict[str, Any] = {
            "metric": self.metric,
            "value": self.value,
            "reference": self.reference,
            "drop": self.drop,
            "max_drop": self.max_drop,
            "worst": self.worst,
            "non_finite": self.non_finite,
        }
        if self.output is not None:
            doc["output"] = self.output
        if self.outputs:
            doc["outputs"] = [o.to_json() for o in self.outputs]
        if self.matched:
            doc["matched"] = self.matched
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Quality:
        # `worst`, `non_finite` and the outputs are absent from documents older than them.
        return cls(
            doc["metric"],
            doc["value"],
            doc["reference"],
            doc["drop"],
            doc["max_drop"],
            doc.get("worst"),
            doc.get("non_finite", 0),
            doc.get("output"),
            tuple(cls.from_json(o) for o in doc.get("outputs", ())),
            doc.get("matched", ""),
        )


def evaluate(
    metric: str,
    outputs: np.ndarray,
    reference: np.ndarray,
    labels: np.ndarray | None,
    max_drop: float,
) -> Quality:
    if outputs.shape != reference.shape:
        raise ValueError(f"output shape {outputs.shape} differs from reference {reference.shape}")
    out = outputs.reshape(len(outputs), -1).astype(np.float64)
    ref = reference.reshape(len(reference), -1).astype(np.float64)
    bad = int((~np.isfinite(out).all(axis=1)).sum())
    if bad:
        # NaN or inf on even one held-out sample is a broken variant, whatever the
        # average says (argmax of a NaN row is 0, which could look "correct").
        return Quality(metric, float("nan"), float("nan"), float("inf"), max_drop, None, bad)
    if metric == "cosine":
        own, theirs = np.linalg.norm(out, axis=1), np.linalg.norm(ref, axis=1)
        cos = np.sum(out * ref, axis=1) / np.maximum(own * theirs, 1e-12)
        cos = np.where(np.isfinite(cos), cos, -1.0)
        # A row that is zero (to rounding) in both is the same answer, not an opposite
        # one: a ReLU can zero a whole output row, and the cosine of two zero vectors
        # is undefined. Zero in one and not in the other stays a real difference.
        tiny = 1e-6 * max(float(own.max(initial=0.0)), float(theirs.max(initial=0.0)))
        cos = np.where((own <= tiny) & (theirs <= tiny), 1.0, cos)
        return Quality(
            metric, float(cos.mean()), 1.0, float(1.0 - cos.mean()), max_drop, float(cos.min())
        )
    if metric == "max_abs":
        diff = float(np.max(np.abs(out - ref))) if np.isfinite(out).all() else float("inf")
        return Quality(metric, diff, 0.0, diff, max_drop)
    if metric == "agreement":
        agree = float(np.mean(out.argmax(axis=1) == ref.argmax(axis=1)))
        return Quality(metric, agree, 1.0, 1.0 - agree, max_drop)
    if metric == "accuracy":
        if labels is None:
            raise ValueError("the accuracy metric needs labels")
        acc = float(np.mean(out.argmax(axis=1) == labels))
        ref_acc = float(np.mean(ref.argmax(axis=1) == labels))
        return Quality(metric, acc, ref_acc, ref_acc - acc, max_drop)
    raise ValueError(f"unknown metric {metric!r}")
