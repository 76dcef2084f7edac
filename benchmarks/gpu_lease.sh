#!/usr/bin/env bash
# Everything one call on a lent GPU machine can measure within BUDGET seconds (the device tool lends 15 minutes a
# session, a machine's start included, one command at most 10 minutes: /work/.library/device/README.md):
#
#   BUDGET=520 bash benchmarks/gpu_lease.sh [RESULTS_DIR]      (on the GPU machine; default results/gpu-lease-<date>)
#
# in order of what only a GPU can show, each step boxed so that a slow one cannot starve the rest:
#   1. the machine (nvidia-smi) and the GPU tests: tests/test_torch_tbe.py, tests/test_cuda_backend.py
#   2. the device-host link (benchmarks/host_link_probe.py): what UVM misses cross
#   3. benchmarks/gpu_campaign.sh, time-boxed from what is left: `shardopt calibrate --backend cuda --for <suite>
#      --rounds 2` within 45 % of it (collection, the neural model, the refit, the loop on the plans the solvers
#      propose, the held-out judgement, the card), the placement checks, then a measured leaderboard until the
#      campaign's DEADLINE (the end of what is left, less its report and record)
# Where the wheels of this project's pure dependencies were carried in .whl (docs/backends.md, "GPU campaign") and
# pydantic does not import, they are installed to /tmp/site first. Settings of the campaign pass through the
# environment (COUNT, SOLVERS, TIME_LIMIT, ...; this script's defaults below are sized for one lease).
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RES=${1:-$REPO/results/gpu-lease-$(date -u +%Y-%m-%d)}
: "${BUDGET:=520}"
T0=$SECONDS
mkdir -p "$RES"
RES=$(cd "$RES" && pwd)
log() { printf '[%s +%ss] %s\n' "$(date -u +%H:%M:%S)" "$((SECONDS - T0))" "$*" | tee -a "$RES/lease.log" >&2; }
left() { echo $((BUDGET - (SECONDS - T0))); }

cd "$REPO"
if ! python3 -c "import pydantic" 2>/dev/null; then
    compgen -G "$REPO/.whl/*.whl" >/dev/null \
        || { log "pydantic does not import and no wheels were carried in .whl (docs/backends.md, GPU campaign)"; exit 3; }
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$REPO"/.whl/*.whl \
        || { log "installing the carried wheels failed"; exit 3; }
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
# fbgemm-gpu's CUDA wheel, where earlier calls carried it in parts (benchmarks/gpu_wheel.sh): joined, checked and
# installed against this machine's torch; where it does not load, the cuda judge keeps the torch kernel and says so
if compgen -G "$REPO/.fbgemm/*.sha256" >/dev/null && ! python3 -c "import fbgemm_gpu" 2>/dev/null; then
    bash "$REPO/benchmarks/gpu_wheel.sh" assemble "$REPO/.fbgemm" >>"$RES/fbgemm-wheel.log" 2>&1
    log "fbgemm-gpu wheel: rc $? ($(tail -1 "$RES/fbgemm-wheel.log"))"
fi
export PYTHON=${PYTHON:-python3} SHARDOPT=${SHARDOPT:-python3 -m shardopt}
log "lease into $RES, budget ${BUDGET} s"

# 1. the machine and the GPU tests
{ nvidia-smi; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } \
    >"$RES/nvidia-smi.txt" 2>&1
timeout -k 5 "${TEST_SECONDS_PYTEST:-110}" "$PYTHON" -m pytest -q -p no:cacheprovider -rs \
    tests/test_torch_tbe.py tests/test_cuda_backend.py >"$RES/pytest-cuda.log" 2>&1
log "GPU tests: rc $? ($(tail -1 "$RES/pytest-cuda.log"))"

# 2. the device-host link
timeout -k 5 "${PROBE_SECONDS:-60}" "$PYTHON" benchmarks/host_link_probe.py --out "$RES/host-link.json" \
    >"$RES/host-link.log" 2>&1
rc=$?
log "host link probe: rc $rc"
[[ $rc != 0 ]] || export HOST_LINK=${HOST_LINK:-$RES/host-link.json}  # the campaign's calibration fits the link too

# 3. the campaign, boxed by what is left (40 s kept for its record and the packing)
rest=$(($(left) - 40))
if ((rest < 120)); then
    log "only ${rest} s left: no campaign"
else
    export COUNT=${COUNT:-3} SOLVERS=${SOLVERS:-random,size,greedy,neuroshard,cpsat} TIME_LIMIT=${TIME_LIMIT:-2}
    export LB_TIME_CAP=${LB_TIME_CAP:-20} EPOCHS=${EPOCHS:-150} KEEP_GOING=${KEEP_GOING:-1}
    export CAL_MINUTES=${CAL_MINUTES:-$(awk -v r="$rest" 'BEGIN { printf "%.2f", r * 0.45 / 60 }')}
    export DEADLINE=$(($(date +%s) + rest))
    log "campaign: ${rest} s (calibrate ${CAL_MINUTES} min, the leaderboard until 20 s before the end, COUNT=$COUNT)"
    timeout -k 10 "$rest" bash benchmarks/gpu_campaign.sh --out "$RES/campaign" >"$RES/campaign.log" 2>&1
    log "campaign: rc $?"
fi
rm -rf "$RES/campaign/cache"  # the measurement cache: every figure is in the data files
log "done"
