"""The ``aucstream`` command: ``serve`` the HTTP service, list ``learners``."""

from __future__ import annotations

import argparse
import json
import os
import sys

__all__ = ["main"]


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    # Flags become environment variables so that every worker process reads the same
    # settings (uvicorn imports the app factory afresh in each worker).
    for flag, env in (("host", "HOST"), ("port", "PORT"), ("workers", "WORKERS"),
                      ("redis_url", "REDIS_URL"), ("data_dir", "DATA_DIR"),
                      ("log_level", "LOG_LEVEL")):
        value = getattr(args, flag)
        if value is not None:
            os.environ[f"AUCSTREAM_{env}"] = str(value)
    if args.log_json:
        os.environ["AUCSTREAM_LOG_JSON"] = "true"

    from .http_limits import LimitedHttpToolsProtocol
    from .settings import Settings

    settings = Settings()
    uvicorn.run(
        "aucstream.service.app:create_app",
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=settings.workers,
        log_level=settings.log_level.lower(),
        access_log=False,  # the app logs every request with its id
        http=LimitedHttpToolsProtocol,  # header/body timeouts, connection cap
    )
    return 0


def _learners(_: argparse.Namespace) -> int:
    from aucstream import models

    out = {}
    for name in models.available():
        cls = models.base._lookup(name)
        out[name] = {p: {"default": s.default, "rule": s.rule.describe()}
                     for p, s in cls.param_table.items()}
    json.dump(out, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="aucstream", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the HTTP service",
                           description="Run the HTTP service. Flags override AUCSTREAM_* "
                           "environment variables.")
    serve.add_argument("--host", help="bind address (AUCSTREAM_HOST, default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (AUCSTREAM_PORT, default 8000)")
    serve.add_argument("--workers", type=int,
                       help="worker processes, each a replica of every model (default 1)")
    serve.add_argument("--redis-url", help="Redis URL (AUCSTREAM_REDIS_URL); unset = SQLite")
    serve.add_argument("--data-dir", help="SQLite store directory (AUCSTREAM_DATA_DIR, ./data)")
    serve.add_argument("--log-level", help="debug, info, warning, error")
    serve.add_argument("--log-json", action="store_true", help="JSON log lines")
    serve.set_defaults(func=_serve)

    lrn = sub.add_parser("learners", help="list the learners and their parameters as JSON")
    lrn.set_defaults(func=_learners)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
