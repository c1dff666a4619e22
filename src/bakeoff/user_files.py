"""Reading the files a user hands bakeoff: workload and cost TOMLs, data and params
arrays, JSON manifests. Every way such a file can fail to read (not there, a folder,
not UTF-8, a truncated or damaged archive, pickled objects) becomes one `UserError`
that names the file, says what is wrong and what to do: never a traceback.

`label` is how the caller names the file in its message: the path itself, or the key
that named it (`w.toml: data.path = 'd.npz'`); the path is added where the label
does not hold it already.
"""

from __future__ import annotations

import json
import struct
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.errors import UserError

__all__ = ["read_json", "read_npy", "read_npz", "read_text"]

# What np.load raises on a file that is not a whole .npz / .npy: a zip cut short or
# damaged (BadZipFile, zlib.error, EOFError on an empty file), a header that does not
# parse or does not fit the bytes after it (ValueError, struct.error), a size in a
# damaged header larger than memory (MemoryError, before any byte of it is read),
# object arrays that would have to be unpickled (ValueError), a member the zip's
# directory names but does not hold (KeyError), unreadable bytes (OSError).
_NOT_ARRAYS = (
    ValueError,
    OSError,
    EOFError,
    KeyError,
    MemoryError,
    struct.error,
    zipfile.BadZipFile,
    zlib.error,
)

_PICKLE_HINT = (
    " (an array of Python objects would have to be unpickled, which can run code; "
    "bakeoff never does: save numeric arrays, e.g. np.asarray(x, dtype=np.float32), "
    "or tokenize text first)"
)


def _named(label: str, path: Path) -> str:
    return label if str(path) in label else f"{label}: {path}"


def _os_problem(exc: OSError) -> str:
    if isinstance(exc, IsADirectoryError):
        return "is a folder, not a file"
    if isinstance(exc, FileNotFoundError):
        return "does not exist"
    return f"cannot be read ({exc.strerror or exc})"


def read_text(path: Path, label: str, fix: str) -> str:
    """The file's text, which must be UTF-8; `fix` says what the file should be."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(
            f"{_named(label, path)}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at "
            f"offset {exc.start}); {fix}"
        ) from None
    except OSError as exc:
        raise UserError(f"{_named(label, path)}: {_os_problem(exc)}; {fix}") from None


def read_json(path: Path, label: str, fix: str) -> Any:
    """The file's JSON document (any JSON value: the caller checks its shape)."""
    text = read_text(path, label, fix)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{_named(label, path)}: not JSON ({exc}); {fix}") from None
    except RecursionError:  # nesting deeper than the parser's stack
        raise UserError(f"{_named(label, path)}: not JSON (nested too deep); {fix}") from None


@contextmanager
def _reading_arrays(path: Path, label: str, kind: str) -> Iterator[None]:
    fix = f"save it again with np.{'savez' if kind == '.npz' else 'save'}"
    try:
        yield
    except _NOT_ARRAYS as exc:
        # the file itself out of reach; any other OSError (a seek before the start, say)
        # is the reader following an offset the damaged bytes hold
        if isinstance(exc, (FileNotFoundError, IsADirectoryError, PermissionError)):
            raise UserError(f"{_named(label, path)}: {_os_problem(exc)}") from None
        hint = _PICKLE_HINT if "allow_pickle" in str(exc) else f"; {fix}"
        words = " ".join(str(exc).split()) or type(exc).__name__
        raise UserError(
            f"{_named(label, path)}: not a readable {kind} file of numeric arrays "
            f"({type(exc).__name__}: {words}){hint}"
        ) from None


def read_npz(path: Path, label: str) -> dict[str, np.ndarray]:
    """Every array of a .npz, read whole now (np.load reads members lazily, so a damaged
    member would otherwise fail wherever it is first used), never unpickled."""
    with _reading_arrays(path, label, ".npz"):
        loaded = np.load(path, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise UserError(
                f"{_named(label, path)}: holds one array (.npy format), not named arrays: "
                "save them with np.savez(path, name=array, ...)"
            )
        with loaded:
            return {name: np.asarray(loaded[name]) for name in loaded.files}


def read_npy(path: Path, label: str) -> np.ndarray:
    """The one array of a .npy, never unpickled."""
    with _reading_arrays(path, label, ".npy"):
        loaded = np.load(path, allow_pickle=False)
        if isinstance(loaded, np.lib.npyio.NpzFile):
            loaded.close()
            raise UserError(
                f"{_named(label, path)}: holds named arrays (.npz format), not one array: "
                "name the file .npz"
            )
        return np.asarray(loaded)
