#!/usr/bin/env bash
# The wheels benchmarks/gpu.py needs on a lent GPU, into .whl/ (git-ignored): that machine has
# jax, torch, timm, h5py, rich, absl-py and ml-dtypes but no keras and no network, and runs
# CPython 3.12 on x86-64 Linux. keras at the version installed here, its two dependencies that
# are missing there (namex, optree), and keras_vit's own wheel, built from this checkout (the
# command in gpu.py puts the checkout first on PYTHONPATH, so the code that runs is the
# checkout's either way). Run it here, then name .whl in the run's carry.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
version() { "$python" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$1"; }

mkdir -p .whl
rm -f .whl/*.whl  # one version of each: two would stop the install there
"$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
  "keras==$(version keras)" "namex==$(version namex)" "optree==$(version optree)"
"$python" -m pip wheel -q --no-deps --no-build-isolation -w .whl .
ls -l .whl
