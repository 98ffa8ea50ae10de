#!/usr/bin/env bash
# One-shot check for a lent GPU machine. Every step's limit is cut to what is left of one
# budget (GPU_CHECK_BUDGET, default 540 s), so the whole script ends inside one 10-minute
# device call; steps run in order of importance and later ones are skipped when time runs out.
#
#   bash benchmarks/gpu_check.sh            # from the repository root
#
# 1. finds a Python that imports torch with CUDA (python3, then .venv/bin/python); only if none
#    does, creates .venv-gpu and installs torch==2.14.1 torchvision==0.29.1 (from the local disk
#    where pip finds them) and the package with its test extras;
# 2. runs the CUDA-parametrised tests (`pytest -k cuda`), then benchmarks/gpu_bench.py (every
#    recipe eager vs torch.compile(fullgraph=True) at batch 512 and 4096, CUDA events, GB/s
#    against the device's memory bandwidth: gpu_bench.md), `batchaug bench --device cuda
#    --recipe all`, `--train`, benchmarks/bench_transforms.py and bench_loader.py on CUDA, then
#    the whole test suite with what time is left;
# 3. writes every log and result under $OUT (or gpu-results/), with summary.txt listing each
#    step's exit status. A failing step does not stop the later ones.
set -u
cd "$(dirname "$0")/.."
OUT_DIR="${OUT:-gpu-results}"
mkdir -p "$OUT_DIR"
SUMMARY="$OUT_DIR/summary.txt"
: > "$SUMMARY"
START=$(date +%s)

note() { echo "[gpu_check $(( $(date +%s) - START ))s] $*" | tee -a "$SUMMARY"; }

has_torch() { "$1" -c "import torch, torchvision" >/dev/null 2>&1; }

PY=""
for candidate in python3 .venv/bin/python .venv-gpu/bin/python; do
    if command -v "$candidate" >/dev/null 2>&1 && has_torch "$candidate"; then
        PY="$candidate"
        break
    fi
done
if [ -z "$PY" ]; then
    note "no Python with torch found: creating .venv-gpu"
    python3 -m venv .venv-gpu
    PY=.venv-gpu/bin/python
    "$PY" -m pip install -q torch==2.14.1 torchvision==0.29.1 >"$OUT_DIR/pip-torch.log" 2>&1 \
        || note "pip install torch failed (see pip-torch.log)"
fi
# The package and test extras, pinned to the torch already there so nothing replaces it.
if ! "$PY" -c "import batchaug.bench, pytest, hypothesis" >/dev/null 2>&1; then
    TORCH_VER=$("$PY" -c "import torch; print(torch.__version__.split('+')[0])" 2>/dev/null)
    TV_VER=$("$PY" -c "import torchvision; print(torchvision.__version__.split('+')[0])" 2>/dev/null)
    note "installing -e .[test] (torch==$TORCH_VER torchvision==$TV_VER kept)"
    "$PY" -m pip install -q -e ".[test]" "torch==$TORCH_VER" "torchvision==$TV_VER" \
        >"$OUT_DIR/pip-package.log" 2>&1 || note "pip install -e .[test] failed (see pip-package.log)"
fi

"$PY" - <<'EOF' 2>&1 | tee "$OUT_DIR/environment.txt"
import os, platform, torch, torchvision
print("python", platform.python_version(), "torch", torch.__version__, "torchvision",
      torchvision.__version__, "cuda", torch.version.cuda, "cpus", os.cpu_count())
print("cuda available:", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
EOF
if ! "$PY" -c "import torch; assert torch.cuda.is_available()" >/dev/null 2>&1; then
    note "CUDA is not available to $PY: stopping"
    exit 1
fi

BUDGET="${GPU_CHECK_BUDGET:-540}"
step() {  # step NAME TIMEOUT_S COMMAND...   (the limit is cut to what is left of BUDGET)
    local name="$1" limit="$2"
    shift 2
    local left=$(( BUDGET - ($(date +%s) - START) ))
    if [ "$left" -lt 20 ]; then
        note "skip $name: ${left}s left of the ${BUDGET}s budget"
        return
    fi
    [ "$limit" -gt "$left" ] && limit="$left"
    note "start $name (limit ${limit}s): $*"
    timeout "$limit" "$@" >"$OUT_DIR/$name.log" 2>&1
    local rc=$?
    note "end $name: exit $rc$([ $rc -eq 124 ] && echo ' (timed out)')"
    tail -n 25 "$OUT_DIR/$name.log"
}

export HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-dev}"
step tests-cuda 120 "$PY" -m pytest -q -k cuda -p no:cacheprovider
step gpu-bench 150 "$PY" benchmarks/gpu_bench.py --json "$OUT_DIR/gpu_bench.json" \
    --md "$OUT_DIR/gpu_bench.md"
[ -f "$OUT_DIR/gpu_bench.md" ] && cat "$OUT_DIR/gpu_bench.md"
# 2 rounds of equal windows (0.5 s, imagenet 1 s) x 6 contenders x 2 thread counts.
step bench-cuda 100 "$PY" -m batchaug bench --device cuda --recipe all --rounds 2 \
    --out "$OUT_DIR/bench"
# issue 8: placements x orders from a cold 1 GB file, H2D vs a bare pinned copy, and the
# copy share hidden behind a model step (the issue's full size is --cache-gb 2 or more).
step bench-loader-placements 90 "$PY" benchmarks/bench_loader.py --device cuda \
    --sections placements --cache-gb 1 --placement-rounds 2 \
    --json "$OUT_DIR/bench_loader_placements.json"
# (the issue-10 policy recipes are left out here: their CPU DataLoader and kornia contenders
# alone would spend this step's budget; gpu-bench above has the policy row on the GPU)
step bench-transforms 60 "$PY" benchmarks/bench_transforms.py --device cuda --rounds 2 \
    --recipes cifar,rotation,rrc --threads default --json "$OUT_DIR/bench_transforms.json"
step bench-color 40 "$PY" benchmarks/bench_color.py --device cuda --rounds 2 \
    --json "$OUT_DIR/bench_color.json"
step bench-cuda-train 45 "$PY" -m batchaug bench --device cuda --train --out "$OUT_DIR/bench"
step bench-loader 30 "$PY" benchmarks/bench_loader.py --device cuda --sections epochs,load \
    --json "$OUT_DIR/bench_loader.json"
# issue 19: the loader's crop stage on CUDA (batched ragged kernels) vs the Augment on fixed
# 256x256 / same-area batches, scikit-image photos of varied sizes
step bench-photos 60 "$PY" benchmarks/bench_photos.py --device cuda --images 150 --rounds 2 \
    --window 0.5 --threads default --json "$OUT_DIR/bench_photos.json"
# whatever time is left: the whole suite (CUDA-parametrised tests included)
step tests-all 600 "$PY" -m pytest -q -p no:cacheprovider
note "done; results in $OUT_DIR"
