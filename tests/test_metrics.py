"""Metrics beside the traces: Prometheus query results, text-exposition scrapes, SkyRL's phase gauge
and step-keyed tracker scalars, as counter tracks and slices with exact times and values
(fixtures/metrics_run, built by fixtures/make_metrics_run.py)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from conftest import FIXTURES
from readback import read_chrome_json, read_pftrace

from tracemerge.core.errors import FatalError
from tracemerge.metrics_map import MetricsMap, load_metrics_map
from tracemerge.pipeline import merge

RUN = FIXTURES / "metrics_run"
T0_NS = 1_796_090_000 * 10**9  # fixtures/make_metrics_run.py T0
SAMPLES = 37  # 0 to 18 s every 0.5 s
READERS = {".pftrace": read_pftrace, ".json": read_chrome_json}


def fixture_series(name: str, **labels: str) -> list[tuple[int, float]]:
    """The samples of one series as the fixture's query response holds them, times in exact ns."""
    doc = json.loads((RUN / "prometheus" / "query_range.json").read_text())
    [series] = [
        s
        for s in doc["data"]["result"]
        if s["metric"]["__name__"] == name and all(s["metric"].get(k) == v for k, v in labels.items())
    ]
    # The fixture's times are whole milliseconds after T0.
    return [(T0_NS + round((t - 1_796_090_000) * 1000) * 1_000_000, float(v)) for t, v in series["values"]]


@pytest.mark.parametrize("suffix", [".pftrace", ".json"])
def test_engine_metrics_sit_under_the_rollout_ranks(tmp_path: Path, suffix: str) -> None:
    out = tmp_path / f"merged{suffix}"
    report = merge([RUN], out)
    assert report.exit_code == 0
    rb = READERS[suffix](out)
    for rank in (0, 1):
        found = rb.counters_of(f"rollout · rank {rank}")
        assert sorted(found) == sorted(
            [
                "engine 0 requests waiting",
                "engine 0 requests running",
                "engine 0 KV cache usage (fraction)",
                "engine 0 generated tokens (/s)",
            ]
        )
        waiting = fixture_series("vllm:num_requests_waiting", rank=str(rank))
        assert len(waiting) == SAMPLES
        assert found["engine 0 requests waiting"] == waiting
        kv = fixture_series("vllm:kv_cache_usage_perc", rank=str(rank))
        assert found["engine 0 KV cache usage (fraction)"] == kv
        # The counter as its rate per second over each interval, drawn from where the interval starts.
        tokens = fixture_series("vllm:generation_tokens_total", rank=str(rank))
        rates = [(t0, (v1 - v0) / ((t1 - t0) / 1e9)) for (t0, v0), (t1, v1) in itertools.pairwise(tokens)]
        assert found["engine 0 generated tokens (/s)"] == rates
        assert {v for _, v in rates} == {0.0, 3000.0}  # 1500 tokens per 0.5 s while generating
    gpus = rb.counters_of("Metrics")
    assert sorted(gpus) == [
        "GPU 0 utilization (%) 10.0.0.7",
        "GPU 1 utilization (%) 10.0.0.7",
    ]
    assert gpus["GPU 0 utilization (%) 10.0.0.7"] == fixture_series("ray_node_gpus_utilization", GpuIndex="0")


