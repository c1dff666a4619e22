"""SQLite store of runs, candidates, trials with their raw samples, and environments.

Written as results arrive, each write in its own transaction, with WAL, so a
killed orchestrator loses nothing that finished. Raw latencies are stored as
little-endian int64 nanoseconds in a BLOB per trial.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.errors import UserError

SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    workload TEXT NOT NULL,
    status TEXT NOT NULL,            -- running | done | failed | interrupted
    environment TEXT NOT NULL,       -- JSON fingerprint
    settings TEXT NOT NULL,          -- JSON: budget, threads, quick, ...
    document TEXT                    -- the final JSON result document
);
CREATE TABLE IF NOT EXISTS candidates (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    candidate_id TEXT NOT NULL,
    status TEXT NOT NULL,
    document TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (run_id, candidate_id)
);
CREATE TABLE IF NOT EXISTS trials (
    run_id TEXT NOT NULL,
    candidate_id TEXT NOT NULL,
    round INTEGER NOT NULL,          -- -1 for warm-up
    kind TEXT NOT NULL,              -- warmup | measure
    calls INTEGER NOT NULL,
    block_ns INTEGER,
    latency_ns BLOB NOT NULL,
    recorded_at REAL NOT NULL,
    process INTEGER NOT NULL DEFAULT 0  -- which of the candidate's worker processes
);
CREATE INDEX IF NOT EXISTS trials_by_candidate ON trials (run_id, candidate_id);
CREATE TABLE IF NOT EXISTS sweeps (
    sweep_id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    workloads TEXT NOT NULL,         -- JSON list, in the order given
    settings TEXT NOT NULL,          -- JSON: quick, budget, cluster, ...
    status TEXT NOT NULL             -- running | done | interrupted
);
CREATE TABLE IF NOT EXISTS sweep_runs (
    sweep_id TEXT NOT NULL REFERENCES sweeps(sweep_id),
    workload TEXT NOT NULL,
    attempt INTEGER NOT NULL,        -- 1, then 2 where a lost node's workload was requeued
    run_id TEXT,                     -- the ordinary run in this store, once it came back
    node_id TEXT NOT NULL,
    node_type TEXT NOT NULL,
    status TEXT NOT NULL,            -- running | done | failed
    reason TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (sweep_id, workload, attempt)
);
"""


def refuse_generative(record: dict[str, Any], command: str) -> None:
    """A stored generative run, given to a command that does not take one yet."""
    if (record.get("settings") or {}).get("kind") == "generate":
        raise UserError(
            f"run {record['run_id']} is a text-generation run: `bakeoff show "
            f"{record['run_id']}` shows it ({command}: not for generative runs yet)"
        )


_SWEEP_RUN_FIELDS = (
    "sweep_id",
    "workload",
    "attempt",
    "run_id",
    "node_id",
    "node_type",
    "status",
    "reason",
)


# The first 16 bytes of every SQLite 3 database file.
_SQLITE_HEADER = b"SQLite format 3\x00"
_STORE_FIX = "give --store a bakeoff store, or a path where a new one can be made"


def check_store(path: str | Path) -> bool:
    """Whether `path` holds a bakeoff store (False: a new one can be made there: no
    file, an empty one, an SQLite database without tables). A folder, a file that is
    not SQLite and another application's SQLite database are refused with a UserError;
    only read, never written: even opening a database in WAL mode would rewrite its
    header, so nothing is opened for writing until the file is known to be a store."""
    path = Path(path)
    if path.is_dir():
        raise UserError(
            f"{path}: is a folder, not a bakeoff store; give --store a file, e.g. "
            f"{path / 'bakeoff.db'}"
        )
    if not path.exists():
        for parent in path.parents:
            if parent.exists():
                if not parent.is_dir():
                    raise UserError(f"{path}: {parent} is a file, not a folder; {_STORE_FIX}")
                break
        return False
    try:
        with path.open("rb") as f:
            head = f.read(len(_SQLITE_HEADER))
    except OSError as exc:
        raise UserError(f"{path}: cannot be read ({exc.strerror or exc}); {_STORE_FIX}") from None
    if not head:
        return False
    if head != _SQLITE_HEADER:
        raise UserError(f"{path}: not a bakeoff store (not an SQLite database); {_STORE_FIX}")
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=30)
        try:
            tables = sorted(
                name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")
            )
            version = (
                db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
                if "meta" in tables
                else None
            )
        finally:
            db.close()
    except sqlite3.Error as exc:
        raise UserError(f"{path}: a damaged SQLite database ({exc}); {_STORE_FIX}") from None
    if not tables:
        return False
    if version is None or not str(version[0]).isdigit():
        shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
        raise UserError(
            f"{path}: another application's SQLite database (tables: {shown}), not a bakeoff "
            f"store, left as it is; {_STORE_FIX}"
        )
    return True


