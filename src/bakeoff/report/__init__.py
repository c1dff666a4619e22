"""Reporting while a run works (progress) and after (tables, JSON)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from bakeoff.candidates import Candidate


class Reporter(Protocol):
    def stage(self, text: str) -> None: ...

    def progress(self, task: str, done: int, total: int) -> None: ...

    def candidates(self, candidates: list[Candidate]) -> None: ...


class NullReporter:
    """For library callers and tests: says nothing."""

    def stage(self, text: str) -> None:
        pass

    def progress(self, task: str, done: int, total: int) -> None:
        pass

    def candidates(self, candidates: list[Candidate]) -> None:
        pass