def test_tracker_scalars_ride_on_the_steps(tmp_path: Path) -> None:
    out = tmp_path / "merged.pftrace"
    report = merge([RUN], out)
    rb = read_pftrace(out).set_derived_apart()
    steps = sorted(rb.derived[("Pipeline", "Steps")], key=lambda s: s.ts)
    assert [(s.name, s.ts) for s in steps] == [(f"step {n}", T0_NS + n * 6 * 10**9) for n in range(3)]
    for n, s in enumerate(steps):
        assert s.args.get("args", s.args) == {
            "step": n,
            # who held the step up: every process started it at once, none waited on another
            "wall": "5.90 s",
            "wall_ns": 5_900_000_000,
            # the rollout rank the walk ends on waited on the trainer: the trainer's gen timer (3 s)
            # held the step up, the rollout's last 100 ms on the critical path a wait on it
            "critical": "trainer · rank 0 · generate",
            "waited on it": "100.0 ms",
            "how": "slower phase 3.00 s",
            "start skew": "0 ns",
            "end skew": "0 ns",
            "critical_rank": 0,
            "waited_ns": 100_000_000,
            "start_skew_ns": 0,
            "end_skew_ns": 0,
            **({"period": "6.00 s", "period_ns": 6 * 10**9} if n < 2 else {}),
            **({"warm-up": True} if n == 0 else {}),
            "timing_s/gen": 3.0,
            "timing_s/update_actor": 1.4,
            "perf/throughput": 1520.5 + n,
            "response_length/mean": 412.0 + 10 * n,
            "training/global_step": n,
        }
    # The readback gives top-level groups (Pipeline is the only one) negative pseudo pids.
    scalars = {name: rb.counters[t] for t, (p, name) in rb.counter_tracks.items() if p < 0}
    assert scalars["perf/throughput"] == [(T0_NS + n * 6 * 10**9, 1520.5 + n) for n in range(3)]
    assert len(scalars) == 5
    assert any("tracker scalars of 3 steps, 3 of them on steps of the trace" in note for note in report.notes)


def test_scalars_of_steps_not_in_the_trace_are_counted(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "trainer").mkdir(parents=True)
    (run / "trainer" / "spans.jsonl").write_bytes((RUN / "trainer" / "spans.jsonl").read_bytes())
    lines = [{"step": s, "actor/pg_loss": 0.5, "lr": "cosine"} for s in range(5)]
    (run / "trainer" / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    report = merge([run], tmp_path / "out.pftrace")
    assert report.as_dict()["stats"]["tracker_scalars_unplaced"]["count"] == 2  # steps 3 and 4
    assert report.as_dict()["stats"]["tracker_value_not_number"]["count"] == 5
    assert report.exit_code == 0  # info only


def write_scrape(folder: Path, when_ns: int, body: str, url: str = "http://10.0.0.9:30000/metrics") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{when_ns}.prom").write_text(f"# tracemerge-scrape time_unix_ns={when_ns} url={url}\n{body}")


SCRAPES = FIXTURES / "metrics_scrapes"  # three scrapes of one SGLang engine (fixtures/make_metrics_run.py)
SCRAPE_TIMES = [T0_NS, T0_NS + 500_000_000, T0_NS + 1_250_000_000]


def test_scrape_directory_draws_gauges_and_counter_rates(tmp_path: Path) -> None:
    out = tmp_path / "out.pftrace"
    report = merge([SCRAPES], out)
    rb = read_pftrace(out)
    times = SCRAPE_TIMES
    found = rb.counters_of("rollout · 10.0.0.9:30000")
    assert found["queued requests"] == [
        (times[0], 3.0),
        (times[1], 2.0),
        (times[2], 1.0),
    ]
    # 100 tokens in 0.5 s, then 300 in 0.75 s; the last scrape starts no interval.
    assert found["sglang:prompt_tokens_total (/s)"] == [(times[0], 200.0), (times[1], 400.0)]
    bucket = 'sglang:e2e_request_latency_seconds_bucket{le="1.0"} (/s)'
    assert found[bucket] == [(times[0], 2.0), (times[1], 1 / 0.75)]
    # No role in its name: the process's own metric goes to Metrics, 3 samples of an untyped metric.
    assert rb.counters_of("Metrics") == {
        'process_start_time_seconds{instance="10.0.0.9:30000"}': [(t, 1796089990.0) for t in times]
    }
    assert report.as_dict()["stats"]["metric_type_unknown"]["count"] == 3
    assert report.exit_code == 0


def test_metrics_map_places_a_target_under_a_rank(tmp_path: Path) -> None:
    rules = tmp_path / "map.toml"
    rules.write_text('[[process]]\nmatch = {instance = "10.0.0.9:30000"}\nrole = "rollout"\nrank = 3\n')
    out = tmp_path / "out.pftrace"
    merge([SCRAPES], out, metrics_map=load_metrics_map(rules))
    found = read_pftrace(out).counters_of("rollout · rank 3")
    assert found["queued requests"] == list(zip(SCRAPE_TIMES, [3.0, 2.0, 1.0], strict=True))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[process]]\nrole = 'rollout'\n", "entry 1: match must be a table"),
        ("[[process]]\nmatch = {instance = 'a'}\n", "entry 1: names neither a role nor a rank"),
        ("[other]\n", r"no \[\[process\]\] entries"),
    ],
)
def test_metrics_map_errors_name_the_file_and_entry(tmp_path: Path, text: str, message: str) -> None:
    rules = tmp_path / "map.toml"
    rules.write_text(text)
    with pytest.raises(ValueError, match=message) as err:
        load_metrics_map(rules)
    assert str(rules) in str(err.value)
    assert MetricsMap().place({"instance": "a"}) is None


