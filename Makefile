# The two commands a newcomer runs: `make serve` and `make test`. Both build .venv from nothing.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
HOST   ?= 127.0.0.1
PORT   ?= 8000

ARM64  := $(VENV)/arm64/ready.json

# Targets of options.platforms (docs/platforms.md): PyPI wheels unpacked under .venv/targets, each run in a child
# process. On disk: QNN ~245 MB, OpenVINO ~180 MB, an ORT release ~51 MB. Leave one out with `make QNN=0`,
# `make OPENVINO=0`, `make ORT_RELEASES=` (none); more releases: `make ORT_RELEASES="1.22.1 1.20.1"` (1.18+).
QNN          ?= 1
OPENVINO     ?= 1
ORT_RELEASES ?= 1.22.1
TARGET_DIRS  := $(if $(filter 1,$(QNN)),qnn) $(if $(filter 1,$(OPENVINO)),openvino) $(addprefix ort-,$(ORT_RELEASES))
TARGETS      := $(foreach d,$(TARGET_DIRS),$(VENV)/targets/$(d)/ready)

.PHONY: venv serve test test-fast bench mutants docs clean system-deps graph-deps arm64 targets

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

$(VENV)/targets/%/ready: | $(STAMP)
	$(BIN)/python -m service.pipeline.platforms.targets.install $(VENV)/targets $*

targets: $(TARGETS)

# Debian packages the suite uses: chromium renders the report page, graphviz (dot) lays out its graphs (the
# service needs it too: `make serve` installs it), curl and jq run the recipes,
# redis-server is the broker tests/celery starts on loopback, postgresql the job store tests/deploy
# starts in a temporary folder (initdb + pg_ctl).
system-deps:
	@missing=""; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v curl >/dev/null || missing="$$missing curl"; \
	command -v dot >/dev/null || missing="$$missing graphviz"; \
	command -v jq >/dev/null || missing="$$missing jq"; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

# Graphviz's dot lays out the report page's graphs: the service itself needs it, not only the suite.
graph-deps:
	@command -v dot >/dev/null || { echo "installing: graphviz"; apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq graphviz >/dev/null; }

serve: $(STAMP) $(ARM64) $(TARGETS) graph-deps
	$(BIN)/quantcompare serve --host $(HOST) --port $(PORT)

# Both cores by default (the suite took ~14.5 min in one process, ~9 in two); a file's tests stay in
# one worker so its fixtures (live servers, cached comparisons) are built once. TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2

test: $(STAMP) system-deps $(ARM64) $(TARGETS)
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
