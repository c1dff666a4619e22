"""The envelope of the messages to a worker process: the job it starts with, the
commands after it. Each kind of bake-off defines its own jobs and commands on these
bases, beside its worker (`inference.messages`, `training.messages`,
`generation.messages`); the commands every measuring worker answers are here.

The orchestrator builds these dataclasses and nothing else; `to_json` gives the
JSON that crosses the socket pair (never pickle: a worker must not run what it
is sent), and the worker reads it back with `message_from_json` against the table
of the messages it knows, which refuses an unknown kind, a missing, unknown or
mistyped field with a `JobError` that names it. Both ends are ours and a resumed
run starts fresh workers, so the format carries no version. The checks are a
few dozen lines here rather than pydantic (which the workload format uses)
because every worker process imports this module before it loads anything, and
pydantic's validators would add tens of milliseconds to each of them.

A job names the module that runs it (`Job.worker`): the launcher starts
``python -m <that module> FD``, so the engine starts a worker of any kind without
importing that kind (a kind is a package above the engine; `trials.worker` is the
loop every kind's worker module runs).

Commands every measuring worker answers: `Warmup`, `Measure` (answered with a
`Timed`), `Peak` (the memory figure so far, and go on) and `Exit`.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self, TypeVar

from bakeoff.trials.fields_json import JobError, describe, encode, from_fields

__all__ = [
    "KIND",
    "MEASURING_COMMANDS",
    "Command",
    "Exit",
    "Job",
    "JobError",
    "Measure",
    "Message",
    "Peak",
    "Timed",
    "Warmup",
    "by_kind",
    "message_from_json",
]

KIND = "kind"  # the field of a message that says which class it is


class Message:
    """to_json / from_json for the dataclasses below, tagged with their `kind`."""

    kind: ClassVar[str]
    what: ClassVar[str]  # "job" or "command", for error messages

    def to_json(self) -> dict[str, Any]:
        return {KIND: self.kind, **encode(self)}

    @classmethod
    def from_json(cls, data: Any) -> Self:
        where = f"{cls.what} {cls.kind!r}"
        if not isinstance(data, dict):
            raise JobError(f"{where}: a message must be a JSON object, not {describe(data)}")
        if data.get(KIND) != cls.kind:
            raise JobError(f"{where}: the message's {KIND} is {data.get(KIND)!r}")
        try:
            return from_fields(cls, data, "", skip=(KIND,))
        except JobError as exc:
            raise JobError(f"{where}: {exc}") from None


@dataclass(frozen=True, kw_only=True)
class Job(Message, abc.ABC):
    """The first message to a worker: what it loads and runs."""

    what: ClassVar[str] = "job"
    # The module whose `main` runs this job (``python -m <worker> FD``).
    worker: ClassVar[str]
    # Whether its worker times a load and a first call: then it gets on-disk compile
    # caches of its own, empty (`trials.launcher`).
    timed_load: ClassVar[bool] = False
    # CPUs the worker pins itself to before anything else (None: the parent's set).
    cpus: tuple[int, ...] | None = None
    # Processes torch.compile (inductor) compiles its kernels in (None: its default,
    # one per core). A load beside others gets 1: its g++ processes would take the
    # cores the others use, and the kernels it makes are the same either way.
    compile_threads: int | None = None
    # A further process of a close call, whose load and first call are not figures
    # of the run: it starts from a copy of the compile caches of its candidate's
    # first worker (the kernels that worker compiled), not from empty ones, so a
    # torch.compile candidate does not compile its model again (tens of seconds of
    # CPU on MiniLM) to run the same kernels. The launcher does the copying.
    reuse_compiles: bool = False
    # The Python that runs its worker (None: this process's own). A runtime whose
    # pins clash with bakeoff's runs in an environment of its own
    # (`bakeoff.runtime_envs`), with bakeoff installed there too, on the same protocol.
    python: str | None = None

    @property
    @abc.abstractmethod
    def threads(self) -> int:
        """The threads its worker runs with (per stream)."""

    def compiles_of(self) -> str | None:
        """Whose compiled kernels its worker makes, where a further worker of the same
        candidate may start from them (`reuse_compiles`); None: nobody's."""
        return None


@dataclass(frozen=True, kw_only=True)
class Command(Message):
    """A message to a started worker; it answers each in turn."""

    what: ClassVar[str] = "command"


@dataclass(frozen=True, kw_only=True)
class Warmup(Command):
    """Run for at least `seconds` and `min_calls`, at most `max_calls`; reply with
    each call's ns."""

    kind: ClassVar[str] = "warmup"
    seconds: float
    min_calls: int
    max_calls: int = 10_000


@dataclass(frozen=True, kw_only=True)
class Measure(Command):
    """`settle` untimed calls, then a block of `calls` timed ones; reply: `Timed`."""

    kind: ClassVar[str] = "measure"
    calls: int
    settle: int = 0


@dataclass(frozen=True, kw_only=True)
class Peak(Command):
    """Reply with the peak resident memory at the current batch size, and go on."""

    kind: ClassVar[str] = "peak"


@dataclass(frozen=True, kw_only=True)
class Exit(Command):
    """Reply with the peak resident memory and end."""

    kind: ClassVar[str] = "exit"


# What every measuring worker answers.
MEASURING_COMMANDS = (Warmup, Measure, Peak, Exit)

M = TypeVar("M", bound=Message)


def by_kind(classes: Iterable[type[M]]) -> dict[str, type[M]]:
    """The table `message_from_json` reads messages against."""
    return {c.kind: c for c in classes}


def message_from_json(table: dict[str, type[M]], data: Any) -> M:
    """The message `data` is, if it is one of `table`'s; else a JobError naming why."""
    what = next(iter(table.values())).what if table else "message"
    if not isinstance(data, dict):
        raise JobError(f"a {what} must be a JSON object, not {describe(data)}")
    if KIND not in data:
        raise JobError(f"a {what} without a {KIND!r} field (known: {', '.join(sorted(table))})")
    cls = table.get(data[KIND]) if isinstance(data[KIND], str) else None
    if cls is None:
        known = ", ".join(sorted(table))
        raise JobError(f"unknown {what} {KIND} {data[KIND]!r} (known: {known})")
    return cls.from_json(data)


@dataclass(frozen=True)
class Timed:
    """The answer to `Measure`: each timed call's ns, and the whole block's; `extra`,
    per-call figures beside the timed one (a generate request's time to first token
    and tokens), by name, one value per call."""

    latency_ns: list[int]
    block_ns: int
    extra: dict[str, list[int]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return encode(self)

    @classmethod
    def from_json(cls, data: Any) -> Self:
        """From a worker's reply (its "ok" is the channel's, not part of this)."""
        if not isinstance(data, dict):
            raise JobError(f"a measure reply must be a JSON object, not {describe(data)}")
        try:
            return from_fields(cls, data, "", skip=("ok",))
        except JobError as exc:
            raise JobError(f"measure reply: {exc}") from None