def test_snapshots_jsonl_of_two_targets(tmp_path: Path) -> None:
    page = '# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{engine="0"}} {n}\n'
    lines = [
        {"ts": 1_796_090_000.25 + k, "url": f"http://10.0.0.{7 + t}:8000/metrics", "text": page.format(n=k + t)}
        for k in range(3)
        for t in range(2)
    ]
    path = tmp_path / "engines.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "out.pftrace"
    merge([path], out)
    rb = read_pftrace(out)
    for t in range(2):
        found = rb.counters_of(f"rollout · 10.0.0.{7 + t}:8000")
        name = "engine 0 requests waiting"
        assert found == {name: [(T0_NS + 250_000_000 + k * 10**9, float(k + t)) for k in range(3)]}


def test_skyrl_training_phase_gauge_becomes_phase_slices(tmp_path: Path) -> None:
    def series(phase: str, values: list[int]) -> dict:
        labels = {"__name__": "ray_skyrl_training_phase", "phase": phase, "instance": "10.0.0.7:8080"}
        return {"metric": labels, "values": [[1_796_090_000 + k, str(v)] for k, v in enumerate(values)]}

    doc = {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [series("generating", [1, 1, 0, 0, 1, 1]), series("training", [0, 0, 1, 1, 0, 0])],
        },
    }
    path = tmp_path / "phase.json"
    path.write_text(json.dumps(doc))
    out = tmp_path / "out.pftrace"
    merge([path], out)
    rb = read_pftrace(out)
    pid = rb.pid_of("trainer · 10.0.0.7:8080")
    [track] = [t for t, (p, name) in rb.threads.items() if p == pid and name == "training phase"]
    s = 10**9
    assert sorted((x.name, x.ts - T0_NS, x.dur) for x in rb.slices if x.track == track) == [
        ("generating", 0, 2 * s),
        ("generating", 4 * s, s),  # still running at the last sample: ends there
        ("training", 2 * s, 2 * s),
    ]
    assert not rb.counters_of("trainer · 10.0.0.7:8080")


