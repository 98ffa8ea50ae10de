#!/usr/bin/env bash
# One-shot check for a lent GPU machine, inside one 10-minute call: every step's limit is cut to
# what is left of one budget (GPU_CHECK_BUDGET, default 540 s), steps run in order of importance
# and later ones are skipped when time runs out.
#
#   bash benchmarks/gpu_check.sh             # on the GPU machine, from anywhere
#   bash benchmarks/gpu_check.sh --dry-run   # on a CPU: every step with tiny sizes (a test runs it)
#
# 1. Python: GPU_CHECK_PYTHON, else the first of python3, .venv/bin/python, .venv-gpu/bin/python
#    whose torch sees CUDA (--dry-run: whose torch imports). None: if a GPU is visible
#    (nvidia-smi), one bounded attempt to install torch into .venv-gpu; then, still none, one
#    line and exit 3. Every pip call is bounded (--retries, --timeout, and `timeout`); with a
#    folder of wheels (GPU_CHECK_WHEELS, default .whl) pip reads only that folder.
# 2. The package is built from a copy of the sources and installed (non-editable) into a temp
#    folder put first on PYTHONPATH; every step runs from another temp folder, so nothing is
#    imported from this checkout (environment.txt shows where batchaug came from).
# 3. Steps: the CUDA-parametrised tests, benchmarks/gpu_bench.py (rows appended to
#    gpu_bench.jsonl / gpu_bench.md as measured), `batchaug bench` (all recipes, then --train),
#    the loader, transform and colour benchmarks on CUDA, then the whole test suite with what
#    time is left. A failing step does not stop the later ones; each step logs to logs/STEP.log.
# 4. Results under $OUT (or ./gpu-results): summary.txt (every note), steps.txt (a line per
#    step as it ends), environment.txt, gpu_bench.jsonl/.md, and logs.tar.gz (each step's log
#    and JSON results, packed at the end; logs/ while running). The last lines printed are a
#    short summary: steps, gpu_bench rows, test results.
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
DRY=0
case "${1:-}" in
    --dry-run) DRY=1 ;;
    "") ;;
    *) echo "usage: bash benchmarks/gpu_check.sh [--dry-run]" >&2; exit 2 ;;
esac
OUT_DIR="${OUT:-$PWD/gpu-results}"
mkdir -p "$OUT_DIR" && OUT_DIR=$(cd "$OUT_DIR" && pwd)
# Few files at the top (summary.txt, steps.txt, environment.txt, gpu_bench.jsonl/.md): the rest
# (step logs, JSON results) under logs/, packed into logs.tar.gz at the end.
LOG="$OUT_DIR/logs"
rm -rf "$LOG" "$OUT_DIR/logs.tar.gz" "$OUT_DIR/gpu_bench.jsonl" "$OUT_DIR/gpu_bench.md"
mkdir -p "$LOG"
SUMMARY="$OUT_DIR/summary.txt"
: > "$SUMMARY"
: > "$OUT_DIR/steps.txt"
START=$(date +%s)
BUDGET="${GPU_CHECK_BUDGET:-540}"
WHEELS="${GPU_CHECK_WHEELS:-$REPO/.whl}"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")
trap 'rm -rf "$WORK"; rmdir "$LOG" 2>/dev/null' EXIT
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1

elapsed() { echo $(( $(date +%s) - START )); }
note() { echo "[gpu_check $(elapsed)s] $*" | tee -a "$SUMMARY"; }
left() { echo $(( BUDGET - $(elapsed) )); }

# pip_install LIMIT_S ARGS...: bounded in retries, per-request time and wall-clock time.
pip_install() {
    local limit="$1"
    shift
    local source=()
    [ -d "$WHEELS" ] && source=(--no-index --find-links "$WHEELS")
    timeout "$limit" "$PY" -m pip install -q --disable-pip-version-check --no-input \
        --retries 1 --timeout 15 "${source[@]}" "$@"
}

