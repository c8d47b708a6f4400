PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv test demo bench lint clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

test: venv
	$(BIN)/python -m pytest -q

demo: venv
	$(BIN)/python -m lsmlake.demo

bench: venv
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

lint: venv
	$(BIN)/pip install --quiet ruff
	$(BIN)/ruff check shared tests benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