def test_bad_metric_input_is_counted_by_name(tmp_path: Path) -> None:
    doc = {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [
                {"metric": {"__name__": "empty_gauge"}, "values": []},
                {"metric": {"__name__": "gappy"}, "values": [[1_796_090_000, "1"], [1_796_090_001, "NaN"]]},
                {"metric": {"__name__": "wild"}, "values": [[1_796_090_000, "+Inf"], [1_796_090_001, "2"]]},
                {"metric": {"__name__": "broken"}, "values": [["later", "2"], [1_796_090_002]]},
            ],
        },
    }
    (tmp_path / "q.json").write_text(json.dumps(doc))
    (tmp_path / "untimed.prom").write_text("# TYPE depth gauge\ndepth 4\n")
    page = "# TYPE busy gauge\nbusy 1\n"
    lines = [{"ts": 1_796_090_000, "text": page}, {"text": page, "url": "http://10.0.0.9:1/metrics"}]
    (tmp_path / "snapshots.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (tmp_path / "cut.prom").write_text("# TYPE queue gauge\nqueue 4 1796090000000\n# TYPE depth gauge\ndepth{ 5\n")
    (tmp_path / "garbled.prom").write_text("# TYPE depth gauge\ndepth{ 5\n")
    report = merge([tmp_path], tmp_path / "out.pftrace")
    stats = report.as_dict()["stats"]
    assert stats["metric_series_empty"]["count"] == 2  # empty_gauge, and broken once its samples go
    assert stats["metric_sample_nan"]["count"] == 1
    assert stats["metric_value_infinite"]["count"] == 1
    assert stats["metric_unreadable"]["count"] == 3  # two unreadable samples, one cut exposition
    assert stats["metric_snapshot_without_time"]["count"] == 1
    assert sorted(report.skipped) == [
        f"{tmp_path / 'garbled.prom'}: metric text unreadable"
        " (first at line 2: could not convert string to float: '{')",
        f"{tmp_path / 'untimed.prom'}: metric snapshot without a time (no scrape header, no Unix time in its name)",
    ]
    assert report.exit_code == 3  # samples lost: Inf, unreadable, untimed
    rb = read_pftrace(tmp_path / "out.pftrace")
    assert rb.counters_of("Metrics") == {
        "gappy": [(T0_NS, 1.0)],
        "wild": [(T0_NS + 10**9, 2.0)],
        "queue": [(T0_NS, 4.0)],
        "busy": [(T0_NS, 1.0)],
    }


def test_query_responses_one_per_line_keep_every_readable_line(tmp_path: Path) -> None:
    doc = json.loads((RUN / "prometheus" / "query_range.json").read_text())
    gpus = [s for s in doc["data"]["result"] if s["metric"]["__name__"] == "ray_node_gpus_utilization"]
    responses = [json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [s]}}) for s in gpus]
    run = tmp_path / "run"
    run.mkdir()
    (run / "query_range.json").write_text(responses[0] + '\n{"status": "succ\n' + responses[1] + "\n")
    report = merge([run], tmp_path / "out.pftrace")
    assert dict(report.dropped) == {"invalid JSON line (first at line 2)": 1}
    assert report.exit_code == 3
    assert read_pftrace(tmp_path / "out.pftrace").counters_of("Metrics") == {
        f"GPU {n} utilization (%) 10.0.0.7": fixture_series("ray_node_gpus_utilization", GpuIndex=str(n))
        for n in (0, 1)
    }
    # One response cut short is no JSON at all: the file is skipped, saying why.
    (run / "query_range.json").write_text(responses[0][:-40])
    with pytest.raises(FatalError, match=r"query_range.json: not JSON \(unexpected end of data"):
        merge([run], tmp_path / "out.pftrace")


@pytest.mark.parametrize("suffix", [".pftrace", ".json"])
def test_perfetto_imports_the_metric_tracks_as_written(tmp_path: Path, suffix: str) -> None:
    """trace_processor's own import: no errors or data losses, and per process the counter tracks
    and sample counts tracemerge wrote."""
    from test_perfetto_conformance import load

    out = tmp_path / f"merged{suffix}"
    merge([RUN], out)
    rb = READERS[suffix](out)
    tp = load(out)
    assert tp["problems"] == []
    process_of = {r["upid"]: r["name"] for r in tp["processes"]}
    for process in ("rollout · rank 0", "rollout · rank 1", "Metrics"):
        written = {name: len(samples) for name, samples in rb.counters_of(process).items()}
        assert {r["name"]: r["n"] for r in tp["counters"] if process_of.get(r["upid"]) == process} == written
        assert sum(written.values()) in (4 * SAMPLES - 1, 2 * SAMPLES)  # a rate has one value fewer