torch_ok() {  # torch imports and (unless --dry-run) sees CUDA
    if [ "$DRY" = 1 ]; then
        "$1" -c "import torch, torchvision"
    else
        "$1" -c "import sys, torch, torchvision; sys.exit(0 if torch.cuda.is_available() else 1)"
    fi >/dev/null 2>&1
}

# --- 1. a Python whose torch sees CUDA ----------------------------------------------------------
PY=""
tried=" "
for candidate in ${GPU_CHECK_PYTHON:-} python3 "$REPO/.venv/bin/python" "$REPO/.venv-gpu/bin/python"; do
    where=$(command -v "$candidate" 2>/dev/null) || continue
    where=$(cd "$(dirname "$where")" && pwd -P)  # python, python3 of one bin folder: one env
    case "$tried" in *" $where "*) continue ;; esac  # asked once
    tried="$tried$where "
    if torch_ok "$candidate"; then
        PY="$candidate"
        break
    fi
done
if [ -z "$PY" ] && [ "$DRY" = 0 ] && command -v nvidia-smi >/dev/null 2>&1 \
        && nvidia-smi -L >/dev/null 2>&1; then
    note "a GPU is visible but no Python here has a CUDA torch: one bounded install into .venv-gpu"
    python3 -m venv "$REPO/.venv-gpu" && PY="$REPO/.venv-gpu/bin/python" \
        && pip_install 240 torch==2.14.1 torchvision==0.29.1 >"$LOG/pip-torch.log" 2>&1
    torch_ok "$PY" || PY=""
fi
if [ -z "$PY" ]; then
    echo "gpu_check: CUDA is not available (no Python here has a torch that sees a GPU): nothing to check" \
        | tee -a "$SUMMARY"
    exit 3
fi

# --- 2. install the package (not editable) and run from elsewhere -------------------------------
SITE="$WORK/site"
RUN_DIR="$WORK/run"
mkdir -p "$WORK/src" "$SITE" "$RUN_DIR"
cp -r "$REPO/batchaug" "$REPO/pyproject.toml" "$REPO/README.md" "$WORK/src/"
find "$WORK/src" -name __pycache__ -prune -exec rm -rf {} +
# First with the build backend already installed (no network); else pip fetches it (bounded).
if (cd "$WORK/src" && timeout 120 "$PY" -m pip install -q --disable-pip-version-check \
        --no-input --no-deps --no-build-isolation --no-index --target "$SITE" .) \
        >"$LOG/install.log" 2>&1; then
    note "installed batchaug from a copy of the sources into $SITE (pip, no deps, no network)"
elif (cd "$WORK/src" && PY="$PY" pip_install 90 --no-deps --target "$SITE" .) \
        >>"$LOG/install.log" 2>&1; then
    note "installed batchaug from a copy of the sources into $SITE (pip, no deps)"
else
    rm -rf "$SITE" && mkdir -p "$SITE" && cp -r "$WORK/src/batchaug" "$SITE/"
    note "pip could not build the package (logs/install.log): its sources copied to $SITE instead"
fi
export PYTHONPATH="$SITE"
cd "$RUN_DIR" || exit 1
"$PY" - "$SITE" <<'EOF' >"$OUT_DIR/environment.txt" 2>&1
import importlib.util, os, platform, sys, torch, torchvision, batchaug
print("python", platform.python_version(), sys.executable, "| torch", torch.__version__,
      "torchvision", torchvision.__version__, "cuda", torch.version.cuda, "| cpus", os.cpu_count())
