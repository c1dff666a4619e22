"""One run's lifecycle, the same for every kind of bake-off (inference, training,
text generation): its id, the lock that keeps a second process off it, its row in
the store from start to finish, and what an interruption or a failure leaves there.

    with lifecycle(store_path, run_id, resumable=True, on_interrupt=say_how) as run:
        run.start(name, environment, settings)   # or run.resume() for a stored run
        ...measure...
        run.finish(document)

On the way out the row says what happened: `done` where `finish` was called;
`interrupted` on Ctrl-C or SIGTERM (the command line turns SIGTERM into
KeyboardInterrupt) for a kind that resumes, `failed` for one that does not; and
`failed` for any other error. Before `start` or `resume` the row is not touched, so
a resume that is refused leaves the stored run as it was. The lock is taken before
the store is touched and held until the end. `StoreEvents` is what the trial engine
tells the run as it goes: progress said, timed calls kept in the store.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from bakeoff.paths import RunFolder, hold_run_lock
from bakeoff.store import Store

__all__ = ["FinishedRun", "Run", "StoreEvents", "lifecycle", "new_run_id"]


def new_run_id(prefix: str = "") -> str:
    """A run id: the kind's prefix (`train-`, `gen-`, none for inference), the local
    date and time to the second, and four hex digits that keep two runs started in
    the same second apart."""
    return f"{prefix}{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


@dataclass
class FinishedRun:
    """A finished run: its id and document. The exit code is 0 when a candidate
    is ok (for a kind whose verdict names no winner otherwise)."""

    run_id: str
    document: dict[str, Any]

    @property
    def exit_code(self) -> int:
        ok = [c for c in self.document["candidates"] if c["status"] == "ok"]
        return 0 if ok else 1


class Run:
    """A run being run: its id, folder and open store, and the status its row gets
    if the run ends before `finish` (None: the row is left as it is)."""

    def __init__(self, run_id: str, folder: RunFolder, store: Store) -> None:
        self.run_id, self.folder, self.store = run_id, folder, store
        self.ends_as: str | None = None

    def start(self, name: str, environment: dict[str, Any], settings: dict[str, Any]) -> None:
        self.store.start_run(self.run_id, name, environment, settings)
        self.ends_as = "failed"

    def resume(self) -> None:
        self.store.mark_running(self.run_id)
        self.ends_as = "failed"

    def finish(self, document: dict[str, Any]) -> None:
        self.store.finish_run(self.run_id, "done", document)
        self.ends_as = None


@contextlib.contextmanager
def lifecycle(
    store_path: str | Path,
    run_id: str,
    resumable: bool,
    on_interrupt: Callable[[], None] = lambda: None,
) -> Iterator[Run]:
    """The run `run_id` in the store at `store_path`, held by this process; see the
    module's docstring. `on_interrupt` says how to go on, once the row says so."""
    store_path = Path(store_path)
    store_path.parent.mkdir(parents=True, exist_ok=True)
    folder = RunFolder.of(store_path, run_id)
    lock = hold_run_lock(folder, run_id)  # before the store is touched
    try:
        with Store(store_path) as store:
            run = Run(run_id, folder, store)
            try:
                yield run
            except KeyboardInterrupt:
                if run.ends_as is not None:
                    run.ends_as = "interrupted" if resumable else "failed"
                    store.finish_run(run_id, run.ends_as, None)
                    run.ends_as = None
                    on_interrupt()
                raise
            finally:
                if run.ends_as is not None:
                    store.finish_run(run_id, run.ends_as, None)
    finally:
        lock.close()


class _Entrant(Protocol):
    @property
    def id(self) -> str: ...


class StoreEvents:
    """The trial engine's events for a run (`trials.lanes.Events`): progress said, and
    every timed call kept in the store. A kind keeps more by overriding `changed` (an
    entrant the engine has changed) and `figures` (the per-call figures a worker gives
    beside the timed one)."""

    def __init__(self, say: Callable[[str], None], store: Store, run_id: str) -> None:
        self.say, self.store, self.run_id = say, store, run_id

    def note(self, message: str, entrant: Any | None) -> None:
        self.say(message)
        self.changed(entrant)

    def changed(self, entrant: Any | None) -> None:
        """Nothing to keep here; a kind that saves its candidates as they change does."""

    def timed(
        self,
        entrant: _Entrant,
        round_index: int,
        kind: str,
        latency_ns: list[int],
        block_ns: int | None,
        slot: int,
        extra: dict[str, list[int]] | None = None,
    ) -> None:
        self.store.add_trial(
            self.run_id, entrant.id, round_index, kind, latency_ns, block_ns, slot, extra
        )
        if extra:
            self.figures(entrant, kind, extra)

    def figures(self, entrant: Any, kind: str, extra: dict[str, list[int]]) -> None:
        """Nothing to keep here; a kind whose workers give per-call figures does."""
