"""Hosts as Perfetto machines: which processes of a multi-host run are on which machine.

Perfetto (``TracePacket.machine_id``, trace_processor's ``machine`` table, the UI's machine groups)
keeps each machine's processes, threads and tracks apart: every packet about a process carries
its machine's id, its descriptors, its clock snapshot and its events alike, so a file's chunk is
on one machine (:mod:`tracemerge.writers.perfetto_machines` stamps it while the output is
assembled). A file says its host (``FileScan.host``: what its own metadata or its name gives);
a process is on the host its files name. Files of one process, and processes of one file, share a
machine: a process whose files name two hosts, and a process no file names a host for, stay on
the trace's own machine (id 0), with the derived Pipeline tracks. A run of fewer than two hosts
gets no machines at all: its trace is what it was before machines existed.
"""

from __future__ import annotations

from collections import defaultdict

from tracemerge.core.model import Identity
from tracemerge.plan.types import FileScan, Machines, MergePlan, is_first


def assign_machines(scans: list[FileScan], order: dict[Identity, int]) -> Machines | None:
    """The machines of a run, or None when fewer than two hosts are known (nothing changes).

    ``order`` is each process's place in the trace: machine 1 is the host of the first process.
    """
    files = [s for s in scans if not _is_derived(s)]
    groups = _groups(files)
    host_of: dict[Identity, str] = {}
    conflicts: dict[Identity, tuple[str, ...]] = {}
    for members, hosts in groups:
        if len(hosts) == 1:
            host_of.update(dict.fromkeys(members, next(iter(hosts))))
        elif len(hosts) > 1:
            conflicts.update(dict.fromkeys(members, tuple(sorted(hosts))))
    first_place: dict[str, int] = {}
    for ident, host in host_of.items():
        first_place[host] = min(first_place.get(host, len(order)), order.get(ident, len(order)))
    if len(first_place) < 2:
        return None
    ordered_hosts = sorted(first_place, key=lambda h: (first_place[h], h))
    machine_of_host = {host: n + 1 for n, host in enumerate(ordered_hosts)}
    of_process = {ident: machine_of_host[host] for ident, host in host_of.items()}
    of_file = {}
    for s in files:
        machine = next((of_process.get(i, 0) for i in _identities(s)), 0)
        if machine:
            of_file[s.path] = machine
    top = max(s.sequence_id for s in scans)
    derived = {}
    for s in scans:
        if _is_derived(s):
            used = sorted({of_process.get(i, 0) for i in _identities(s)} - {0})
            derived = {top + machine: machine for machine in used}
    return Machines({n: host for host, n in machine_of_host.items()}, of_process, of_file, derived, conflicts)


def unit_machines(machines: Machines | None, scan: FileScan) -> tuple[tuple[int, int], ...]:
    """A unit's sequences on machines of their own, as (sequence id, machine)."""
    if machines is None:
        return ()
    if _is_derived(scan):
        return tuple(sorted(machines.derived_sequences.items()))
    machine = machines.of_file.get(scan.path, 0)
    return ((scan.sequence_id, machine),) if machine else ()


def _is_derived(scan: FileScan) -> bool:
    """The derived tracks' unit: it holds the Pipeline group beside every process's Phases."""
    return any(is_first(ident) for ident in scan.threads)


def _identities(scan: FileScan) -> set[Identity]:
    return {*scan.counts, *scan.threads, *scan.counter_series}


def _groups(files: list[FileScan]) -> list[tuple[set[Identity], set[str]]]:
    """Processes that must share a machine (one file's, or one process's files), each group with
    the hosts its files name."""
    parent: dict[Identity, Identity] = {}

    def root(ident: Identity) -> Identity:
        while parent.setdefault(ident, ident) != ident:
            parent[ident] = parent[parent[ident]]
            ident = parent[ident]
        return ident

    for s in files:
        idents = sorted(_identities(s), key=repr)
        for ident in idents[1:]:
            parent[root(ident)] = root(idents[0])
        if idents:
            root(idents[0])
    members: dict[Identity, set[Identity]] = defaultdict(set)
    for ident in list(parent):
        members[root(ident)].add(ident)
    hosts: dict[Identity, set[str]] = defaultdict(set)
    for s in files:
        host = (s.host or "").strip()
        found = _identities(s)
        if host and found:
            hosts[root(next(iter(found)))].add(host)
    return [(group, hosts[top]) for top, group in members.items()]


def machine_notes(plan: MergePlan) -> list[str]:
    """What the report says of the machines: each host and its processes, and the processes
    whose files name two hosts."""
    machines = plan.machines
    if machines is None:
        return []
    label = {p.identity: p.name for p in plan.processes}
    on: dict[int, list[str]] = defaultdict(list)
    for proc in plan.processes:
        on[machines.of_process.get(proc.identity, 0)].append(proc.name)
    shown = "; ".join(f"{host} (machine {n}): {', '.join(on[n])}" for n, host in machines.names.items())
    notes = [f"hosts as Perfetto machines: {shown}"]
    for ident, hosts in machines.conflicts.items():
        notes.append(f"{label.get(ident, ident.label)}: its files name hosts {' and '.join(hosts)}; on no machine")
    return notes
