"""The scale-out benchmark's pure helpers (loadtest/bench_scaleout.py): CPU layouts, model
names spread by the service's placement, distributions, histograms, log counts. Nothing
here starts a process or times anything."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aucstream.service.ownership import preferred_owner
from loadtest.bench_scaleout import (
    Options,
    Results,
    balanced_names,
    budget_remark,
    count_signs,
    cpu_layout,
    describe_layout,
    distribution,
    gauge,
    histogram,
    histogram_line,
    learn_ratios,
    parse_args,
    parse_settings,
    parse_thread_names,
    ratio_verdict,
    role_cpu,
)


def test_two_cores_one_replica_gets_a_core_and_the_load_the_other():
    assert cpu_layout([0, 1], 1) == {"replica0": frozenset({0}), "load": frozenset({1})}


def test_two_cores_two_replicas_leave_the_load_unpinned():
    layout = cpu_layout([0, 1], 2)
    assert layout == {"replica0": frozenset({0}), "replica1": frozenset({1}), "load": None}
    assert describe_layout(layout, ["r0", "r1"]) == \
        "r0 → CPU 0, r1 → CPU 1, client + store → any CPU"


def test_fewer_cores_than_replicas_pin_nothing():
    assert set(cpu_layout([3], 2).values()) == {None}


def test_layout_uses_the_cpus_it_is_given_not_their_positions():
    layout = cpu_layout([5, 2, 7, 2], 2)
    assert layout == {"replica0": frozenset({2}), "replica1": frozenset({5}),
                      "load": frozenset({7})}


@given(st.sets(st.integers(0, 63), min_size=1, max_size=16), st.integers(1, 8))
def test_layouts_never_share_a_replica_core(cpus, replicas):
    layout = cpu_layout(sorted(cpus), replicas)
    pinned = [c for k, c in layout.items() if k != "load" and c is not None]
    used = [x for c in pinned for x in c]
    assert len(used) == len(set(used))
    assert set(used) <= cpus
    if layout["load"] is not None:
        assert not layout["load"] & set(used)


def test_layout_rejects_no_replicas():
    with pytest.raises(ValueError, match="replicas must be >= 1"):
        cpu_layout([0, 1], 0)


@given(st.integers(0, 12), st.lists(st.sampled_from(["r0", "r1", "r2", "a", "bb"]),
                                     min_size=1, max_size=4, unique=True))
def test_balanced_names_spread_by_the_services_placement(n, replicas):
    names = balanced_names("busy", n, replicas)
    assert len(names) == n == len(set(names))
    counts = Counter(preferred_owner(m, replicas) for m in names)
    if n:
        assert max(counts.values()) - min(counts.get(r, 0) for r in replicas) <= 1
    assert names == balanced_names("busy", n, replicas)  # deterministic


def test_balanced_names_rejects_nonsense():
    with pytest.raises(ValueError):
        balanced_names("m", -1, ["r0"])
    with pytest.raises(ValueError):
        balanced_names("m", 2, [])


def test_distribution_of_a_sample_and_of_none():
    d = distribution([4.0, 1.0, 3.0, 2.0])
    assert (d["n"], d["min"], d["max"], d["mean"], d["p50"]) == (4, 1.0, 4.0, 2.5, 2.5)
    assert d["p10"] <= d["p50"] <= d["p90"] <= d["p99"] <= d["max"]
    empty = distribution([])
    assert empty["n"] == 0 and all(math.isnan(v) for k, v in empty.items() if k != "n")


@given(st.lists(st.floats(-5, 20, allow_nan=False), max_size=50))
def test_histogram_counts_every_value_once(values):
    edges = [0.0, 1.0, 2.5, 10.0]
    counts = histogram(values, edges)
    assert len(counts) == len(edges) and sum(counts) == len(values)
    assert counts[-1] == sum(v >= 10.0 for v in values)
    assert counts[1] == sum(1.0 <= v < 2.5 for v in values)


def test_histogram_line_names_the_bins_in_the_unit():
    line = histogram_line([0.05, 0.15, 0.16, 2.0], [0, 0.1, 0.2], "ms", 1000)
    assert line == "[0, 100) ms: 1 · [100, 200) ms: 2 · ≥ 200 ms: 1"
    assert histogram_line([], [0, 1], "s") == "(no samples)"
    with pytest.raises(ValueError):
        histogram([1.0], [2.0, 1.0])


def test_ratio_verdict():
    assert ratio_verdict(1.7) == "1.70× (≥ 1.6×: met)"
    assert ratio_verdict(1.2) == "1.20× (≥ 1.6×: NOT met)"
    assert ratio_verdict(float("nan")) == "n/a"


def test_learn_ratios_pair_rows_of_the_same_round_and_placement():
    rows = [
        {"round": 1, "replicas": 1, "mode": "pinned", "routing": "owner", "events_s": 100.0},
        {"round": 1, "replicas": 1, "mode": "budget", "routing": "owner", "events_s": 80.0},
        {"round": 1, "replicas": 2, "mode": "pinned", "routing": "owner", "events_s": 170.0},
        {"round": 1, "replicas": 2, "mode": "budget", "routing": "any", "events_s": 40.0},
        {"round": 2, "replicas": 2, "mode": "pinned", "routing": "owner", "events_s": 999.0},
        {"round": 1, "replicas": 2, "mode": "unpinned", "routing": "owner", "events_s": 9.0},
    ]
    assert learn_ratios(rows) == [(1, "pinned", "owner", 1.7), (1, "budget", "any", 0.5)]


def test_gauge_reads_an_unlabelled_sample():
    text = ("# HELP aucstream_replicas Live replicas\n# TYPE aucstream_replicas gauge\n"
            "aucstream_replicas 2.0\naucstream_replicas_total 9\n")
    assert gauge(text, "aucstream_replicas") == 2.0
    assert gauge('aucstream_models{pid="1"} 3.0\n', "aucstream_models") == 3.0
    assert gauge(text, "aucstream_models") is None


def test_count_signs_tells_takeovers_from_demotions():
    log = "\n".join([
        "INFO model m: owned by this replica (r0, lease 3)",
        "INFO model m: no longer owned by this replica: handed over to r1",
        "INFO model n: no longer owned by this replica: its lease was lost",
        "WARNING model n: durable up to 500, not published by its owner r1 yet",
    ])
    counts = count_signs(log)
    assert counts["taken"] == 1 and counts["given up"] == 2
    assert counts["handed over"] == 1 and counts["lease lost"] == 1
    assert counts["follower learn unpublished (10 s)"] == 1
    assert counts["durable, not applied"] == 0


def test_thread_names_from_a_py_spy_dump():
    dump = """Process 22440: python -m aucstream.service.cli serve
