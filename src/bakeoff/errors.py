"""Error types that decide the exit code.

UserError means the input was wrong (exit 2, a message, no traceback);
anything else that escapes is a bakeoff failure (exit 1).
"""

from __future__ import annotations


class UserError(Exception):
    """Bad input from the user: a workload file, a flag, a missing run id."""

    exit_code = 2


class BakeoffError(Exception):
    """Something went wrong that is not the user's input (exit 1)."""

    exit_code = 1
