#!/usr/bin/env bash
# Run exported chapters the way a reader outside the repository would.
#
#   scripts/check_exported.sh                        # chapters 01 and 08
#   scripts/check_exported.sh 02_mlm_model 08_real_text
#
# 1. a fresh virtual environment in a temporary folder outside the repository;
# 2. torch==2.13.0 first (the pin in requirements.txt: the CPU wheel), then only the package
#    with its `notebooks` extra, built from a copy of the package files, plus nbclient to
#    execute notebooks (no jupytext, no Jupyter Book, no myst_nb: the exported notebooks must
#    not need them);
# 3. the committed notebooks/<name>.ipynb executed, one by one, from a temporary folder
#    outside the repository. Any cell error fails the script with the cell's traceback.
#
# Environment: PYTHON (default python3.11, else python3); NOTEBOOKS, the folder of exported
# notebooks (default notebooks/); KEEP=1 keeps the temporary folder; TOPICMECH_SEED_OFFSET
# and TOPICMECH_MODE reach the kernels.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null || PYTHON=python3
CHAPTERS=("$@")
[ ${#CHAPTERS[@]} -gt 0 ] || CHAPTERS=(01_topic_models 08_real_text)  # 01: the core package; 08: the notebooks extra (encoder, corpus)
TORCH_PIN="$(grep -E '^torch==' "$REPO/requirements.txt")"
NOTEBOOKS="$(cd "${NOTEBOOKS:-$REPO/notebooks}" && pwd)"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/topicmech-exported.XXXXXX")"
case "$WORK/" in "$REPO"/*) echo "temporary folder $WORK is inside the repository" >&2; exit 1 ;; esac
cleanup() { if [ "${KEEP:-0}" = 1 ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi; }
trap cleanup EXIT
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export PYDEVD_DISABLE_FILE_VALIDATION=1 PIP_DISABLE_PIP_VERSION_CHECK=1
unset PYTHONPATH VIRTUAL_ENV PYTHONDONTWRITEBYTECODE   # --no-compile below: bytecode is written on first import

for name in "${CHAPTERS[@]}"; do
  [ -f "$NOTEBOOKS/$name.ipynb" ] || { echo "no $NOTEBOOKS/$name.ipynb (run make notebooks)" >&2; exit 1; }
done

t0=$SECONDS
echo "--- fresh environment in $WORK/venv ($("$PYTHON" --version))"
"$PYTHON" -m venv "$WORK/venv"
PY="$WORK/venv/bin/python"
# the package alone, as pip would take it from the repository (no tests, no book, no .venv):
# its code, the stored results (results/*.json), which it ships as topicmech/stored/, and the
# stored benchmark records (benchmarks/results/*.json), shipped as topicmech/stored_benchmarks/
mkdir -p "$WORK/src/benchmarks"
cp -r "$REPO/pyproject.toml" "$REPO/README.md" "$REPO/LICENSE" "$REPO/topicmech" "$REPO/results" "$WORK/src/"
cp -r "$REPO/benchmarks/results" "$WORK/src/benchmarks/"
find "$WORK/src/topicmech" -name __pycache__ -prune -exec rm -rf {} +
quiet() { { grep -v "^WARNING: Location 'file:" || true; } >&2; }  # this machine's pip config: noise
"$PY" -m pip install -q --no-compile "$TORCH_PIN" 2>&1 | quiet   # .pyc compiled on first import instead
"$PY" -m pip install -q --no-compile "$WORK/src[notebooks]" nbclient 2>&1 | quiet
echo "installed in $((SECONDS - t0)) s: $("$PY" -m pip list 2>/dev/null | grep -ciE '^[a-z]') packages"
# a kernel that runs this environment's Python, whatever kernels the machine has elsewhere
"$PY" -m ipykernel install --prefix "$WORK/venv" --name topicmech-exported --display-name "topicmech (check)" >/dev/null

mkdir -p "$WORK/run"
# the stored multi-seed results come with the installed package: no TOPICMECH_RESULTS, and the
# chapters must find every one of them in the installed copy, not in the repository
unset TOPICMECH_RESULTS
rm -rf "$WORK/src"
cd "$WORK/run"
"$PY" - "$REPO" <<'EOF'
import importlib.util
import sys
from pathlib import Path
import topicmech
from topicmech import results
repo = sys.argv[1]
assert not topicmech.__file__.startswith(repo), f"topicmech imported from the repository: {topicmech.__file__}"
where = results.locations()
assert [label for label, _ in where] == ["the copy installed with the package"], where
names = sorted(p.stem for p in Path(repo, "results").glob("*.json"))
assert [results.load(n).name for n in names] == names
print(f"{len(names)} stored results from {where[0][1]}")
assert results.benchmark("tied_attention")["setting"]["doc_len"] == 32  # the installed copy
glue = "myst_nb's glue" if importlib.util.find_spec("myst_nb") else "the notebooks' stand-in glue (no myst_nb)"
print(f"topicmech {topicmech.__version__} from {topicmech.__file__}; {glue}")
EOF

for name in "${CHAPTERS[@]}"; do
  cp "$NOTEBOOKS/$name.ipynb" "$WORK/run/"
  t1=$SECONDS
  echo "--- executing $name.ipynb in $WORK/run"
  "$PY" - "$WORK/run/$name.ipynb" <<'EOF'
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

path = Path(sys.argv[1])
nb = nbformat.read(path, as_version=4)
client = NotebookClient(nb, timeout=1200, kernel_name="topicmech-exported",
                        resources={"metadata": {"path": str(path.parent)}})
try:
    client.execute()
except CellExecutionError as err:
    print(f"FAILED: {path.name}\n{err}", file=sys.stderr)
    sys.exit(1)
ran = sum(1 for c in nb.cells if c.cell_type == "code" and c.get("execution_count"))
print(f"{path.name}: {ran} code cells ran without error")
EOF
  echo "$name: $((SECONDS - t1)) s"
done
echo "--- exported notebooks ran outside the repository (${CHAPTERS[*]}); total $((SECONDS - t0)) s"