Python v3.11.7 (/usr/bin/python3.11)

Thread 22440 (idle): "MainThread"
    select (selectors.py:468)
Thread 22464 (active): "aucstream-follow"
    follow_once (hosting.py:1180)
Thread 22472 (idle): "AnyIO worker thread"
Thread 22473 (idle): "some-helper"
Thread 0x7F00AB (idle): "no native id"
"""
    assert parse_thread_names(dump) == {
        22440: "event loop (HTTP)", 22464: "follow loop (publish, reload)",
        22472: "request threads (parse, append, apply)", 22473: "other"}


def test_role_cpu_counts_new_threads_from_zero_and_unknown_ones_as_other():
    roles = {1: "event loop (HTTP)", 2: "follow loop (publish, reload)"}
    got = role_cpu({1: 10.0, 2: 1.0}, {1: 12.5, 2: 1.25, 3: 0.5}, roles)
    assert got == {"event loop (HTTP)": 2.5, "follow loop (publish, reload)": 0.25,
                   "other": 0.5}


def test_budget_rows_need_a_budget():
    assert "budget" in parse_args(["--budget", "0.5"]).modes
    assert parse_args([]).modes == ["pinned", "unpinned"]
    with pytest.raises(SystemExit):
        parse_args(["--modes", "budget"])


def test_quick_runs_small_and_without_the_cluster_unless_asked():
    quick = parse_args(["--quick"])
    assert quick.stores == ["redis"] and quick.events < parse_args([]).events
    assert parse_args(["--quick", "--cluster"]).stores == ["redis", "cluster"]
    assert parse_args([]).stores == ["redis", "cluster"]
    assert parse_args(["--no-cluster"]).stores == ["redis"]


def test_settings_become_names_of_the_service_settings():
    assert parse_settings(["publish_interval=1.0", "AUCSTREAM_LEASE_TTL = 2"]) == {
        "publish_interval": "1.0", "lease_ttl": "2"}
    for bad in ("publish_interval", "=1", "x y=1", "lease_ttl="):
        with pytest.raises(ValueError, match="NAME=VALUE"):
            parse_settings([bad])


def test_budget_remark_says_whether_the_quota_bound():
    opts = Options("solam", 4, 1, 1, 1, 1, 20, 1, 1, 1, 1, ["redis"], ["learn"], "info",
                   budget=0.25)
    res = Results()
    res.learn = [{"mode": "budget", "cpu": {"r0": 0.24, "r1": 0.23}},
                 {"mode": "pinned", "cpu": {"r0": 0.05}}]
    assert "bound in every budget row" in budget_remark(res, opts)
    res.score = [{"mode": "budget", "cpu": {"r0": 0.12}}]
    assert "other load decided" in budget_remark(res, opts)
    assert budget_remark(Results(), opts) == ""


def test_wrk_output_parses_into_a_histogram_and_errors():
    from loadtest.wrk import parse_output

    text = ("Running 4s test @ http://127.0.0.1:1/score\n"
            "WRK-SUMMARY 5 4001234 0 1 0 2 0\n"
            "WRK-LAT 900 2\nWRK-LAT 1500 1\nWRK-LAT 20000 2\n")
    run = parse_output(text)
    assert run.requests == 5 and run.seconds == pytest.approx(4.001234)
    assert run.errors == Counter({"read": 1, "status": 2})
    assert run.latencies_s() == [0.0009, 0.0009, 0.0015, 0.02, 0.02]


def test_wrk_output_without_a_summary_is_an_error():
    from loadtest.wrk import parse_output

    with pytest.raises(RuntimeError, match="no summary"):
        parse_output("unable to connect to 127.0.0.1:1 Connection refused\n")


def test_score_client_option():
    assert parse_args(["--score-client", "wrk", "--score-seconds", "2"]).score_client == "wrk"
    assert parse_args([]).score_client == "auto"  # wrk where it is installed
