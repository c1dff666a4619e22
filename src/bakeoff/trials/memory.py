"""The peak resident memory a worker charges to the batch size it is timed at."""

from __future__ import annotations

import contextlib
import ctypes
import resource


class PeakMemory:
    """The peak resident memory charged to the batch size a worker is timed at: the
    larger of the load (up to and including the first call) and everything since the
    peak was last restarted (after the quality pass, and at each `Rebatch`), so the
    gate's pass at the largest batch size is not charged to a smaller one. Memory a
    runtime's allocator kept from that pass still counts: it is resident.

    The kernel restarts a process's peak (VmHWM) through /proc/self/clear_refs;
    where that cannot be written, the figure is the whole process's peak.
    """

    def __init__(self) -> None:
        self.load_kib = 0
        self.restarts = True

    @staticmethod
    def _peak_kib() -> int:
        try:
            with open("/proc/self/status") as status:
                for line in status:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1])
        except (OSError, ValueError, IndexError):
            pass
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)

    def loaded(self) -> None:
        self.load_kib = self._peak_kib()

    def restart(self) -> None:
        # What the allocator holds free goes back to the system first (glibc's heap
        # keeps it otherwise), so a larger batch's freed buffers are not resident.
        _malloc_trim()
        try:
            with open("/proc/self/clear_refs", "w") as refs:
                refs.write("5")
        except OSError:
            self.restarts = False

    def scope(self) -> str:
        if self.restarts:
            return "load and first call, then the batch size timed (quality pass apart)"
        return "the whole process (its peak could not be restarted here)"

    def mb(self) -> float:
        return max(self.load_kib, self._peak_kib()) / 1024


def _malloc_trim() -> None:
    with contextlib.suppress(OSError, AttributeError):  # AttributeError: not glibc
        ctypes.CDLL(None).malloc_trim(0)
