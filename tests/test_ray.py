"""Merging on a real Ray cluster: a head and two worker nodes on this machine (ray.cluster_utils).

Each worker node has its own directory of traces: its Ray workers run in a directory of their own
(a raylet's workers start where it was started), so the relative path ``traces`` names a
different folder on each node, as a node-local disk would. The output must equal, byte for byte,
a local merge of all the files in one folder.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FIXTURES, unavailable

try:
    import ray
    from ray.cluster_utils import Cluster
except ImportError as exc:
    unavailable(f"Ray is not installed ({exc}): pip install 'tracemerge[ray]'", "TRACEMERGE_REQUIRE_RAY", module=True)

from readback import read_pftrace

from tracemerge.pipeline import merge
from tracemerge.run.ray_executor import RayExecutor

pytestmark = pytest.mark.ray

RUN = FIXTURES / "rl_run"
NODE_A_FILES = [
    "actor/rank0.pt.trace.json",
    "perf_tracer/rollout/traces-r0.jsonl",
    "session_tracer/rollout/sessions-r0.jsonl",
]
NODE_B_FILES = [
    "actor/rank1.pt.trace.json.gz",
    "perf_tracer/rollout/traces-r1.jsonl",
    "session_tracer/rollout/sessions-r1.jsonl",
    "reward/spans.jsonl",
]


# A verl save_path of two nodes: each holds its training rank's files and its rollout replicas.
VERL = FIXTURES / "frameworks" / "verl" / "save_path"
VERL_NODE_A = [
    p.relative_to(VERL)
    for p in sorted(VERL.rglob("*"))
    if p.is_file() and ("rank0" in p.name or "replica_0" in str(p) or "replica_2" in str(p))
]
VERL_NODE_B = [
    p.relative_to(VERL) for p in sorted(VERL.rglob("*")) if p.is_file() and p.relative_to(VERL) not in VERL_NODE_A
]


def _copy_verl(files: list[Path], into: Path) -> None:
    for name in files:
        (into / "verl_save" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(VERL / name, into / "verl_save" / name)


def _copy(files: list[str], into: Path) -> None:
    for name in files:
        (into / "traces" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(RUN / name, into / "traces" / name)


class Nodes:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.cluster = Cluster()
        self.ids: dict[str, str] = {}
        self.handles: dict[str, object] = {}

    def add(self, name: str, cwd: Path, head: bool = False, **options: object) -> None:
        """A node whose Ray workers run in ``cwd`` (they start where their raylet was started)."""
        here = os.getcwd()
        os.chdir(cwd)
        try:
            self.handles[name] = self.cluster.add_node(num_cpus=1, resources={name: 1}, **options)
        finally:
            os.chdir(here)
        self.cluster.wait_for_nodes()
        if head:
            ray.init(address=self.cluster.address, logging_level="WARNING", log_to_driver=False)
        node = next(n for n in ray.nodes() if n["Alive"] and name in n["Resources"])
        self.ids[name] = node["NodeID"]

    def remove(self, name: str) -> None:
        self.cluster.remove_node(self.handles.pop(name))
        self.ids.pop(name)


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    root = tmp_path_factory.mktemp("ray")
    for name in ("head", "node_a", "node_b", "all"):
        (root / name).mkdir()
    _copy(NODE_A_FILES, root / "node_a")
    _copy(NODE_B_FILES, root / "node_b")
    _copy(NODE_A_FILES + NODE_B_FILES, root / "all")
    _copy_verl(VERL_NODE_A, root / "node_a")
    _copy_verl(VERL_NODE_B, root / "node_b")
    _copy_verl(VERL_NODE_A + VERL_NODE_B, root / "all")
    cluster = Nodes(root)
    cluster.add("head", root / "head", head=True)
    cluster.add("node_a", root / "node_a")
    cluster.add("node_b", root / "node_b")
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.cluster.shutdown()


def node_of(executor: RayExecutor, path: Path) -> str:
    """The node that reads ``path`` (after discover)."""
    return executor.placed[path].node


def _local(folder: Path, out: Path, **options: object) -> Path:
    """A local merge of ``traces`` in ``folder``, named as the nodes name their files."""
    here = os.getcwd()
    os.chdir(folder)
    try:
        merge(["traces"], out, jobs=1, **options)
    finally:
        os.chdir(here)
    return out


@pytest.mark.parametrize("suffix", [".pftrace", ".json"])
def test_node_local_files_merge_to_the_bytes_of_a_local_merge(nodes: Nodes, tmp_path: Path, suffix: str) -> None:
    out = tmp_path / f"ray{suffix}"
    with RayExecutor() as executor:
        report = merge(["traces"], out, executor=executor)
        placed = {str(p): node_of(executor, p) for p in executor.placed}
    assert report.exit_code == 0
    assert report.skipped == []
    assert placed == {f"traces/{name}": nodes.ids["node_a"] for name in NODE_A_FILES} | {
        f"traces/{name}": nodes.ids["node_b"] for name in NODE_B_FILES
    }
    assert out.read_bytes() == _local(nodes.root / "all", tmp_path / f"local{suffix}").read_bytes()
    assert len(report.processes) == 6


def test_shared_files_are_read_once_by_one_node_each(nodes: Nodes, tmp_path: Path) -> None:
    shared = nodes.root / "all" / "traces"  # every node sees it: one machine's disk
    with RayExecutor() as executor:
        messages: list[str] = []
        report = merge([shared], tmp_path / "ray.pftrace", executor=executor, on_progress=messages.append)
        placed = {p: node_of(executor, p) for p in executor.placed}
    assert report.exit_code == 0
    assert sorted(placed) == sorted(shared / n for n in NODE_A_FILES + NODE_B_FILES)
    assert [m for m in messages if m.startswith("read ")] == [f"read {n}/7: {p}" for n, p in _order(shared, 7)]
    # Largest first, each to the node with the fewest bytes so far: all three nodes read.
    load: dict[str, int] = {}
    for path, node in placed.items():
        load[node] = load.get(node, 0) + path.stat().st_size
    assert set(load) == set(nodes.ids.values())
    assert max(load.values()) - min(load.values()) <= max(p.stat().st_size for p in placed)
    merge([shared], tmp_path / "local.pftrace", jobs=1)
    assert (tmp_path / "ray.pftrace").read_bytes() == (tmp_path / "local.pftrace").read_bytes()


def _order(shared: Path, count: int) -> list[tuple[int, Path]]:
    from tracemerge.discovery.discover import discover

    return list(enumerate((c.path for c in discover([shared]).candidates), 1))[:count]


def test_a_file_gone_from_its_node_before_it_is_read_is_skipped_by_name(nodes: Nodes, tmp_path: Path) -> None:
    copies = [nodes.root / side / "gone" / "traces" / "reward" / "spans.jsonl" for side in ("node_b", "all")]

    def copy_again(copy: Path) -> None:
        # Not the same bytes as traces/reward/spans.jsonl: a local merge reads a copy once.
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes((RUN / "reward" / "spans.jsonl").read_bytes() + b"\n")

    for copy in copies:
        copy_again(copy)

    def delete_after_discovery(message: str) -> None:
        if message.startswith("found "):
            for copy in copies:
                copy.unlink(missing_ok=True)

    here = os.getcwd()
    os.chdir(nodes.root / "all")
    try:
        local = merge(["traces", "gone/traces"], tmp_path / "local.pftrace", jobs=1, on_progress=delete_after_discovery)
        for copy in copies:
            copy_again(copy)
    finally:
        os.chdir(here)
    with RayExecutor() as executor:
        report = merge(
            ["traces", "gone/traces"], tmp_path / "ray.pftrace", executor=executor, on_progress=delete_after_discovery
        )
    assert report.skipped == ["gone/traces/reward/spans.jsonl: cannot read: No such file or directory"]
    assert report.exit_code == 3
    assert local.skipped == report.skipped
    assert (tmp_path / "ray.pftrace").read_bytes() == (tmp_path / "local.pftrace").read_bytes()


def test_a_failing_node_hands_shared_files_to_another_and_loses_only_its_own(nodes: Nodes, tmp_path: Path) -> None:
    """Node C's temporary folder is a file (a misconfigured node): every file task there fails."""
    broken = nodes.root / "node_c"
    (broken / "traces" / "extra").mkdir(parents=True)
    shutil.copy2(RUN / "reward" / "spans.jsonl", broken / "traces" / "extra" / "spans-c.jsonl")
    (broken / "not-a-folder").write_text("")
    (broken / "site").mkdir()
    (broken / "site" / "sitecustomize.py").write_text(
        f"import tempfile\ntempfile.tempdir = {str(broken / 'not-a-folder')!r}\n"
    )
    nodes.add("node_c", broken, env_vars={"PYTHONPATH": str(broken / "site")})
    try:
        shared = nodes.root / "all" / "traces"
        with RayExecutor() as executor:
            report = merge([shared], tmp_path / "ray.pftrace", executor=executor)
            readers = {placed.node for placed in executor.placed.values()}
        assert report.exit_code == 0
        assert nodes.ids["node_c"] not in readers  # its files went to the next node holding them
        merge([shared], tmp_path / "local.pftrace", jobs=1)
        assert (tmp_path / "ray.pftrace").read_bytes() == (tmp_path / "local.pftrace").read_bytes()

        with RayExecutor() as executor:
            report = merge(["traces"], tmp_path / "lost.pftrace", executor=executor)
        assert report.exit_code == 3
        assert len(report.skipped) == 1
        assert report.skipped[0].startswith(f"traces/extra/spans-c.jsonl: lost on node {_label(nodes, 'node_c')}: ")
        assert report.skipped[0].endswith("; no other node holds this file")
        assert len(report.processes) == 6  # everything of nodes A and B
    finally:
        nodes.remove("node_c")


