"""docker/ without a docker engine: every COPY source exists, the container runs the start command
docs/scaling.md shows, runs as non-root, installs CPU torch at the pinned version, and checks /healthz."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = (REPO / "docker" / "Dockerfile").read_text()


def instructions(text: str) -> list[tuple[str, str]]:
    out, buf = [], ""
    for line in text.splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        buf += line.rstrip("\\").rstrip() + " " if line.rstrip().endswith("\\") else line
        if not line.rstrip().endswith("\\"):
            word, _, rest = buf.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            buf = ""
    return out


def test_every_copy_source_exists():
    copies = [rest for word, rest in instructions(DOCKERFILE) if word in ("COPY", "ADD")]
    assert copies
    for rest in copies:
        *sources, _dest = [a for a in shlex.split(rest) if not a.startswith("--")]
        for src in sources:
            assert (REPO / src).exists(), f"COPY source {src} is missing"


def test_the_container_runs_the_documented_start_command_as_non_root_with_a_healthcheck():
    ins = instructions(DOCKERFILE)
    cmd = json.loads(next(rest for word, rest in ins if word == "CMD"))
    assert cmd[:2] == ["quantcompare", "serve"]
    deployment = (REPO / "docs" / "scaling.md").read_text()
    assert " ".join(cmd) in deployment, "docs/scaling.md must show the container's start command"
    # make serve runs the same subcommand with the same flags.
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"quantcompare serve --host \$\(HOST\) --port \$\(PORT\)", makefile)
    assert cmd[2::2] == ["--host", "--port"]
    users = [rest for word, rest in ins if word == "USER"]
    assert users and users[-1] not in ("root", "0")
    assert any(word == "HEALTHCHECK" and "/healthz" in rest for word, rest in ins)
    # The base is an ARG: python:3.11-slim by default, a local Debian base for make image.
    assert ins[0] == ("ARG", "BASE=python:3.11-slim") and ins[1] == ("FROM", "${BASE}")


def test_torch_is_the_pinned_cpu_build_from_a_source_the_build_may_change():
    pin = re.search(r'"torch==([^"]+)"', (REPO / "pyproject.toml").read_text()).group(1)
    ins = instructions(DOCKERFILE)
    run = " ".join(rest for word, rest in ins if word == "RUN")
    # The local version pins the CPU build: a source without it fails at once instead of pulling CUDA.
    assert f'$TORCH_SOURCE "torch=={pin}+cpu"' in run
    default = next(rest for word, rest in ins if word == "ARG" and rest.startswith("TORCH_SOURCE="))
    assert "download.pytorch.org/whl/cpu" in default


def test_only_what_the_build_needs_is_sent_to_it():
    ignore = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    assert ignore[0] == "*"  # everything out (the 2.5 GB .venv, var/, tests), then back in:
    kept = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    copied = set()
    for word, rest in instructions(DOCKERFILE):
        if word == "COPY":
            *sources, _ = shlex.split(rest)
            copied |= {src.rstrip("/") for src in sources}
    assert kept == copied


def test_make_image_passes_runc_and_ulimits_the_host_allows():
    conf = (REPO / "docker" / "containers.conf").read_text()
    assert 'runtime = "runc"' in conf and "nofile=20000:20000" in conf
    script = (REPO / "docker" / "build-image.sh").read_text()
    assert "CONTAINERS_CONF" in script and "--format docker" in script


def test_compose_has_the_service_and_a_data_volume():
    text = (REPO / "docker" / "compose.yaml").read_text()
    assert "dockerfile: docker/Dockerfile" in text
    assert re.search(r"^\s+- quantcompare-data:/data\s*$", text, re.M)
    assert re.search(r"^volumes:\s*\n\s+quantcompare-data:", text, re.M)


def _compose() -> dict:
    from ruamel.yaml import YAML

    return YAML(typ="safe").load((REPO / "docker" / "compose.yaml").read_text())


def test_the_cloud_profile_runs_postgres_minio_and_redis_and_shares_no_directory():
    from urllib.parse import urlsplit

    from service.config import Settings

    services = _compose()["services"]
    cloud = {name for name, s in services.items() if "cloud" in s.get("profiles", [])}
    assert cloud == {"redis", "postgres", "minio", "minio-bucket", "cloud-api", "cloud-worker"}
    api, worker = services["cloud-api"], services["cloud-worker"]
    env = api["environment"]
    assert worker["environment"] == env and worker["command"] == ["quantcompare", "worker"]
    for key in env:  # every QUANTCOMPARE_* variable is a real setting
        assert not key.startswith("QUANTCOMPARE_") or key[len("QUANTCOMPARE_"):].lower() in Settings.model_fields, key
    # The store: the postgres service's own user, password and database.
    pg = services["postgres"]["environment"]
    db = urlsplit(env["QUANTCOMPARE_DATABASE_URL"])
    assert (db.scheme, db.hostname, db.port) == ("postgresql", "postgres", 5432)
    assert (db.username, db.password, db.path) == (pg["POSTGRES_USER"], pg["POSTGRES_PASSWORD"], "/" + pg["POSTGRES_DB"])
    # The files: the bucket minio-bucket makes, on minio, with minio's keys.
    minio = services["minio"]["environment"]
    bucket = urlsplit(env["QUANTCOMPARE_STORAGE_URL"])
    assert bucket.scheme == "s3" and f"local/{bucket.netloc}" in services["minio-bucket"]["entrypoint"][-1]
    assert env["AWS_ENDPOINT_URL"] == "http://minio:9000"
    assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) == (minio["MINIO_ROOT_USER"], minio["MINIO_ROOT_PASSWORD"])
    # The queue: a Redis database other than the celery profile's, so both profiles can run at once.
    assert urlsplit(env["QUANTCOMPARE_BROKER_URL"]).path != urlsplit(services["api"]["environment"]["QUANTCOMPARE_BROKER_URL"]).path
    # Nothing shared: neither the API nor the workers mount a volume (each /data is the container's own).
    assert "volumes" not in api and "volumes" not in worker
    assert worker["depends_on"]["minio-bucket"]["condition"] == "service_completed_successfully"
    assert worker["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_every_package_of_the_repo_is_installed_and_copied_into_the_image():
    """A top-level package (service, the converter onnx_torch) that pyproject's packages.find leaves out
    imports in the repo and fails in the image and in a non-editable install."""
    packages = sorted(p.parent.name for p in REPO.glob("*/__init__.py"))
    assert "service" in packages and "onnx_torch" in packages
    found = re.search(r"\[tool\.setuptools\.packages\.find\]\s*include = \[([^\]]*)\]",
                      (REPO / "pyproject.toml").read_text()).group(1)
    assert [p for p in packages if f'"{p}*"' not in found] == []
    copied = {shlex.split(rest)[0] for word, rest in instructions(DOCKERFILE) if word == "COPY"}
    assert [p for p in packages if p not in copied] == []
