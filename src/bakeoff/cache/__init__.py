"""The variant cache: build steps' outputs shared between runs, keyed by content
(what a key hashes, and why that is enough: `cache/keys.py`).

Layout: ``<cache dir>/variants/<key>/entry.json`` plus ``files/`` (the step's
output folder). An entry appears by renaming a finished temporary folder, so a
killed build never leaves a half entry that looks complete, and of two runs
that publish the same key at once the second simply keeps the first's. A hit
hard-links the files into the run's own folder (copies across file systems):
a run folder always holds its artifacts itself, so `bakeoff cache clear`
never breaks `bakeoff export` or `--resume` of an earlier run, and on one file
system no space is used twice. Every file's sha256 is checked before a hit is
used. Failed steps are never cached across runs: a failure may be
environmental (memory, a killed process), so the next run tries again.

The orchestrator writes ``cache_key.json`` into a run's artifacts folder
(`prepare_run`); `bakeoff.transforms.cached_step` reads it in the build
process, so backends name their steps and nothing else.

The modules: `layout` (file names, where the cache is, atomic writes), `keys`
(content hashes and the run's base key), `steps` (one step's lookup,
materialize and publish), `listing` (every entry: `bakeoff cache ls/clear`)
and `events` (a run's step events and its variants). Import from here.
"""

from bakeoff.cache.events import (
    VariantBuild,
    events_offset,
    iter_steps,
    log_event,
    read_events,
    record_variants,
    summarize,
)
from bakeoff.cache.keys import (
    code_hash,
    data_hash,
    folder_hash,
    model_hash,
    prepare_run,
    run_model_hash,
    sha256_file,
    step_key,
)
from bakeoff.cache.layout import (
    DISABLE_ENV,
    ENTRY_FILE,
    EVENTS_FILE,
    FORMAT,
    KEY_FILE,
    ORIGIN_FILE,
    VARIANTS_FILE,
    enabled,
    variants_dir,
)
from bakeoff.cache.listing import Cleared, Entry, clear, entries
from bakeoff.cache.steps import (
    CorruptEntry,
    StepContext,
    discard,
    file_digests,
    local,
    lookup,
    materialize,
    portable,
    publish,
    step_context,
    touch_used,
)

__all__ = [
    "DISABLE_ENV",
    "ENTRY_FILE",
    "EVENTS_FILE",
    "FORMAT",
    "KEY_FILE",
    "ORIGIN_FILE",
    "VARIANTS_FILE",
    "Cleared",
    "CorruptEntry",
    "Entry",
    "StepContext",
    "VariantBuild",
    "clear",
    "code_hash",
    "data_hash",
    "discard",
    "enabled",
    "entries",
    "events_offset",
    "file_digests",
    "folder_hash",
    "iter_steps",
    "local",
    "log_event",
    "lookup",
    "materialize",
    "model_hash",
    "portable",
    "prepare_run",
    "publish",
    "read_events",
    "record_variants",
    "run_model_hash",
    "sha256_file",
    "step_context",
    "step_key",
    "summarize",
    "touch_used",
    "variants_dir",
]
