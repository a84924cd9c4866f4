#!/usr/bin/env bash
# One benchmark pass for the scaling tables of bench/README.md, as run on the 16-core machine.
#
# Here (2 cores), after `../shared/tools/device_prep.sh`, the device tool runs it with carry [".devwheels"]:
#     bash bench/device_run.sh
# It installs the packed wheels when polars is missing, then runs each script with a time limit and writes
# one Markdown report per script, plus log.txt (stderr, exit codes, versions), into $OUT (default
# bench/.data/device). ROWS (default 10M) and PY (default python3) can be set; a small local check:
#     ROWS=200000 PY=.venv/bin/python bash bench/device_run.sh
set -u
OUT=${OUT:-bench/.data/device}
ROWS=${ROWS:-10000000}
PY=${PY:-python3}
mkdir -p "$OUT"
if ! "$PY" -c "import polars" 2>/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .devwheels/whl/*.whl || exit 3
  export PYTHONPATH=/tmp/site:$PWD/.devwheels/stub
fi
export PYTHONUNBUFFERED=1
log="$OUT/log.txt"
{ date -u; nproc; "$PY" -c "import sys, numpy, polars; print(sys.version.split()[0], 'numpy', numpy.__version__, 'polars', polars.__version__)"; git rev-parse --short HEAD 2>/dev/null; } >> "$log" 2>&1

run() {  # run NAME SECONDS SCRIPT ARGS...: the report to $OUT/NAME.md, stderr and the exit code to the log
  local name=$1 limit=$2
  shift 2
  echo "== $name ($(date -u +%T)): $*" >> "$log"
  timeout "$limit" "$PY" "$@" > "$OUT/$name.md" 2>> "$log"
  echo "== $name: exit $? at $(date -u +%T)" >> "$log"
}

run aggregations 170 bench/aggregations.py --rows "$ROWS" --runs 3 --no-noise
run overhead 45 bench/overhead.py --affinities auto,in-memory
run quantiles 90 bench/quantiles.py --rows "$ROWS" --runs 3 --error-runs 1
run quantiles_100k 120 bench/quantiles.py --rows "$ROWS" --runs 2 --error-runs 1 --groups 100000 \
  --queries "median per group,deciles per group"
run learning 50 bench/learning.py --time-only --rows "$ROWS"
run topk 50 bench/topk.py --skip-recall --rows "$ROWS"
run phases 150 bench/phases.py --rows "$ROWS" --threads 1,16 --runs 2

# The one sort of contribution bounding (5.4M keys, as for 10M rows and max_rows=10): np.sort against
# dpframe's split sort (dpframe.backends._bounding.sort in numpy, from PARALLEL_SORT threads on) and
# Polars' sort, and the engine dpframe's one-time timing picks on this machine (sort_engine).
echo "== sort ($(date -u +%T))" >> "$log"
timeout 60 "$PY" - >> "$log" 2>&1 <<'PY'
import time
import numpy as np
from dpframe.backends import _bounding
from dpframe.parallel import threads
keys = np.random.default_rng(1).integers(0, 2**63, 5_400_000, dtype=np.uint64)
print("sort_engine():", _bounding.sort_engine())
def engine(name):
    def run(k):
        _bounding.SORT_ENGINE = name
        return _bounding.sort(k)
    return run
for name, f in [("np.sort", np.sort), ("split sort", engine("numpy")), ("polars", engine("polars"))] * 2:
    times = []
    for _ in range(5):
        t = time.perf_counter()
        f(keys)
        times.append(time.perf_counter() - t)
    print(f"{name}: {min(times) * 1000:.1f} ms (min of 5, {threads()} threads)")
PY