print("cuda available:", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
installed = os.path.realpath(batchaug.__file__).startswith(os.path.realpath(sys.argv[1]))
print("batchaug from", os.path.dirname(batchaug.__file__),
      "(the installed copy)" if installed else "(NOT the installed copy)")
print("missing:", *(m for m in ("pytest", "hypothesis", "kornia")
                    if importlib.util.find_spec(m) is None))
EOF
head -n 3 "$OUT_DIR/environment.txt"
grep -q "(the installed copy)" "$OUT_DIR/environment.txt" \
    || note "batchaug is not imported from the installed copy (environment.txt)"
missing=$(sed -n 's/^missing: *//p' "$OUT_DIR/environment.txt")
if [ -n "$missing" ] && [ "$DRY" = 1 ]; then
    note "dry run: would install $missing"
elif [ -n "$missing" ]; then  # into a folder of their own: nothing already installed changes
    note "installing what the tests need: $missing (bounded; kornia without torch)"
    for m in $missing; do
        if [ "$m" = kornia ]; then args=(--no-deps kornia kornia_rs); else args=("$m"); fi
        pip_install 45 --target "$WORK/deps" "${args[@]}" >>"$LOG/pip-deps.log" 2>&1 \
            || note "could not install $m (logs/pip-deps.log)"
    done
    [ -d "$WORK/deps" ] && export PYTHONPATH="$SITE:$WORK/deps"
fi

# --- 3. the steps -------------------------------------------------------------------------------
FAILED=0
step() {  # step NAME TIMEOUT_S COMMAND...   (the limit is cut to what is left of BUDGET)
    local name="$1" limit="$2"
    shift 2
    local l
    l=$(left)
    if [ "$DRY" = 0 ] && [ "$l" -lt 20 ]; then  # (--dry-run: every step, whatever the time)
        note "skip $name: ${l}s left of the ${BUDGET}s budget"
        echo "$name: skipped (${l}s left of the ${BUDGET}s budget)" >>"$OUT_DIR/steps.txt"
        return
    fi
    [ "$DRY" = 0 ] && [ "$limit" -gt "$l" ] && limit="$l"
    [ "$DRY" = 1 ] && limit=300  # tiny sizes, but a busy CI machine may be slow
    local t0 rc
    t0=$(date +%s)
    echo "[gpu_check $(elapsed)s] start $name (limit ${limit}s)"
    echo "\$ $*" >"$LOG/$name.log"
    timeout "$limit" "$@" >>"$LOG/$name.log" 2>&1
    rc=$?
    [ $rc -ne 0 ] && FAILED=$(( FAILED + 1 ))
    note "$name: exit $rc$([ $rc -eq 124 ] && echo ' (timed out)') in $(( $(date +%s) - t0 ))s"
    echo "$name: exit $rc$([ $rc -eq 124 ] && echo ' (timed out)') in $(( $(date +%s) - t0 ))s" \
        >>"$OUT_DIR/steps.txt"
    [ $rc -ne 0 ] && tail -n 5 "$LOG/$name.log"
    return 0
}

B="$REPO/benchmarks"
export HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-dev}"
# One list of steps; --dry-run only shrinks the sizes (and uses the CPU). Add a step here.
if [ "$DRY" = 1 ]; then
    DEV=cpu
    TESTS_CUDA=("$REPO/tests/test_stall.py")
    GPU_BENCH=(--device cpu --dry-run --recipes cifar,policy)
    BENCH=(--recipe cifar --rounds 1 --images 64 --batch-size 32 --window 0.02)
    PLACEMENTS=(--cache-gb 0.001 --row 3x16x16 --placement-batch 16 --placement-rounds 1
                --no-cold --classes 4)
    TRANSFORMS=(--rounds 1 --recipes cifar --threads 1 --window 0.02 --batch-size 8
                --contenders batchaug)
    COLOR=(--rounds 1 --window 0.02 --batch 8 --recipes color32)
    TRAIN=(--steps 2 --recipe cifar --images 64 --batch-size 32)
    LOADER=(--images 256 --rounds 1 --load-gb 0.0005 --batch-size 32)
    PHOTOS=(--images 8 --batch 4 --batches 1 --rounds 1 --window 0.02 --threads 1)
    TESTS_ALL=(--collect-only "$REPO/tests/test_stall.py")
