#!/usr/bin/env bash
# One-shot check for a lent GPU machine without network (e.g. torch 2.11, no kornia, TorchCodec,
# datasets, nvImageCodec or DALI), short enough to run twice in one 15-minute allowance: every
# step runs under `timeout -k`, its limit cut to what is left of one budget (GPU_CHECK_BUDGET,
# default 360 s) when it starts; later steps are skipped when the budget is spent. Nothing is
# installed: the checks need only torch and torchvision (pytest + hypothesis for the tests).
#
#   bash gpu/gpu_check.sh             # on the GPU machine, from anywhere
#   bash gpu/gpu_check.sh --dry-run   # on a CPU: every step at tiny sizes (a test runs it)
#
# 1. Python: GPU_CHECK_PYTHON, else the first of python3, .venv/bin/python, .venv-gpu/bin/python
#    whose torch sees CUDA (--dry-run: whose torch imports); none: one line and exit 3.
#    batchaug is imported from this checkout (PYTHONPATH).
# 2. Steps, in order of importance, each its own process (a hang costs one step), with its
#    limit in seconds (they add up to 345 of the 360): probe-checks 40 (gpu/gpu_probe.py:
#    versions, TF32, keyed box draws CPU vs CUDA, nvJPEG vs the CPU decoder, nvImageCodec's ROI
#    decode where installed); tests-gpu 90 (pytest -m gpu over tests/data and tests/transforms:
#    the tests that need CUDA, all of them, no -x); bench-transforms 110 (gpu/gpu_bench.py:
#    every transform at batch 256 on uint8 224x224 and 32x32, eager vs graph replay vs
#    torch.compile, host syncs of the first and a later call, graph pools, peak device and
#    pinned host memory); bench-loader 40 (the JPEG loader's img/s on the device and the host,
#    nvJPEG through torchvision); probe-sync 35 (the host-timing sync probe over the
#    transforms, with_targets, the crop stage and every loader placement and storage);
#    probe-data 30 (memory over three epochs, prefetch overlap). docs/performance.md has the
#    plan and what each step prints. --dry-run runs the probe's steps in one process, the GPU
#    test selection (skipped without CUDA) and the bench at tiny sizes on the CPU.
# 3. Results under $OUT (or ./gpu-results): summary.txt (notes), steps.txt (a line per step as it
#    ends), probe.jsonl (every probe row, written as made), gpu_bench.jsonl/.md (every bench
#    row, written as made), logs.tar.gz (each step's log). The last lines printed are a short
#    summary: versions, steps, every failed check, the tests' count, the loader and memory.
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
DRY=0
case "${1:-}" in
    --dry-run) DRY=1 ;;
    "") ;;
    *) echo "usage: bash gpu/gpu_check.sh [--dry-run]" >&2; exit 2 ;;
esac
OUT_DIR="${OUT:-$PWD/gpu-results}"
mkdir -p "$OUT_DIR" && OUT_DIR=$(cd "$OUT_DIR" && pwd)
LOG="$OUT_DIR/logs"
rm -rf "$LOG" "$OUT_DIR/logs.tar.gz" "$OUT_DIR"/gpu_bench.* "$OUT_DIR/probe.jsonl"
mkdir -p "$LOG"
SUMMARY="$OUT_DIR/summary.txt"
: > "$SUMMARY"
: > "$OUT_DIR/steps.txt"
START=$(date +%s)
BUDGET="${GPU_CHECK_BUDGET:-360}"
# --dry-run ignores the budget (a busy CI machine is slow) unless one is given explicitly
TIMED=1
[ "$DRY" = 1 ] && [ -z "${GPU_CHECK_BUDGET:-}" ] && TIMED=0
KILL_AFTER=10  # seconds between timeout's TERM and its KILL (a CUDA call may ignore TERM)
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1

elapsed() { echo $(( $(date +%s) - START )); }
note() { echo "[gpu_check $(elapsed)s] $*" | tee -a "$SUMMARY"; }
left() { echo $(( BUDGET - $(elapsed) )); }

torch_ok() {  # torch is installed (--dry-run) / imports and sees CUDA
    if [ "$DRY" = 1 ]; then
        timeout -k 5 60 "$1" -c "import importlib.util as u, sys; sys.exit(u.find_spec('torch') is None)"
    else
        timeout -k 5 60 "$1" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"
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
if [ -z "$PY" ]; then
    rm -rf "$LOG"
    echo "gpu_check: CUDA is not available (no Python here has a torch that sees a GPU): nothing to check"
    exit 3
fi
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
note "python $PY; batchaug from $REPO; budget ${BUDGET}s"
if "$PY" -c "import pytest, hypothesis" >/dev/null 2>&1; then HAVE_PYTEST=1; else HAVE_PYTEST=0; fi

# --- 2. the steps -------------------------------------------------------------------------------
FAILED=0
record() {  # record NAME LINE: steps.txt and the summary
    echo "$1: $2" >>"$OUT_DIR/steps.txt"
    note "$1: $2"
}
step() {  # step NAME LIMIT_S COMMAND...   (the limit is cut to what is left of BUDGET)
    local name="$1" limit="$2"
    shift 2
    local l t0 rc why=""
    l=$(left)
    if [ "$TIMED" = 1 ] && [ "$l" -lt 20 ]; then
        record "$name" "skipped (${l}s left of the ${BUDGET}s budget)"
        return
    fi
    # the limit and its kill grace both inside what is left
    [ "$TIMED" = 1 ] && [ "$limit" -gt $(( l - KILL_AFTER )) ] && limit=$(( l - KILL_AFTER ))
    [ "$TIMED" = 0 ] && limit=300  # tiny sizes, but a busy CI machine may be slow
    t0=$(date +%s)
    echo "[gpu_check $(elapsed)s] start $name (limit ${limit}s)"
    echo "\$ $*" >"$LOG/$name.log"
    timeout -k "$KILL_AFTER" "$limit" "$@" >>"$LOG/$name.log" 2>&1
    rc=$?
    case $rc in 124|137) why=" (timed out)" ;; esac
    [ $rc -ne 0 ] && FAILED=$(( FAILED + 1 ))
    record "$name" "exit $rc$why in $(( $(date +%s) - t0 ))s"
    [ $rc -ne 0 ] && tail -n 5 "$LOG/$name.log"
    return 0
}