def test_a_node_that_dies_mid_merge_is_reported_with_its_files(nodes: Nodes, tmp_path: Path) -> None:
    doomed = nodes.root / "node_d"
    _copy(["reward/spans.jsonl"], doomed)
    (doomed / "traces" / "reward" / "spans.jsonl").rename(doomed / "traces" / "reward" / "spans-d.jsonl")
    nodes.add("node_d", doomed)
    label = _label(nodes, "node_d")

    def kill_after_discovery(message: str) -> None:
        if message.startswith("found ") and "node_d" in nodes.handles:
            nodes.remove("node_d")

    with RayExecutor() as executor:
        report = merge(["traces"], tmp_path / "ray.pftrace", executor=executor, on_progress=kill_after_discovery)
    assert report.exit_code == 3
    assert len(report.skipped) == 1
    assert report.skipped[0].startswith(f"traces/reward/spans-d.jsonl: lost on node {label}: ")
    assert report.skipped[0].endswith("; no other node holds this file")
    assert sorted(p.label for p in report.processes) == sorted(
        [
            "actor · rank 0",
            "actor · rank 1",
            "rollout · rank 0",
            "rollout · rank 1",
            "reward · rank 0",
            "reward · rank 1",
        ]
    )
    # The rest is all there: the same events as a local merge of nodes A and B.
    _local(nodes.root / "all", tmp_path / "local.pftrace")
    merged, local = read_pftrace(tmp_path / "ray.pftrace"), read_pftrace(tmp_path / "local.pftrace")
    assert Counter((s.name, s.ts, s.dur) for s in merged.slices) == Counter((s.name, s.ts, s.dur) for s in local.slices)
    assert merged.flow_links == local.flow_links


