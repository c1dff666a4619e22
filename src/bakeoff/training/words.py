"""A training run's verdicts in words, the same for the terminal and the reports
(plain text: each caller escapes it for where it goes)."""

from __future__ import annotations

from typing import Any


def verdict_words(v: dict[str, Any]) -> str:
    """One verdict in words: a winner only where it is separated from the reference."""
    winner, base, ratio = v["winner"], v["baseline"], v["ratio"]
    if not winner:
        return f"no winner ({v['reason']})"
    if v["objective"] == "peak_memory":
        low = f"{winner} the lowest"
        if ratio and winner != base:
            low += f", {ratio['value']:.2f}x less than the reference {base}"
        return low + (f" ({v['reason']})" if v["ties"] else "")
    if winner == base:
        return f"{winner}, the reference: no stack beat it"
    gain = (
        ""
        if not ratio
        else f"{ratio['value']:.2f}x (CI {ratio['ci95'][0]:.2f}-{ratio['ci95'][1]:.2f})"
    )
    if any(base in tie and winner in tie for tie in v["ties"]):
        return (
            f"no stack beat the reference {base}: the leader {winner} measured {gain}, "
            "not separated from it"
        )
    return f"{winner}, {gain} over the reference {base}"


OBJECTIVES = {
    "samples_per_s": "highest samples/s",
    "time_to_target": "fastest to the target",
    "peak_memory": "lowest peak memory",
}
