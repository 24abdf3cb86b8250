# The two commands a newcomer runs: `make serve` and `make test`. Both build .venv from nothing.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
HOST   ?= 127.0.0.1
PORT   ?= 8000

ARM64  := $(VENV)/arm64/ready.json

.PHONY: venv serve test test-fast bench mutants docs clean system-deps arm64 image-deps image image-test

$(STAMP): pyproject.toml clients/python/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]' -e clients/python
	touch $(STAMP)

venv: $(STAMP)

# arm64 as emulated ORT (options.platforms): qemu-user-static and arm64 .debs from apt, PyPI's aarch64 wheels of
# the onnxruntime/numpy/onnx installed above, unpacked under .venv/arm64 (service/pipeline/platforms/sysroot.py).
# Idempotent: kept while ready.json names the installed versions. Jobs then need no network.
$(ARM64): $(STAMP)
	$(BIN)/python -m service.pipeline.platforms.sysroot $(VENV)/arm64 >/dev/null

arm64: $(ARM64)

# Debian packages the suite uses: chromium renders the report page, curl and jq run the recipes,
# redis-server is the broker tests/celery starts on loopback, postgresql the job store tests/deploy
# starts in a temporary folder (initdb + pg_ctl).
system-deps:
	@missing=""; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v curl >/dev/null || missing="$$missing curl"; \
	command -v jq >/dev/null || missing="$$missing jq"; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

# The container image, built and run with Debian's podman (no registry, no docker daemon): podman + runc
# (Debian's crun refuses hybrid cgroups), mmdebstrap for the base, uidmap for its user namespaces.
image-deps:
	@missing=""; \
	for p in podman runc mmdebstrap; do command -v $$p >/dev/null || missing="$$missing $$p"; done; \
	command -v newuidmap >/dev/null || missing="$$missing uidmap"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

# IMAGE_BASE: a local Debian base (docker/build-image.sh makes one with mmdebstrap when it is missing).
# TORCH_SOURCE: pip arguments that find torch==2.13.0+cpu; the default is PyTorch's CPU index, and a
# directory of wheels (PIP_FIND_LINKS, e.g. /opt/wheels) is mounted into the build and used instead.
image: image-deps
	docker/build-image.sh

# Builds the image from nothing and runs it: /healthz, the built-in example over HTTP, an artifact
# whose sha256 the report states (tests/docker/test_image.py). ~3.5 min cold; not part of `make test`.
image-test: $(STAMP) system-deps image-deps
	QUANTCOMPARE_IMAGE_TEST=1 $(BIN)/pytest -q -s -p no:cacheprovider tests/docker/test_image.py

serve: $(STAMP) $(ARM64)
	$(BIN)/quantcompare serve --host $(HOST) --port $(PORT)

# Both cores by default (the suite took ~14.5 min in one process, ~9 in two); a file's tests stay in
# one worker so its fixtures (live servers, cached comparisons) are built once. TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2

test: $(STAMP) system-deps $(ARM64)
	$(BIN)/pytest $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

test-fast: $(STAMP)
	$(BIN)/pytest -m "not heavy and not browser"

bench: $(STAMP)
	$(BIN)/python bench/run.py

# Not part of `make test`: breaks the product on purpose (bench/mutants.py) and shows the suite fails.
mutants: $(STAMP)
	$(BIN)/python bench/mutants.py

# The manual (docs/) as a site in var/site; the suite runs the same strict build (tests/test_docs_site.py).
docs: $(STAMP)
	$(BIN)/mkdocs build --strict -d var/site

clean:
	rm -rf $(VENV) var .pytest_cache
