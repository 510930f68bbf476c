#!/usr/bin/env bash
# The declared lower bounds, tested: a fresh virtual environment outside the repository with
# requirements-lower.txt (the lowest torch, numpy, scipy, transformers, ... that pyproject.toml
# admits), then the unit tests (not slow, not gpu; the book toolchain's tests excluded) and one
# exported chapter (notebooks/01_topic_models.ipynb) run on it. One unit test needs myst_nb (the
# book toolchain, not a dependency of the package) and is deselected.
#   scripts/check_lower_bounds.sh          KEEP=1 keeps the environment
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null || PYTHON=python3
WORK="$(mktemp -d "${TMPDIR:-/tmp}/topicmech-lower.XXXXXX")"
cleanup() { if [ "${KEEP:-0}" = 1 ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi; }
trap cleanup EXIT
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 MPLBACKEND=Agg
export PYDEVD_DISABLE_FILE_VALIDATION=1 PIP_DISABLE_PIP_VERSION_CHECK=1
unset VIRTUAL_ENV PYTHONDONTWRITEBYTECODE
t0=$SECONDS
"$PYTHON" -m venv "$WORK/venv"
PY="$WORK/venv/bin/python"
[ -x "$PY" ] || { echo "no venv python at $PY" >&2; exit 1; }
quiet() { { grep -v "^WARNING: Location 'file:" || true; } >&2; }
"$PY" -m pip install -q --no-compile -r "$REPO/requirements-lower.txt" 2>&1 | quiet
echo "lower bounds installed in $((SECONDS - t0)) s"
"$PY" - <<'PYEOF'
import importlib.metadata as md
for name in ("torch", "numpy", "scipy", "matplotlib", "pandas", "transformers", "gensim", "cloudpickle"):
    print(f"  {name} {md.version(name)}")
PYEOF
cd "$REPO"
t1=$SECONDS
PYTHONPATH="$REPO" "$PY" -m pytest tests -q -m "not slow and not gpu" -p no:cacheprovider \
  --ignore=tests/test_browser.py --ignore=tests/test_notebooks.py --ignore=tests/test_api_docs.py \
  --deselect tests/test_utils.py::test_glue_values_glues_plain_numbers_in_order
echo "unit tests on the lower bounds: $((SECONDS - t1)) s"
"$PY" -m ipykernel install --prefix "$WORK/venv" --name topicmech-lower >/dev/null
mkdir -p "$WORK/run" && cp "$REPO/notebooks/01_topic_models.ipynb" "$WORK/run/"
PYTHONPATH="$REPO" "$PY" - "$WORK/run/01_topic_models.ipynb" <<'PYEOF'
import sys
import nbformat
from nbclient import NotebookClient
nb = nbformat.read(sys.argv[1], as_version=4)
NotebookClient(nb, timeout=1200, kernel_name="topicmech-lower").execute()
print(f"{sys.argv[1]}: ran without error on the lower bounds")
PYEOF
echo "--- lower-bound check done in $((SECONDS - t0)) s"