class Store:
    """One open connection to a store; `with Store(path) as s:` closes it after."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        check_store(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(str(self.path), timeout=30, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise UserError(
                f"{self.path}: cannot make a store there ({exc}); {_STORE_FIX}"
            ) from None
        try:
            self._open()
        except sqlite3.Error as exc:  # a read-only file or folder, a damaged database
            self.db.close()
            raise UserError(f"{self.path}: cannot open the store ({exc})") from None
        except BaseException:
            self.db.close()
            raise

    def _open(self) -> None:
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        with self._tx():
            for stmt in _SCHEMA.split(";"):
                if stmt.strip():
                    self.db.execute(stmt)
            row = self.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is None:
                self.db.execute(
                    "INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
                )
            elif int(row[0]) > SCHEMA_VERSION:
                raise UserError(
                    f"{self.path}: store schema {row[0]} is newer than this bakeoff "
                    f"({SCHEMA_VERSION}); upgrade bakeoff"
                )

    @contextmanager
    def _tx(self) -> Iterator[None]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ writes

    def start_run(
        self, run_id: str, workload: str, environment: dict[str, Any], settings: dict[str, Any]
    ) -> None:
        with self._tx():
            self.db.execute(
                "INSERT INTO runs VALUES (?, ?, ?, 'running', ?, ?, NULL)",
                (run_id, time.time(), workload, json.dumps(environment), json.dumps(settings)),
            )

    def put_candidate(self, run_id: str, doc: dict[str, Any]) -> None:
        with self._tx():
            self.db.execute(
                "INSERT OR REPLACE INTO candidates VALUES (?, ?, ?, ?, ?)",
                (run_id, doc["id"], doc["status"], json.dumps(doc), time.time()),
            )

    def add_trial(
        self,
        run_id: str,
        candidate_id: str,
        round_index: int,
        kind: str,
        latency_ns: list[int],
        block_ns: int | None,
        process: int = 0,
        extra: dict[str, list[int]] | None = None,
    ) -> None:
        """One timed block; `extra`: figures per call beside the timed one (a generated
        request's TTFT and tokens), kept as rows of kind "KIND:NAME" in the same
        transaction, so a round is stored whole or not at all."""
        rows = [(kind, latency_ns, block_ns)]
        rows += [(f"{kind}:{name}", values, None) for name, values in (extra or {}).items()]
        now = time.time()
        with self._tx():
            self.db.executemany(
                "INSERT INTO trials VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        run_id,
                        candidate_id,
                        round_index,
                        row_kind,
                        len(values),
                        row_block,
                        np.asarray(values, dtype="<i8").tobytes(),
                        now,
                        process,
                    )
                    for row_kind, values, row_block in rows
                ],
            )

    def leave_out(self, run_id: str, candidate_ids: list[str], settings: dict[str, Any]) -> None:
        """Candidates the run found it does not need (a variant another one made
        unnecessary) stop being rows; the settings, which say why under `left_out`,
        replace the stored ones, so a resume leaves them out too."""
        with self._tx():
            self.db.executemany(
                "DELETE FROM candidates WHERE run_id = ? AND candidate_id = ?",
                [(run_id, cid) for cid in candidate_ids],
            )
            self.db.execute(
                "UPDATE runs SET settings = ? WHERE run_id = ?", (json.dumps(settings), run_id)
            )

    def drop_trials(self, run_id: str, kind_prefix: str = "") -> None:
        """Forget a run's timed trials (a stage that starts again whole), or those whose
        kind starts with `kind_prefix`."""
        with self._tx():
            self.db.execute(
                "DELETE FROM trials WHERE run_id = ? AND substr(kind, 1, ?) = ?",
                (run_id, len(kind_prefix), kind_prefix),
            )

    def finish_run(self, run_id: str, status: str, document: dict[str, Any] | None) -> None:
        with self._tx():
            self.db.execute(
                "UPDATE runs SET status = ?, document = ? WHERE run_id = ?",
                (status, json.dumps(document) if document is not None else None, run_id),
            )

    # ------------------------------------------------------------ reads

    def runs(self, limit: int = 50) -> list[dict[str, Any]]:
        rows = self.db.execute(
            "SELECT r.run_id, r.created_at, r.workload, r.status, "
            "(SELECT COUNT(*) FROM candidates c WHERE c.run_id = r.run_id), r.document "
            "FROM runs r ORDER BY r.created_at DESC LIMIT ?",
            (limit,),
        ).fetchall()
        out = []
        for run_id, created, workload, status, n, doc in rows:
            winners = []
            if doc:
                for v in json.loads(doc).get("verdicts", []):
                    # a training run's verdicts are per objective, not per batch size
                    winners.append((v.get("batch_size", v.get("objective")), v["winner"]))
            out.append(
                {
                    "run_id": run_id,
                    "created_at": created,
                    "workload": workload,
                    "status": status,
                    "candidates": n,
                    "winners": winners,
                }
            )
        return out

    def run(self, run_id: str) -> dict[str, Any]:
        row = self.db.execute(
            "SELECT run_id, created_at, workload, status, environment, settings, document "
            "FROM runs WHERE substr(run_id, 1, ?) = ? ORDER BY created_at DESC",
            (len(run_id), run_id),
        ).fetchall()
        exact = [r for r in row if r[0] == run_id]
        if exact:
            row = exact
        if not row:
            raise UserError(f"no run {run_id!r} in {self.path} (see `bakeoff ls`)")
        if len(row) > 1:
            raise UserError(f"run id prefix {run_id!r} is ambiguous in {self.path}")
        rid, created, workload, status, env, settings, doc = row[0]
        cands = [
            json.loads(d)
            for (d,) in self.db.execute(
                "SELECT document FROM candidates WHERE run_id = ? ORDER BY candidate_id", (rid,)
            )
        ]
        return {
            "run_id": rid,
            "created_at": created,
            "workload": workload,
            "status": status,
            "environment": json.loads(env),
            "settings": json.loads(settings),
            "document": json.loads(doc) if doc else None,
            "candidates": cands,
        }

    def samples(self, run_id: str, candidate_id: str, kind: str = "measure") -> list[np.ndarray]:
        rows = self.db.execute(
            "SELECT latency_ns FROM trials WHERE run_id = ? AND candidate_id = ? AND kind = ? "
            "ORDER BY round",
            (run_id, candidate_id, kind),
        ).fetchall()
        return [np.frombuffer(blob, dtype="<i8") for (blob,) in rows]

    def by_round(self, run_id: str, candidate_id: str, kind: str) -> dict[int, list[int]]:
        """A candidate's rows of one kind, by round (an `extra` figure's, say)."""
        rows = self.db.execute(
            "SELECT round, latency_ns FROM trials WHERE run_id = ? AND candidate_id = ? "
            "AND kind = ? ORDER BY round",
            (run_id, candidate_id, kind),
        ).fetchall()
        return {int(r): np.frombuffer(b, dtype="<i8").tolist() for r, b in rows}

    def rounds(self, run_id: str, candidate_id: str) -> list[tuple[int, list[int], int, int]]:
        """Measured rounds of a candidate: (round, latencies ns, block ns, process), in order."""
        rows = self.db.execute(
            "SELECT round, latency_ns, block_ns, process FROM trials "
            "WHERE run_id = ? AND candidate_id = ? AND kind = 'measure' ORDER BY round",
            (run_id, candidate_id),
        ).fetchall()
        return [
            (r, np.frombuffer(b, dtype="<i8").tolist(), int(bn), int(p)) for r, b, bn, p in rows
        ]

    # ------------------------------------------------------------ carrying runs

    def export_run(self, run_id: str) -> dict[str, Any]:
        """A run's rows as plain data, to carry it into another store (a cluster node's
        run into the store of the machine that started it)."""
        run = self.db.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if run is None:
            raise UserError(f"no run {run_id!r} in {self.path}")
        return {
            "run": list(run),
            "candidates": [
                list(r)
                for r in self.db.execute("SELECT * FROM candidates WHERE run_id = ?", (run_id,))
            ],
            "trials": [
                list(r) for r in self.db.execute("SELECT * FROM trials WHERE run_id = ?", (run_id,))
            ],
        }

    def import_run(self, rows: dict[str, Any], environment: dict[str, Any]) -> str:
        """A run `export_run` gave, whole, in one transaction, its environment (and its
        document's) extended with `environment` (a cluster node's id and type). Its id
        must be new here. Returns the run id."""
        run = list(rows["run"])
        run_id = str(run[0])
        if self.db.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone():
            raise UserError(f"run {run_id} is in {self.path} already")
        run[4] = json.dumps({**json.loads(run[4]), **environment})
        if run[6]:
            doc = json.loads(run[6])
            doc["environment"] = {**doc.get("environment", {}), **environment}
            run[6] = json.dumps(doc)
        with self._tx():
            self.db.execute("INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?)", run)
            self.db.executemany("INSERT INTO candidates VALUES (?, ?, ?, ?, ?)", rows["candidates"])
            self.db.executemany(
                "INSERT INTO trials VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows["trials"]
            )
        return run_id

    # ------------------------------------------------------------ sweeps

    def start_sweep(self, sweep_id: str, workloads: list[str], settings: dict[str, Any]) -> None:
        with self._tx():
            self.db.execute(
                "INSERT INTO sweeps VALUES (?, ?, ?, ?, 'running')",
                (sweep_id, time.time(), json.dumps(workloads), json.dumps(settings)),
            )

    def set_sweep_status(self, sweep_id: str, status: str) -> None:
        with self._tx():
            self.db.execute("UPDATE sweeps SET status = ? WHERE sweep_id = ?", (status, sweep_id))

    def sweep(self, sweep_id: str) -> dict[str, Any]:
        row = self.db.execute(
            "SELECT sweep_id, created_at, workloads, settings, status FROM sweeps "
            "WHERE sweep_id = ?",
            (sweep_id,),
        ).fetchone()
        if row is None:
            raise UserError(f"no sweep {sweep_id!r} in {self.path}")
        attempts = [
            dict(zip(_SWEEP_RUN_FIELDS, r, strict=True))
            for r in self.db.execute(
                f"SELECT {', '.join(_SWEEP_RUN_FIELDS)} FROM sweep_runs WHERE sweep_id = ? "
                "ORDER BY workload, attempt",
                (sweep_id,),
            )
        ]
        return {
            "sweep_id": row[0],
            "created_at": row[1],
            "workloads": json.loads(row[2]),
            "settings": json.loads(row[3]),
            "status": row[4],
            "attempts": attempts,
        }

    def put_sweep_attempt(self, sweep_id: str, attempt: dict[str, Any]) -> None:
        """One attempt at one workload of a sweep (`_SWEEP_RUN_FIELDS`), new or updated."""
        with self._tx():
            self.db.execute(
                f"INSERT OR REPLACE INTO sweep_runs ({', '.join(_SWEEP_RUN_FIELDS)}, "
                f"updated_at) VALUES ({', '.join('?' * (len(_SWEEP_RUN_FIELDS) + 1))})",
                (sweep_id, *(attempt[k] for k in _SWEEP_RUN_FIELDS[1:]), time.time()),
            )

    def mark_running(self, run_id: str) -> None:
        with self._tx():
            self.db.execute("UPDATE runs SET status = 'running' WHERE run_id = ?", (run_id,))