def test_openmetrics_scrape_keeps_exemplar_lines_and_second_timestamps(tmp_path: Path) -> None:
    page = (
        "# TYPE req counter\n"
        'req_total{path="/"} 12.0 # {trace_id="abc"} 1.0 1796090000.1\n'
        'req_created{path="/"} 1796089000.0\n'
        "# TYPE vllm:num_requests_waiting gauge\n"
        "vllm:num_requests_waiting 3.0 1796090000.25\n"
        "# EOF\n"
    )
    folder = tmp_path / "scrapes" / "10.0.0.9_8000"
    write_scrape(folder, T0_NS, page, url="http://10.0.0.9:8000/metrics")
    write_scrape(folder, T0_NS + 10**9, page.replace("12.0", "22.0"), url="http://10.0.0.9:8000/metrics")
    out = tmp_path / "out.pftrace"
    report = merge([tmp_path / "scrapes"], out)
    rb = read_pftrace(out)
    # The gauge's own timestamp (in seconds, OpenMetrics) wins over the scrape time; twice the same sample.
    assert rb.counters_of("rollout · 10.0.0.9:8000") == {
        "requests waiting": [(T0_NS + 250_000_000, 3.0), (T0_NS + 250_000_000, 3.0)]
    }
    assert rb.counters_of("Metrics") == {'req_total{instance="10.0.0.9:8000",path="/"} (/s)': [(T0_NS, 10.0)]}
    assert report.as_dict()["stats"]["metric_created_sample"]["count"] == 2


def test_a_counter_sampled_once_is_counted(tmp_path: Path) -> None:
    folder = tmp_path / "scrapes" / "10.0.0.9_8000"
    write_scrape(folder, T0_NS, "# TYPE tokens counter\ntokens_total 5\n# TYPE depth gauge\ndepth 1\n")
    report = merge([tmp_path / "scrapes"], tmp_path / "out.pftrace")
    assert report.as_dict()["stats"]["metric_counter_single_sample"]["count"] == 1
    assert report.exit_code == 0


def test_a_bad_exposition_line_loses_that_line_alone(tmp_path: Path) -> None:
    page = '# TYPE f gauge\nf 9\n# TYPE g gauge\ng{a="1"} 1\ng{a="2" 2\ng{a="3"} 3\n# TYPE h gauge\nh 4\n'
    (tmp_path / "1796090000.prom").write_text(page)
    report = merge([tmp_path / "1796090000.prom"], tmp_path / "out.pftrace")
    assert dict(report.dropped) == {
        "metric text unreadable (first at line 5: could not convert string to float: '{a=\"2\"')": 1
    }
    assert report.exit_code == 3
    assert read_pftrace(tmp_path / "out.pftrace").counters_of("Metrics") == {
        "f": [(T0_NS, 9.0)],
        'g{a="1"}': [(T0_NS, 1.0)],
        'g{a="3"}': [(T0_NS, 3.0)],
        "h": [(T0_NS, 4.0)],
    }


def test_scrape_names_with_decimal_seconds_give_their_time_and_order(tmp_path: Path) -> None:
    folder = tmp_path / "scrapes"
    folder.mkdir()
    # In name order 1796090001.prom (15 characters) would come before 1796090000.750.prom.
    for name, total in (("1796090000.prom", 0), ("1796090000.750.prom", 30), ("1796090001.prom", 40)):
        (folder / name).write_text(f"# TYPE tokens counter\ntokens_total {total}\n# TYPE depth gauge\ndepth {total}\n")
    report = merge([folder], tmp_path / "out.pftrace")
    assert read_pftrace(tmp_path / "out.pftrace").counters_of("Metrics") == {
        "tokens_total (/s)": [(T0_NS, 40.0), (T0_NS + 750_000_000, 40.0)],
        "depth": [(T0_NS, 0.0), (T0_NS + 750_000_000, 30.0), (T0_NS + 1_000_000_000, 40.0)],
    }
    assert report.as_dict()["stats"]["metric_counter_single_sample"]["count"] == 1  # the last scrape


