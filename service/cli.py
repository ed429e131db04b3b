"""The ``aucstream`` command: ``serve`` the HTTP service, list ``learners``."""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import sys
import tempfile

from aucstream.replay import ReplayError

__all__ = ["main"]


class SettingsError(Exception):
    """A setting from the environment that the service cannot start with."""


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

    from pydantic import ValidationError

    from .http_limits import LimitedHttpToolsProtocol
    from .settings import Settings

    try:
        settings = Settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        name = "AUCSTREAM_" + str(first["loc"][0]).upper() if first["loc"] else "a setting"
        raise SettingsError(f"{name}: {first['msg']} (got {first.get('input')!r})") from None
    if settings.workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # Every worker writes its metrics here and /metrics adds them up (metrics.py).
        folder = tempfile.mkdtemp(prefix="aucstream-metrics-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = folder
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


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError(f"a port is 1 to 65535; got {port}")
    return port


def _workers(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"at least 1 worker; got {n}")
    return n


def main(argv: list[str] | None = None) -> int:
    from aucstream import __version__

    parser = argparse.ArgumentParser(prog="aucstream", description=__doc__)
    parser.add_argument("--version", action="version", version=f"aucstream {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the HTTP service",
                           description="Run the HTTP service. Flags override AUCSTREAM_* "
                           "environment variables.")
    serve.add_argument("--host", help="bind address (AUCSTREAM_HOST, default 127.0.0.1)")
    serve.add_argument("--port", type=_port, help="port (AUCSTREAM_PORT, default 8000)")
    serve.add_argument("--workers", type=_workers,
                       help="worker processes, each a replica of every model (default 1)")
    serve.add_argument("--redis-url", help="Redis URL (AUCSTREAM_REDIS_URL); unset = SQLite")
    serve.add_argument("--data-dir", help="SQLite store directory (AUCSTREAM_DATA_DIR, ./data)")
    serve.add_argument("--log-level", type=str.lower,
                       choices=("debug", "info", "warning", "error", "critical"),
                       help="debug, info, warning, error, critical")
    serve.add_argument("--log-json", action="store_true", help="JSON log lines")
    serve.set_defaults(func=_serve)

    lrn = sub.add_parser("learners", help="list the learners and their parameters as JSON")
    lrn.set_defaults(func=_learners)
    from aucstream.replay import add_parser as add_replay

    add_replay(sub)

    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # `aucstream learners | head`: the reader left
        # Point stdout at devnull so that the interpreter's final flush stays quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except SettingsError as exc:
        print(f"aucstream: {exc}", file=sys.stderr)
        return 2
    except ReplayError as exc:
        print(f"aucstream replay: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
