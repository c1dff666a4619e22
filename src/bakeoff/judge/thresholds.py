"""The numbers the verdict's rules use, each with why it is what it is.

`verdict` judges with them and `verdict_words` recites them; both read them here.
"""

from __future__ import annotations

DEFAULT_MARGIN = 0.02  # the equivalence margin: a CI inside 1 +- this is a tie
NOISY_CV = 0.10  # round-to-round spread above which a result is flagged noisy
FAMILY_ALPHA = 0.05  # the error budget a verdict's comparisons share (Bonferroni)

# Two worker processes of one model can differ by a few percent for good (memory
# layout, page placement: a property of the process, not of the runtime). So a
# gap whose CI does not clear this is a close call, which no single pair of
# processes can settle however many rounds it runs.
CLOSE_CALL = 0.10
# A close call is decided only when this many pairs of processes, each with
# MIN_PAIR_ROUNDS rounds, show it on their own. With two pairs, two identical
# ONNX Runtime candidates whose process effects fell the same way were called
# "faster" in 4 of 60 A/A verdicts (benchmarks/aa_test.py); with three, in none
# of 90 (digits and MiniLM, batch 1 and 32).
CLOSE_CALL_PROCESSES = 3
MIN_PAIR_ROUNDS = 2
