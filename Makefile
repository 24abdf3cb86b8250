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

.PHONY: docs-pictures venv serve test test-fast bench mutants docs clean system-deps graph-deps arm64 targets tools image-deps image image-test

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

# The modelopt_qdq and quark_qdq paths' tools, each in a side venv under .venv/tools run as a subprocess
# (service/pipeline/quantize/tool_paths.py; nncf_qdq's NNCF is in the project venv). Not part of `make`:
# 1.4 GB and 1.7 GB. ModelOpt: the base package plus its [onnx] extra's deps minus cupy and onnxruntime-gpu
# (the extra pulls CUDA torch and conflicts with the onnx pin), CPU calibration. Quark: it pins onnx<=1.22
# and needs torch, which it does not declare; its first import compiles a C++ library with g++ (~30 s),
# done here into .venv/tools/torch_extensions so that jobs find it built. ready.json is written last: a
# half-built venv counts as missing, and the path is skipped with tool_unavailable.
TOOLS   := $(VENV)/tools
MODELOPT_PINS := nvidia-modelopt==0.47.0 torch==2.13.0 onnxruntime==1.32.0 onnx==1.23.2 onnx-graphsurgeon==0.6.1 \
	onnxconverter-common==1.16.0 onnxscript==0.7.2 onnxslim==0.1.98 polygraphy==0.53.6 ml_dtypes cppimport lief
QUARK_PINS := amd-quark==0.13 torch==2.13.0 onnxruntime==1.32.0 ninja

$(TOOLS)/modelopt/ready.json: $(STAMP)
	test -x $(TOOLS)/modelopt/bin/python || $(PYTHON) -m venv $(TOOLS)/modelopt
	$(TOOLS)/modelopt/bin/pip install -q $(MODELOPT_PINS)
	$(TOOLS)/modelopt/bin/python -c 'import json, modelopt.onnx.quantization; from importlib.metadata import version; print(json.dumps({"nvidia-modelopt": version("nvidia-modelopt")}))' > $@.tmp
	mv $@.tmp $@

$(TOOLS)/quark/ready.json: $(STAMP)
	command -v g++ >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ >/dev/null)
	test -x $(TOOLS)/quark/bin/python || $(PYTHON) -m venv $(TOOLS)/quark
	$(TOOLS)/quark/bin/pip install -q $(QUARK_PINS)
	TORCH_EXTENSIONS_DIR=$(abspath $(TOOLS))/torch_extensions PATH=$(abspath $(TOOLS))/quark/bin:$$PATH \
	  $(TOOLS)/quark/bin/python -c 'import json, quark.onnx; from importlib.metadata import version; print(json.dumps({"amd-quark": version("amd-quark")}))' > $@.tmp
	mv $@.tmp $@

tools: $(TOOLS)/modelopt/ready.json $(TOOLS)/quark/ready.json

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

# docs/report.png and docs/report_graph.png, taken in real Chromium by the headline test (make test writes
# them to a temporary folder only, so the tree stays as it was).
docs-pictures: $(STAMP) system-deps graph-deps
	QUANTCOMPARE_DOCS_PICTURES=1 $(BIN)/pytest -q -p no:cacheprovider tests/e2e/test_report_headline.py

# The manual (docs/) as a site in var/site; the suite runs the same strict build (tests/test_docs_site.py).
docs: $(STAMP)
	$(BIN)/mkdocs build --strict -d var/site

clean:
	rm -rf $(VENV) var .pytest_cache
