"""Error types that decide the exit code.

UserError means the input was wrong (exit 2, a message, no traceback);
anything else that escapes is a bakeoff failure (exit 1).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class UserError(Exception):
    """Bad input from the user: a workload file, a flag, a missing run id."""

    exit_code = 2


class BakeoffError(Exception):
    """Something went wrong that is not the user's input (exit 1)."""

    exit_code = 1


def did_you_mean(typed: str, known: Iterable[str]) -> str:
    """ " (did you mean 'onnxruntime'?)" when `typed` is close to one of `known`, else
    "": every place a runtime, precision, stack or kind name is typed answers a typo
    with the name it was probably meant to be."""
    close = difflib.get_close_matches(typed, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
