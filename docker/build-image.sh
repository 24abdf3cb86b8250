#!/usr/bin/env bash
# Build the quantcompare image with podman from nothing: no registry, no docker daemon (make image).
#
#   IMAGE         the image's name (quantcompare)
#   BASE_IMAGE    the base; when it is missing, a Debian bookworm minbase is made with mmdebstrap
#                 from DEBIAN_MIRROR and imported under this name (localhost/quantcompare-base:bookworm)
#   BASE_CA       a CA bundle the *build* must trust (a TLS-intercepting proxy between the build and
#                 PyPI): added to a local layer on top of the base, used to build, never to the Dockerfile
#   TORCH_WHEELS  a folder holding torch-2.13.0+cpu's wheel, mounted into the build (default: /opt/wheels
#                 when it has one); otherwise PyPI's CPU index (the Dockerfile's default TORCH_SOURCE)
set -euo pipefail
cd "$(dirname "$0")/.."
export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/docker/containers.conf}"
IMAGE="${IMAGE:-quantcompare}"
BASE_IMAGE="${BASE_IMAGE:-localhost/quantcompare-base:bookworm}"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
TORCH_WHEELS="${TORCH_WHEELS:-/opt/wheels}"

if ! podman image exists "$BASE_IMAGE"; then
  tar="$(mktemp --suffix=.tar)"
  trap 'rm -f "$tar"' EXIT
  echo "making $BASE_IMAGE with mmdebstrap (bookworm minbase, ~1.5 min)"
  mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates,passwd \
    bookworm "$tar" "$DEBIAN_MIRROR"
  podman import --quiet "$tar" "$BASE_IMAGE" >/dev/null
fi

build_base="$BASE_IMAGE"
if [ -n "${BASE_CA:-}" ]; then
  ctx="$(mktemp -d)"
  cp "$BASE_CA" "$ctx/ca.crt"
  printf 'FROM %s\nCOPY ca.crt /etc/ssl/certs/ca-certificates.crt\nENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt\n' \
    "$BASE_IMAGE" >"$ctx/Containerfile"
  podman build --quiet -t localhost/quantcompare-base:build-ca "$ctx" >/dev/null
  rm -rf "$ctx"
  build_base=localhost/quantcompare-base:build-ca
fi

args=(--format docker -f docker/Dockerfile -t "$IMAGE" --build-arg "BASE=$build_base")
if ls "$TORCH_WHEELS"/torch-2.13.0+cpu-*.whl >/dev/null 2>&1; then
  args+=(--volume "$TORCH_WHEELS:/wheels:ro" --build-arg "TORCH_SOURCE=--find-links /wheels")
fi
podman build "${args[@]}" .
