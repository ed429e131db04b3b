"""Fast checks of loadtest/: the event feeds and the service benchmark's pure helpers.

The benchmark itself (it starts the service) is never run here.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from aucstream.models import auc
from aucstream.service.encoding import FeatureEncoder
from aucstream.service.schemas import LearnRequest, ScoreRequest
from loadtest import bench_service as bs
from loadtest import replay
from loadtest.feed import BLOCK, AdClickFeed, DenseFeed


def n_features(event: dict) -> int:
    return sum(len(v) if isinstance(v, dict) else 1 for v in event["features"].values())


# ---------------------------------------------------------------------------- ad clicks
def test_ad_feed_is_deterministic_and_independent_of_slicing() -> None:
    a = AdClickFeed(seed=3)
    first = a.batch(700) + a.batch(700)  # crosses a block boundary
    assert first == AdClickFeed(seed=3).events(0, 1400)
    assert AdClickFeed(seed=3).events(BLOCK - 5, BLOCK + 5) == first[BLOCK - 5:BLOCK + 5]
    other = AdClickFeed(seed=4).events(0, 50)
    assert [e["features"] for e in other] != [e["features"] for e in first[:50]]
    ids = [e["id"] for e in first]
    assert len(set(ids)) == len(ids) and ids[0] == "ad3-0" and ids[-1] == "ad3-1399"


def test_ad_feed_shape_and_wire_format() -> None:
    events = AdClickFeed(seed=0).events(0, 2000)
    counts = [n_features(e) for e in events]
    assert min(counts) >= 20 and max(counts) <= 40
    assert {e["label"] for e in events} <= {0, 1}
    for e in events[:50]:
        feats = e["features"]
        assert {"hour", "banner_pos", "ad_id", "device", "user", "bid_floor"} <= set(feats)
        assert ("site_id" in feats) != ("app_id" in feats)  # a site or an app impression
        assert {"country", "language"} <= set(feats["user"])
        assert {"model", "type", "os"} <= set(feats["device"])
    # the service's own (strict) schema accepts the events, and they hash to 20-40 nnz
    req = LearnRequest.model_validate_json(json.dumps({"model": "m", "events": events}))
    batch = FeatureEncoder({"kind": "hashed", "bits": 20}).encode(req.events)
    nnz = np.diff(batch.indptr)
    assert nnz.min() >= 20 and nnz.max() <= 40
    assert batch.indices.max() < 1 << 20


def test_ad_feed_positive_rate_and_learnability() -> None:
    feed = AdClickFeed(seed=1)
    events, logits = feed.draw(10_000)
    y = np.array([e["label"] for e in events])
    assert 0.01 <= y.mean() <= 0.05
    assert 0.7 < auc(y, logits) < 0.95  # the hidden model ranks well, not perfectly
    assert math.isclose(AdClickFeed(seed=1, ctr=0.01).ctr, 0.01)
    y2 = np.array([e["label"] for e in AdClickFeed(seed=1, ctr=0.01).events(0, 10_000)])
    assert y2.mean() < y.mean()


def test_ad_feed_rejects_bad_parameters() -> None:
    with pytest.raises(ValueError, match="ctr"):
        AdClickFeed(ctr=0.0)
    with pytest.raises(ValueError, match="range"):
        AdClickFeed().events(5, 2)


# ---------------------------------------------------------------------------- dense
def test_dense_feed() -> None:
    feed = DenseFeed(seed=2)
    events, logits = feed.draw(20_000)
    assert all(len(e["x"]) == 54 for e in events[:100])
    assert events[0]["id"] == "dense2-0"
    X, y = DenseFeed(seed=2).arrays(0, 20_000)
    assert X.shape == (20_000, 54) and np.isfinite(X).all()
    assert np.array_equal(X[:, 10:14].sum(axis=1), np.ones(20_000))  # one-hot group
    assert np.array_equal(X[:, 14:].sum(axis=1), np.ones(20_000))
    assert 0.01 <= y.mean() <= 0.05
    assert auc(y, logits) > 0.7
    assert DenseFeed(seed=2).events(100, 110) == events[100:110]
    LearnRequest.model_validate_json(json.dumps({"model": "m", "events": events[:200]}))
    assert len(DenseFeed(d=5).batch(1)[0]["x"]) == 5


# ---------------------------------------------------------------------------- helpers
def test_percentile_matches_numpy() -> None:
    rng = np.random.default_rng(0)
    for n in (1, 2, 7, 100, 1001):
        v = rng.exponential(size=n).tolist()
        for q in (0, 1, 50, 90, 99, 99.9, 100):
            assert bs.percentile(v, q) == pytest.approx(np.percentile(v, q))
    assert math.isnan(bs.percentile([], 50))
    with pytest.raises(ValueError):
        bs.percentile([1.0], 101)


def test_summarize_reports_milliseconds() -> None:
    s = bs.summarize([0.001, 0.002, 0.003, 0.004])
    assert s["n"] == 4 and s["p50"] == pytest.approx(2.5) and s["max"] == pytest.approx(4.0)
    assert s["mean"] == pytest.approx(2.5)
    assert math.isnan(bs.summarize([])["p99"])


def test_chunks_and_bodies() -> None:
    assert [list(c) for c in bs.chunks(list(range(7)), 3)] == [[0, 1, 2], [3, 4, 5], [6]]
    with pytest.raises(ValueError):
        bs.chunks([1], 0)
    events = AdClickFeed(seed=5).events(0, 1200)
    bodies = bs.learn_bodies("ads", events, 500)
    assert len(bodies) == 3
    back = [LearnRequest.model_validate_json(b) for b in bodies]
    assert [len(r.events) for r in back] == [500, 500, 200]
    assert back[1].events[0].id == events[500]["id"]
    scores = bs.score_bodies("ads", events, 100)
    assert len(scores) == 12
    req = ScoreRequest.model_validate_json(scores[0])  # items: no label, no id
    assert len(req.items) == 100 and req.items[0].features is not None
    dense = bs.score_bodies("d", DenseFeed().events(0, 250), 100)
    assert len(dense) == 2  # the incomplete last request is dropped


def test_lost_learns_accounting() -> None:
    t = bs.LearnTally(accepted=1000)
    assert bs.lost_learns(t, 1000) == {"acknowledged": 1000, "applied": 1000, "lost": 0,
                                       "extra": 0}
    assert bs.lost_learns(t, 990)["lost"] == 10
    assert bs.lost_learns(t, 1005)["extra"] == 5
    assert bs.lost_learns(t, 1500, version_before=500)["lost"] == 0


def test_markdown_table() -> None:
    text = bs.markdown_table(["a", "b", "c"], [("x|y", 12345.6, 0.5), ("z", float("nan"), 3)])
    lines = text.splitlines()
    assert lines[0] == "| a | b | c |" and lines[1] == "|---|---|---|"
    assert lines[2] == "| x\\|y | 12,346 | 0.5 |"
    assert lines[3] == "| z | n/a | 3 |"


def test_update_results_creates_and_replaces_only_its_section() -> None:
    new = bs.update_results("", "pre", "sqlite", "S1")
    assert new.startswith("# Results") and bs.SECTION_HEADING in new
    assert bs.START in new and bs.END in new and "S1" in new
    other = "# Results\n\n## Learners\n\nkeep me\n"
    text = bs.update_results(other, "pre", "sqlite", "S1")
    assert text.startswith(other.rstrip("\n")) and "keep me" in text
    text = bs.update_results(text + "\n## After\n\nalso keep\n", "pre2", "redis", "R1")
    assert "S1" in text and "R1" in text and "pre2" in text and "pre\n" not in text
    assert text.index("S1") < text.index("R1") and "also keep" in text
    text = bs.update_results(text, "pre3", "sqlite", "S2")
    assert "S2" in text and "S1" not in text and "R1" in text
    assert text.count(bs.START) == 1 and text.count(bs.SECTION_HEADING) == 1
    assert text.index(bs.END) < text.index("## After")
    assert bs.replace_between("no markers", bs.START, bs.END, "x") is None


def test_profile_classification() -> None:
    raw = "\n".join([
        "WorkerThread.run (anyio/_backends/_asyncio.py:1124);_learn (service/api/learn.py:27);"
        "FeatureEncoder.encode (service/encoding.py:74);FeatureEncoder._emit "
        "(service/encoding.py:120) 30",
        "WorkerThread.run (anyio/_backends/_asyncio.py:1124);_learn (service/api/learn.py:29);"
        "ModelHost.append_and_apply (service/hosting.py:382);SqliteStore.append "
        "(service/store/sqlite_store.py:280);SqliteStore._tx (service/store/sqlite_store.py:9)"
        " 10",
        "run (asyncio/runners.py:1);learn (service/api/learn.py:50);read_json "
        "(service/api/deps.py:96);BaseModel.model_validate_json (pydantic/main.py:1) 20",
        "H11Protocol.data_received (uvicorn/protocols/http/h11_impl.py:1) 5",
        "mystery (elsewhere.py:1) 1",
        "garbage line",
    ])
    report = bs.profile_report(raw, rate=100, requests=10)
    assert "| feature encoding / hashing | 30 | 45.5 % | 30.00 |" in report
    assert "thread-ms/request" in report
    assert "| store append | 10 |" in report
    assert "| JSON parse + validate (pydantic) | 20 |" in report
    assert "| HTTP (uvicorn/h11/starlette) | 5 |" in report
    assert "| other | 1 |" in report
    assert bs.parse_frame("f (a/b.py:3)") == ("f", "a/b.py")
    assert bs.profile_report("", 100, 1) == "(no samples)"


def test_scenarios_and_args() -> None:
    sc = {s.learner: s for s in bs.scenarios(["solam", "cbr_diag_fifo", "cbr_fifo"], 20, 54)}
    assert sc["solam"].features == {"kind": "hashed", "bits": 20}
    assert sc["cbr_fifo"].features == {"kind": "dense", "dim": 54}
    assert sc["cbr_diag_fifo"].model == "bench-cbr_diag_fifo"
    args = bs.parse_args(["--quick", "--redis"])
    assert args.redis and args.events == 5_000 and args.batch == 500
    assert args.clients == [1, 4, 16] and args.score_clients == [1, 16]
    assert isinstance(bs.cpu_model(), str) and bs.cpu_model()


# ---------------------------------------------------------------------------- replay
def test_dataset_events() -> None:
    X = np.arange(6.0).reshape(3, 2)
    ev = replay.dataset_events(X, np.array([0, 1, 0]), "toy")
    assert ev[1] == {"x": [2.0, 3.0], "label": 1, "id": "toy-1"}
    ev = replay.dataset_events(X, np.array([0, 1, 0]), "toy", rows=np.array([2, 0]))
    assert [e["id"] for e in ev] == ["toy-2", "toy-0"]
    with pytest.raises(ValueError, match="non-finite"):
        replay.dataset_events(np.array([[np.nan]]), np.array([1]), "bad")


def test_replay_into_the_app(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from aucstream.service.app import create_app
    from aucstream.service.settings import Settings

    X, y = DenseFeed(d=6, seed=4, ctr=0.2).arrays(0, 300)
    settings = Settings(data_dir=tmp_path, sync_interval=0.05, checkpoint_interval=3600.0)
    with TestClient(create_app(settings)) as tc:

        def call(method: str, path: str, body: object = None) -> tuple[int, object]:
            r = tc.request(method, path, json=body)
            return r.status_code, (r.json() if r.content else None)

        lines: list[str] = []
        res = replay.replay(call, "toy", "cbr_fifo", X, y, prefix="toy", batch=50,
                            shuffle=1, client_auc=True, every=2, say=lines.append)
        assert (res.events, res.accepted, res.duplicates, res.version) == (300, 300, 0, 300)
        assert res.rolling_auc is not None and res.client_auc is not None
        assert len(res.progress) == 3 and len(lines) == 3
        with pytest.raises(SystemExit, match="--resume"):
            replay.replay(call, "toy", "cbr_fifo", X, y, prefix="toy", say=lines.append)
        again = replay.replay(call, "toy", "cbr_fifo", X, y, prefix="toy", batch=100,
                              shuffle=1, resume=True, say=lines.append)
        assert (again.events, again.accepted, again.version) == (0, 0, 300)  # all done
        part = replay.replay(call, "half", "cbr_fifo", X[:120], y[:120], prefix="half",
                             batch=50, say=lines.append)
        assert part.version == 120
        rest = replay.replay(call, "half", "cbr_fifo", X, y, prefix="half", batch=50,
                             resume=True, say=lines.append)
        assert (rest.events, rest.accepted, rest.duplicates, rest.version) == (180, 180, 0, 300)
        fresh = replay.replay(call, "toy", "cbr_fifo", X[:100], y[:100], prefix="toy",
                              recreate=True, say=lines.append)
        assert fresh.version == 100