def test_every_counter_sample_is_drawn_or_counted(tmp_path: Path) -> None:
    values = [[1_796_090_000, "1"], [1_796_090_001.5, "3"], [1_796_090_001.5, "3"], [1_796_090_003.25, "4"]]
    series = {"metric": {"__name__": "reqs_total"}, "values": values}
    doc = {"status": "success", "data": {"resultType": "matrix", "result": [series]}}
    (tmp_path / "q.json").write_text(json.dumps(doc))
    report = merge([tmp_path / "q.json"], tmp_path / "out.pftrace")
    assert read_pftrace(tmp_path / "out.pftrace").counters_of("Metrics") == {
        "reqs_total (/s)": [(T0_NS, 2 / 1.5), (T0_NS + 1_500_000_000, 1 / 1.75)]
    }
    assert dict(report.dropped) == {
        "metric counter sample at the time of the next one (no interval)": 1,
        "metric counter sample closing its series (the last rate is drawn up to it)": 1,
    }
    assert report.as_dict()["stats"]["metric_counter_interval_end"]["count"] == 2
    assert report.exit_code == 0  # every sample is in a rate


def test_a_failed_query_and_a_cut_pretty_printed_response_are_skipped_saying_why(tmp_path: Path) -> None:
    error = {"status": "error", "errorType": "bad_data", "error": "invalid parameter"}
    (tmp_path / "failed.json").write_text(json.dumps(error))
    good = {
        "status": "success",
        "data": {"resultType": "matrix", "result": [{"metric": {"__name__": "up"}, "values": [[1_796_090_000, "1"]]}]},
    }
    (tmp_path / "cut.json").write_text(json.dumps(good, indent=2)[:-30])
    (tmp_path / "up.json").write_text(json.dumps(good))
    report = merge([tmp_path], tmp_path / "out.pftrace")
    assert sorted(report.skipped) == [
        f"{tmp_path / 'cut.json'}: not JSON (unexpected end of data: line 14 column 12 (char 230))",
        f"{tmp_path / 'failed.json'}: the query failed (bad_data: invalid parameter)",
    ]
    assert report.exit_code == 3


def test_a_bad_line_of_a_scrape_is_named_by_its_line_in_the_file(tmp_path: Path) -> None:
    write_scrape(tmp_path / "scrapes", T0_NS, "# TYPE depth gauge\ndepth 1\ndepth{ 5\n")
    report = merge([tmp_path / "scrapes"], tmp_path / "out.pftrace")
    why = "first at line 4: could not convert string to float: '{'"
    assert dict(report.dropped) == {f"metric text unreadable ({why})": 1}


def test_bad_lines_of_several_metrics_are_each_counted_and_left_out(tmp_path: Path) -> None:
    page = (
        "garbage{\n"  # line 1, before any metric
        "# HELP queue requests waiting\n"
        'queue{a="1"} 1\n'
        'queue{a="2" 2\n'  # between the HELP and TYPE lines of queue, which stays one gauge
        "# TYPE queue gauge\n"
        'queue{a="3"} 3\n'
        "# TYPE busy gauge\n"
        "busy 1 x y\n"  # a timestamp that is no number
        'busy{b="1"} 0.5\n'
        "# TYPE load\n"  # no type: load is a metric of unknown type
        "load 2\n"
    )
    (tmp_path / "1796090000.prom").write_text(page)
    report = merge([tmp_path / "1796090000.prom"], tmp_path / "out.pftrace")
    assert dict(report.dropped) == {
        "metric text unreadable (first at line 1: could not convert string to float: '{')": 4,
        "metric of unknown type (drawn as a gauge)": 1,
    }
    assert report.exit_code == 3
    assert read_pftrace(tmp_path / "out.pftrace").counters_of("Metrics") == {
        'queue{a="1"}': [(T0_NS, 1.0)],
        'queue{a="3"}': [(T0_NS, 3.0)],
        'busy{b="1"}': [(T0_NS, 0.5)],
        "load": [(T0_NS, 2.0)],
    }