else
    DEV=cuda
    TESTS_CUDA=(-k cuda "$REPO/tests")
    GPU_BENCH=(--budget-s $(( $(left) < 150 ? $(left) - 15 : 135 )))
    # 2 rounds of equal windows (0.5 s, imagenet 1 s) x 6 contenders x 2 thread counts.
    BENCH=(--recipe all --rounds 2)
    # placements x orders from a cold 1 GB file, H2D vs a bare pinned copy, and the copy share
    # hidden behind a model step (the full size is --cache-gb 2 or more).
    PLACEMENTS=(--cache-gb 1 --placement-rounds 2)
    # (the policy recipes are left out here: their CPU DataLoader and kornia contenders alone
    # would spend this step's budget; gpu-bench has the policy row on the GPU)
    TRANSFORMS=(--rounds 2 --recipes cifar,rotation,rrc --threads default)
    COLOR=(--rounds 2)
    TRAIN=()
    LOADER=()
    # the loader's crop stage (batched ragged kernels) on photos of different sizes
    PHOTOS=(--images 150 --rounds 2 --window 0.5 --threads default)
    # whatever time is left: the whole suite (CUDA-parametrised tests included)
    TESTS_ALL=("$REPO/tests")
fi
step tests-cuda 120 "$PY" -m pytest -q -p no:cacheprovider "${TESTS_CUDA[@]}"
step gpu-bench 150 "$PY" "$B/gpu_bench.py" "${GPU_BENCH[@]}" --jsonl "$OUT_DIR/gpu_bench.jsonl" \
    --md "$OUT_DIR/gpu_bench.md" --json "$LOG/gpu_bench.json"
step bench-cuda 100 "$PY" -m batchaug bench --device $DEV "${BENCH[@]}" --out "$LOG/bench"
step bench-loader-placements 90 "$PY" "$B/bench_loader.py" --device $DEV --sections placements \
    "${PLACEMENTS[@]}" --json "$LOG/bench_loader_placements.json"
step bench-transforms 60 "$PY" "$B/bench_transforms.py" --device $DEV "${TRANSFORMS[@]}" \
    --json "$LOG/bench_transforms.json"
step bench-color 40 "$PY" "$B/bench_color.py" --device $DEV "${COLOR[@]}" \
    --json "$LOG/bench_color.json"
step bench-cuda-train 45 "$PY" -m batchaug bench --device $DEV --train "${TRAIN[@]}" \
    --out "$LOG/bench"
step bench-loader 30 "$PY" "$B/bench_loader.py" --device $DEV --sections epochs,load \
    "${LOADER[@]}" --json "$LOG/bench_loader.json"
step bench-photos 60 "$PY" "$B/bench_photos.py" --device $DEV "${PHOTOS[@]}" \
    --json "$LOG/bench_photos.json"
step tests-all 600 "$PY" -m pytest -q -p no:cacheprovider "${TESTS_ALL[@]}"

# --- 4. a summary short enough for a note ------------------------------------------------------
echo
echo "== gpu_check summary ($(elapsed)s; logs and results in $OUT_DIR) =="
head -n 3 "$OUT_DIR/environment.txt"
cat "$OUT_DIR/steps.txt"
if [ -f "$OUT_DIR/gpu_bench.md" ]; then
    echo "-- gpu_bench rows (failed or skipped ones marked) --"
    grep "^| " "$OUT_DIR/gpu_bench.md" | grep -v "^| section |" | cut -c1-160
fi
for t in tests-cuda tests-all; do
    [ -f "$LOG/$t.log" ] && echo "-- $t: $(grep -E "(passed|failed|error|no tests ran|tests? collected)" \
        "$LOG/$t.log" | tail -n 1)"
done
[ "$FAILED" = 0 ] || echo "$FAILED step(s) failed"
tar czf "$OUT_DIR/logs.tar.gz" -C "$OUT_DIR" logs && rm -rf "$LOG"
exit $(( FAILED > 0 ))
