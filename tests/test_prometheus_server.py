"""Against real components: a real Prometheus server scraping a real prometheus_client exporter
(tests/metrics/exporter.py), its query_range answer merged with a fixture trace, and
``tracemerge scrape`` recording the same exporter.

Needs Debian's ``prometheus`` on PATH for the server test: skipped with the reason where it is
absent, a failure where $TRACEMERGE_REQUIRE_PROMETHEUS is set (CI).
"""

from __future__ import annotations

import itertools
import json
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT, unavailable
from metrics.exporter import TOKENS_PER_TICK
from readback import read_pftrace

from tracemerge.pipeline import merge

EXPORTER = ROOT / "tests" / "metrics" / "exporter.py"
QUERY_STEP_S = 0.5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


@pytest.fixture
def exporter() -> Iterator[str]:
    process = subprocess.Popen([sys.executable, str(EXPORTER)], stdout=subprocess.PIPE, text=True)
    try:
        port = int(process.stdout.readline())
        yield f"http://127.0.0.1:{port}/metrics"
    finally:
        process.kill()
        process.wait()


def prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        unavailable("needs Debian's prometheus server (apt-get install prometheus)", "TRACEMERGE_REQUIRE_PROMETHEUS")
    return found


@pytest.fixture
def prometheus(tmp_path: Path, exporter: str) -> Iterator[str]:
    binary = prometheus_binary()
    target = exporter.split("//")[1].split("/")[0]
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 500ms\n  scrape_timeout: 400ms\n"
        f"scrape_configs:\n  - job_name: demo\n    static_configs:\n      - targets: ['{target}']\n"
        "        labels: {role: rollout, rank: '1'}\n"
    )
    port = free_port()
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert process.poll() is None, "prometheus exited"
            assert time.monotonic() < deadline, "prometheus not ready in 30 s"
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def query_range(server: str, query: str, start: float, end: float, step: float) -> dict:
    params = urllib.parse.urlencode({"query": query, "start": start, "end": end, "step": step})
    return get_json(f"{server}/api/v1/query_range?{params}")


def test_prometheus_query_range_lands_on_the_rollout_rank(prometheus: str, tmp_path: Path) -> None:
    start = time.time()
    deadline = time.monotonic() + 30
    # Until the answer holds at least 8 evaluations with data (the scrapes are 500 ms apart).
    while True:
        end = time.time()
        responses = {
            q: query_range(prometheus, q, start, end, QUERY_STEP_S) for q in ("demo_queue_depth", "demo_tokens_total")
        }
        if all(r["data"]["result"] and len(r["data"]["result"][0]["values"]) >= 8 for r in responses.values()):
            break
        assert time.monotonic() < deadline, f"fewer than 8 samples in 30 s: {responses}"
        time.sleep(0.5)
    for response in responses.values():
        assert response["status"] == "success" and response["data"]["resultType"] == "matrix"
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "metrics_run" / "rollout", run / "rollout")
    (run / "prometheus").mkdir()
    (run / "prometheus" / "query_range.json").write_text(json.dumps(responses))
    out = tmp_path / "merged.pftrace"
    report = merge([run], out)
    assert report.exit_code == 0, report.as_dict()["stats"]

    rb = read_pftrace(out)
    found = rb.counters_of("rollout · rank 1")
    [depth] = responses["demo_queue_depth"]["data"]["result"]
    assert depth["metric"]["instance"].startswith("127.0.0.1:")  # not in the title of a rank's track
    expected_depth = [(round(t * 1000) * 1_000_000, float(v)) for t, v in depth["values"]]
    assert len(expected_depth) >= 8
    assert found["demo_queue_depth"] == expected_depth
    # The gauge counts the exporter's ticks: it never goes down, and steps by whole ticks.
    values = [v for _, v in expected_depth]
    assert values == sorted(values) and all(v == int(v) for v in values)
    [tokens] = responses["demo_tokens_total"]["data"]["result"]
    points = [(round(t * 1000) * 1_000_000, float(v)) for t, v in tokens["values"]]
    rates = [(t0, (v1 - v0) / ((t1 - t0) / 1e9)) for (t0, v0), (t1, v1) in itertools.pairwise(points)]
    assert found["demo_tokens_total (/s)"] == rates
    # 10 tokens every 0.25 s is 40/s; a 0.5 s query step sees 1 to 3 ticks, as scrapes fall.
    assert all(value in {k * TOKENS_PER_TICK / QUERY_STEP_S for k in (1, 2, 3)} for _, value in rates[1:-1]), rates


def test_scrape_records_the_exporter_and_merges(exporter: str, tmp_path: Path) -> None:
    out_dir = tmp_path / "scrapes"
    done = subprocess.run(
        [sys.executable, "-m", "tracemerge", "scrape", exporter, "--every", "0.3s", "--count", "4", "-o", str(out_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    [target] = list(out_dir.iterdir())
    assert target.name == exporter.split("//")[1].split("/")[0].replace(":", "_")
    files = sorted(target.iterdir(), key=lambda p: (len(p.name), p.name))
    assert len(files) == 4 and all(p.suffix == ".prom" for p in files)
    times = [int(p.stem) for p in files]
    header = files[0].read_text().split("\n", 1)[0]
    assert header == f"# tracemerge-scrape time_unix_ns={times[0]} url={exporter}"
    assert all(250_000_000 <= b - a <= 1_000_000_000 for a, b in itertools.pairwise(times))
    assert "wrote 4 scrape(s) of 1 URL(s)" in done.stderr

    out = tmp_path / "merged.pftrace"
    report = merge([out_dir], out)
    assert report.exit_code == 0, report.as_dict()["stats"]
    rb = read_pftrace(out)
    instance = exporter.split("//")[1].split("/")[0]
    found = rb.counters_of("Metrics")
    depth = found[f'demo_queue_depth{{instance="{instance}"}}']
    assert [t for t, _ in depth] == times
    assert [v for _, v in depth] == sorted(v for _, v in depth)
    rates = found[f'demo_tokens_total{{instance="{instance}"}} (/s)']
    assert [t for t, _ in rates] == times[:-1]
    assert all(v >= 0 for _, v in rates)


def test_scrape_stops_cleanly_on_ctrl_c(exporter: str, tmp_path: Path) -> None:
    out_dir = tmp_path / "scrapes"
    process = subprocess.Popen(
        [sys.executable, "-m", "tracemerge", "scrape", exporter, "--every", "0.1s", "-o", str(out_dir)],
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not (out_dir.exists() and any(out_dir.rglob("*.prom"))):
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.05)
    time.sleep(0.3)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    written = list(out_dir.rglob("*"))
    scrapes = [p for p in written if p.suffix == ".prom"]
    assert scrapes and not [p for p in written if p.is_file() and p.suffix != ".prom"]  # no temporary left
    assert f"wrote {len(scrapes)} scrape(s) of 1 URL(s)" in err


def test_scrape_reports_a_dead_target_and_exits_1(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/metrics"
    done = subprocess.run(
        [sys.executable, "-m", "tracemerge", "scrape", url, "--every", "0.1s", "--count", "2", "-o", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert f"tracemerge: {url}: cannot connect" in done.stderr
    assert done.stderr.count("cannot connect") == 1  # said once, retried silently
    assert list(tmp_path.iterdir()) == []