def test_a_type_the_parser_does_not_know_makes_its_line_the_bad_one(tmp_path: Path) -> None:
    # The parser gives up only when it closes load's family, at busy's TYPE line; the page can be
    # read up to the line before load's TYPE line, not up to that line: it is the one left out.
    page = "# TYPE depth gauge\ndepth 1\n# TYPE load weird\nload 2\n# TYPE busy gauge\nbusy 1\n"
    (tmp_path / "1796090000.prom").write_text(page)
    report = merge([tmp_path / "1796090000.prom"], tmp_path / "out.pftrace")
    assert dict(report.dropped) == {
        "metric text unreadable (first at line 3: Invalid metric type: weird)": 1,
        "metric of unknown type (drawn as a gauge)": 1,
    }
    assert read_pftrace(tmp_path / "out.pftrace").counters_of("Metrics") == {
        "depth": [(T0_NS, 1.0)],
        "load": [(T0_NS, 2.0)],
        "busy": [(T0_NS, 1.0)],
    }


def test_after_twenty_bad_lines_the_rest_of_the_page_is_lost(tmp_path: Path) -> None:
    page = (
        "# TYPE a gauge\na 1\n"
        + "a{ 9\n" * 20  # lines 3 to 22
        + "# TYPE b gauge\nb 2\n"
        + "c 3\n"  # no TYPE line: a metric of its own, of unknown type
        + "c{ 4\n"  # the 21st bad line: c and what came before it are kept, nothing after it
        + "# TYPE d gauge\nd 5\n"
    )
    (tmp_path / "1796090000.prom").write_text(page)
    report = merge([tmp_path / "1796090000.prom"], tmp_path / "out.pftrace")
    why = "could not convert string to float: '{'"
    assert dict(report.dropped) == {
        f"metric text unreadable (first at line 3: {why})": 20,
        f"metric text unreadable, the rest of the snapshot is lost ({why})": 1,
        "metric of unknown type (drawn as a gauge)": 1,
    }
    assert read_pftrace(tmp_path / "out.pftrace").counters_of("Metrics") == {
        "a": [(T0_NS, 1.0)],
        "b": [(T0_NS, 2.0)],
        "c": [(T0_NS, 3.0)],
    }


def test_a_scrape_rewritten_after_a_merge_is_read_as_it_now_is(tmp_path: Path) -> None:
    path = tmp_path / "1796090000.prom"
    path.write_text("# TYPE depth gauge\ndepth 1\n")
    merge([path], tmp_path / "out.pftrace")
    path.write_text("# TYPE depth gauge\ndepth 7\n")  # the same size: only the content tells it changed
    merge([path], tmp_path / "out.pftrace")
    assert read_pftrace(tmp_path / "out.pftrace").counters_of("Metrics") == {"depth": [(T0_NS, 7.0)]}


def test_short_titles_keep_the_full_name_as_the_track_description(tmp_path: Path) -> None:
    """A known series leads with what tells it apart and says each word once; its full name is
    the counter track's description (TrackDescriptor.description, field 14)."""
    from tracemerge.writers import perfetto_trace_pb2 as pb

    out = tmp_path / "m.pftrace"
    merge([RUN], out)
    trace = pb.Trace()
    trace.ParseFromString(out.read_bytes())
    described = {
        p.track_descriptor.name: p.track_descriptor.description
        for p in trace.packet
        if p.HasField("track_descriptor") and p.track_descriptor.HasField("counter")
    }
    assert described["GPU 1 utilization (%) 10.0.0.7"] == 'ray_node_gpus_utilization{GpuIndex="1",ip="10.0.0.7"}'
    assert described["engine 0 generated tokens (/s)"] == 'vllm:generation_tokens_total{engine="0"} (/s)'
    assert described["timing_s/gen"] == ""  # a tracker scalar is titled by its own name
    for title in described:
        words = title.split()
        assert len(title) <= 35 and len(words) == len(set(words)), title
    # Counters come after every slice track of their process where the UI orders by rank (v57+).
    ranks = [(p.track_descriptor.HasField("counter"), p.track_descriptor.sibling_order_rank) for p in trace.packet]
    assert min(r for counter, r in ranks if counter) > max(r for counter, r in ranks if not counter and r < 1 << 29)