def test_split_parts_on_ray_equal_the_local_ones(nodes: Nodes, tmp_path: Path) -> None:
    (tmp_path / "ray").mkdir()
    (tmp_path / "local").mkdir()
    with RayExecutor() as executor:
        report = merge(["traces"], tmp_path / "ray" / "m.pftrace", executor=executor, split_by="role")
    _local(nodes.root / "all", tmp_path / "local" / "m.pftrace", split_by="role")
    names = sorted(p.name for p in report.parts)
    assert names == sorted(p.name for p in (tmp_path / "local").iterdir())
    for name in names:
        assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "local" / name).read_bytes()
    assert read_pftrace(tmp_path / "ray" / "m.actor.pftrace").processes


def _label(nodes: Nodes, name: str) -> str:
    node = next(n for n in ray.nodes() if n["NodeID"] == nodes.ids[name])
    return f"{node['NodeManagerAddress']} ({node['NodeID'][:8]})"


def test_the_command_line_merges_on_the_cluster_it_is_given(nodes: Nodes, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from tracemerge.cli.main import app

    out = tmp_path / "cli.pftrace"
    result = CliRunner().invoke(app, ["traces", "-o", str(out), "-q", "--ray", nodes.cluster.address])
    assert result.exit_code == 0, result.output
    assert out.read_bytes() == _local(nodes.root / "all", tmp_path / "local.pftrace").read_bytes()
    assert ray.is_initialized()  # the test's own connection is left as it was


def test_a_path_no_node_has_is_one_line_naming_it(nodes: Nodes, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from tracemerge.cli.main import app

    result = CliRunner().invoke(app, ["nowhere", "-o", str(tmp_path / "x.pftrace"), "--ray", nodes.cluster.address])
    assert result.exit_code == 1
    assert result.output == "tracemerge: error: nowhere: no such file or directory on any node of the Ray cluster\n"
    assert list(tmp_path.iterdir()) == []


def test_the_verl_recipe_merges_every_nodes_save_path(nodes: Nodes, tmp_path: Path) -> None:
    """README's verl recipe, `tracemerge --ray auto "$SAVE_PATH" -o ...`, against the cluster: every
    node's save_path merged where it lies, into the processes a local merge of all of them gives."""
    from typer.testing import CliRunner

    from tracemerge.cli.main import app

    out = tmp_path / "verl.pftrace"
    report = tmp_path / "verl.report.json"
    args = ["--ray", nodes.cluster.address, "verl_save", "-o", str(out), "--report", str(report), "-q"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 3, result.output  # the two nsys reports, named with their export command
    local = tmp_path / "local.pftrace"
    here = os.getcwd()
    os.chdir(nodes.root / "all")
    try:
        expected = merge(["verl_save"], local, jobs=1)
    finally:
        os.chdir(here)
    assert out.read_bytes() == local.read_bytes()
    found = json.loads(report.read_text())
    assert [p["label"] for p in found["processes"]] == [p.label for p in expected.processes]
    assert [p["label"] for p in found["processes"]][:3] == [
        "rollout · rank 6",
        "rollout · rank 7",
        "rollout · replica 0 · tp 0",
    ]
    assert len(found["processes"]) == 16


def test_files_of_no_layout_on_two_nodes_are_told_apart_as_in_a_local_merge(nodes: Nodes, tmp_path: Path) -> None:
    """Each node sees one folder of files of no known layout; together they are two folders (two
    jobs maybe): the processes are told apart by their OS process, as a local merge tells them."""
    from builders import kineto

    for where in ("node_a", "all"):
        kineto(nodes.root / where / "generic" / "baseline" / "trace.json", rank=0, pid=4242)
    for where in ("node_b", "all"):
        kineto(nodes.root / where / "generic" / "tuned" / "trace.json", rank=0, pid=5151, names=("c",))
    with RayExecutor() as executor:
        report = merge(["generic"], tmp_path / "ray.pftrace", executor=executor)
    assert [p.label for p in report.processes] == ["rank 0 · pid 4242", "rank 0 · pid 5151"]
    here = os.getcwd()
    os.chdir(nodes.root / "all")
    try:
        merge(["generic"], tmp_path / "local.pftrace", jobs=1)
    finally:
        os.chdir(here)
    assert (tmp_path / "ray.pftrace").read_bytes() == (tmp_path / "local.pftrace").read_bytes()
