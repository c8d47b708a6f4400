PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# protobuf code is generated, never committed: after installing, and again whenever a .proto changes
PROTOS := $(shell find proto -name '*.proto' 2>/dev/null)
PROTO_GEN := shared/lsmlake/proto_gen/__init__.py

.PHONY: venv proto browser azurite test demo bench lint check clean

venv: $(STAMP) $(PROTO_GEN)

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

$(PROTO_GEN): $(STAMP) $(PROTOS) scripts/gen_proto.py
	$(BIN)/python scripts/gen_proto.py
	touch $(PROTO_GEN)

proto: $(STAMP)
	$(BIN)/python scripts/gen_proto.py
	touch $(PROTO_GEN)

# Debian's chromium and chromedriver, for the console's browser tests (skipped, saying so, without them)
browser:
	@if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null \
		|| { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null; } \
		|| echo "make browser: apt-get could not install chromium; the browser tests will be skipped"; \
	else echo "make browser: installing chromium needs root and apt-get; the browser tests will be skipped"; fi

# Azurite, the Azure Storage emulator, from npm into .node/ for the Azure publication tests (they fail without it,
# and are skipped, saying so, only when this machine has no npm)
AZURITE_VERSION := 3.37.0
AZURITE_PKG := .node/node_modules/azurite/package.json
azurite:
	@if [ -f $(AZURITE_PKG) ] && grep -q '"version": "$(AZURITE_VERSION)"' $(AZURITE_PKG); then :; \
	elif command -v npm >/dev/null 2>&1; then npm install --prefix .node --no-audit --no-fund --silent azurite@$(AZURITE_VERSION); \
	else echo "make azurite: npm is not installed; the Azure tests will be skipped"; fi

test: venv browser azurite
	$(BIN)/python -m pytest -q

demo: venv
	$(BIN)/python -m lsmlake.cli.demo

bench: venv
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

lint: venv
	$(BIN)/ruff check shared catalog_svc writer_svc compactor_svc tests benchmarks scripts

# the static checks CI runs before the tests: ruff, mypy (pyproject's config) and the import contracts
check: lint
	$(BIN)/mypy
	$(BIN)/lint-imports

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis shared/lsmlake/proto_gen