def test_the_samples_before_the_line_a_page_is_given_up_at_are_kept(tmp_path: Path) -> None:
    page = "# TYPE a gauge\na 1\n# TYPE b gauge\nb 2\n" + "b{ 9\n" * 21 + "# TYPE d gauge\nd 5\n"
    (tmp_path / "1796090000.prom").write_text(page)
    report = merge([tmp_path / "1796090000.prom"], tmp_path / "out.pftrace")
    why = "could not convert string to float: '{'"
    assert dict(report.dropped) == {
        f"metric text unreadable (first at line 5: {why})": 20,
        f"metric text unreadable, the rest of the snapshot is lost ({why})": 1,
    }
    assert read_pftrace(tmp_path / "out.pftrace").counters_of("Metrics") == {"a": [(T0_NS, 1.0)], "b": [(T0_NS, 2.0)]}


@pytest.mark.parametrize("header", ["²", "٣٤", "1" * 5000, "-5"])
def test_a_bad_scrape_header_costs_its_time_not_its_neighbour(tmp_path: Path, header: str) -> None:
    folder = tmp_path / "10.0.0.9_30000"
    folder.mkdir()
    (folder / f"{T0_NS}.prom").write_text(
        f"# tracemerge-scrape time_unix_ns={header} url=http://h:1/m\n# TYPE depth gauge\ndepth 1\n"
    )
    write_scrape(folder, T0_NS + 10**9, "# TYPE depth gauge\ndepth 2\n")
    report = merge([folder], tmp_path / "out.pftrace")
    assert (report.skipped, report.exit_code) == ([], 3)
    kind = "out of range" if header.isascii() and header.isdigit() else "unreadable"
    assert dict(report.dropped) == {
        f"scrape time {kind} (time_unix_ns={header[:40]}): placed by the time in its name": 1
    }
    assert read_pftrace(tmp_path / "out.pftrace").counters_of("Metrics") == {
        'depth{instance="10.0.0.9:30000"}': [(T0_NS + 10**9, 2.0)],
        'depth{instance="h:1"}': [(T0_NS, 1.0)],  # placed by the time in its name
    }


@pytest.mark.parametrize("line", ["5", '"text"', "[1, 2]", "null", '{"no": "response"}'])
def test_a_line_of_responses_that_is_json_but_no_response_costs_that_line(tmp_path: Path, line: str) -> None:
    doc = json.loads((RUN / "prometheus" / "query_range.json").read_text())
    gpus = [s for s in doc["data"]["result"] if s["metric"]["__name__"] == "ray_node_gpus_utilization"]
    responses = [json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [s]}}) for s in gpus]
    (tmp_path / "query_range.json").write_text(f"{responses[0]}\n{line}\n{responses[1]}\n")
    report = merge([tmp_path / "query_range.json"], tmp_path / "out.pftrace")
    assert dict(report.dropped) == {"line is JSON but not a query response": 1}
    assert report.exit_code == 3
    assert read_pftrace(tmp_path / "out.pftrace").counters_of("Metrics") == {
        f"GPU {n} utilization (%) 10.0.0.7": fixture_series("ray_node_gpus_utilization", GpuIndex=str(n))
        for n in (0, 1)
    }
