PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# protobuf code is generated, never committed: after installing, and again whenever a .proto changes
PROTOS := $(shell find proto -name '*.proto' 2>/dev/null)
PROTO_GEN := shared/lsmlake/proto_gen/__init__.py

.PHONY: venv proto test demo bench lint check clean

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

test: venv
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