PROBE=("$PY" "$REPO/gpu/gpu_probe.py" --jsonl "$OUT_DIR/probe.jsonl")
BENCH=("$PY" "$REPO/gpu/gpu_bench.py" --jsonl "$OUT_DIR/gpu_bench.jsonl" --md "$OUT_DIR/gpu_bench.md")
# the GPU tests only: those marked `gpu` by tests/conftest.py (a "cuda" device parameter, or a
# skip without CUDA); every one runs, a failure does not stop the others
TESTS=(-q -p no:cacheprovider -m gpu "$REPO/tests/data" "$REPO/tests/transforms")
cd "$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")" || exit 1  # nothing written in the checkout
RUN_DIR=$PWD
trap 'rm -rf "$RUN_DIR"' EXIT
export HYPOTHESIS_PROFILE=ci
if [ "$DRY" = 1 ]; then
    step probe 300 "${PROBE[@]}" --dry-run
else
    step probe-checks 40 "${PROBE[@]}" --steps versions,tf32,keyed-boxes,nvjpeg,roi-nvjpeg
fi
if [ "$HAVE_PYTEST" = 1 ]; then
    step tests-gpu 90 "$PY" -m pytest "${TESTS[@]}"
else
    record tests-gpu "skipped (pytest or hypothesis does not import; the probe covers the rest)"
fi
if [ "$DRY" = 1 ]; then
    step bench 300 "${BENCH[@]}" --device cpu --dry-run \
        --sections transforms,jpeg_loader,data,memory
else
    # eager and graph rows for every transform first, then compiled ones while time is left
    step bench-transforms 110 "${BENCH[@]}" --sections transforms,memory --budget-s 85
    step bench-loader 40 "${BENCH[@]}" --sections jpeg_loader,data,memory --budget-s 25 \
        --jpeg-seconds 8
    step probe-sync 35 "${PROBE[@]}" --steps sync
    step probe-data 30 "${PROBE[@]}" --steps memory,prefetch
fi

# --- 3. a summary short enough for a note ------------------------------------------------------
echo
echo "== gpu_check summary ($(elapsed)s; results in $OUT_DIR) =="
"$PY" - "$OUT_DIR/probe.jsonl" <<'EOF'
import json, os, sys
rows = []
if os.path.exists(sys.argv[1]):
    with open(sys.argv[1]) as f:
        rows = [json.loads(line) for line in f if line.strip()]
versions = {r["name"]: r["note"] for r in rows if r["step"] == "versions"}
if versions:
    print(" | ".join(f"{k} {versions[k]}" for k in ("torch", "torchvision", "torchcodec",
                                                    "device") if k in versions))
failed = [r for r in rows if r.get("ok") is False]
checked = sum(r.get("ok") is not None for r in rows)
print(f"probe: {len(rows)} rows, {checked} checks, {len(failed)} failed")
for r in failed[:15]:
    print(f"  FAIL {r['step']}: {r['name']}: {r.get('note', '')}"[:200])
if len(failed) > 15:
    print(f"  ... {len(failed) - 15} more in probe.jsonl")
for r in rows:
    if r["step"] in ("graphs", "prefetch") or r["name"] == "torch >= 2.9":
        print(f"  {r['step']}: {r['name']}: {r.get('note', '')}"[:200])
EOF
cat "$OUT_DIR/steps.txt"
[ -f "$LOG/tests-gpu.log" ] && echo "-- tests-gpu: $(grep -E "(passed|failed|error|skipped|no tests ran|deselected)" \
    "$LOG/tests-gpu.log" | tail -n 1)"
[ -f "$OUT_DIR/gpu_bench.jsonl" ] && "$PY" - "$OUT_DIR/gpu_bench.jsonl" <<'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
bad = [r for r in rows if "error" in r or r.get("ok") is False]
t = [r for r in rows if r["section"] == "transforms" and "images_per_s" in r]
print(f"gpu_bench: {len(rows)} rows, {len(bad)} failed, {len(t)} transform timings")
for r in bad[:10]:
    print(f"  FAIL {r['section']}: {r['name']} {r.get('side', '')} {r.get('mode', '')}: "
          f"{r.get('error', r.get('note', ''))}"[:200])
for r in rows:
    if r["section"] in ("jpeg_loader", "memory"):
        ips = f"{r['images_per_s']:,.0f} img/s; " if "images_per_s" in r else ""
        print(f"  {r['section']}: {r['name']}: {ips}{r.get('note', r.get('error', ''))}"[:200])
EOF
[ "$FAILED" = 0 ] || echo "$FAILED step(s) failed"
tar czf "$OUT_DIR/logs.tar.gz" -C "$OUT_DIR" logs && rm -rf "$LOG"
exit $(( FAILED > 0 ))
