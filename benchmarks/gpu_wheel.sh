#!/usr/bin/env bash
# fbgemm-gpu's CUDA wheel (about 500 MB) onto a lent GPU machine, whose one call carries at most 64 MiB of ignored
# files (/work/.library/device/README.md): the wheel is cut into parts here, each call carries one part into the
# ignored folder .fbgemm/ (a warm machine keeps ignored files between back-to-back calls), and the last call
# reassembles the wheel, checks it against the sha256 taken here, and installs it with --no-deps against that
# machine's own torch. Then benchmarks/gpu_lease.sh times fbgemm's real kernel where it loads, and the torch kernel
# of the same semantics where it does not (the cuda judge labels which).
#
#   bash benchmarks/gpu_wheel.sh split WHEEL [DIR]         here: DIR (default .fbgemm) gets WHEEL.partNN + WHEEL.sha256
#   bash benchmarks/gpu_wheel.sh parts [DIR]               here: the parts, one per device call (carry: DIR/NAME.partNN)
#   bash benchmarks/gpu_wheel.sh assemble [DIR]            there: cat the parts, check the sha256, pip install --no-deps
#   bash benchmarks/gpu_wheel.sh assemble --dry-run [DIR]  the same without the install (tests/test_gpu_wheel.py)
#
# Sizing (15 GPU-minutes a session): 500 MB in 60 MiB parts is 9 calls; each call is the machine's transfer and a
# `true`, a few seconds once warm, so the wheel costs about a minute of device time before gpu_lease.sh runs.
# PART_MIB sets the part size (default 60: under the 64 MiB a call carries, with room for the working tree).
set -euo pipefail

: "${PART_MIB:=60}"
mode=${1:-}
shift || true
dry=0
if [[ ${1:-} == --dry-run ]]; then dry=1; shift; fi

case "$mode" in
split)
    wheel=${1:?usage: gpu_wheel.sh split WHEEL [DIR]}
    dir=${2:-.fbgemm}
    [[ -f $wheel ]] || { echo "gpu_wheel: $wheel: no such file" >&2; exit 2; }
    mkdir -p "$dir"
    name=$(basename "$wheel")
    rm -f "$dir/$name".part*
    split -b "${PART_MIB}M" -d -a 2 "$wheel" "$dir/$name.part"
    (cd "$(dirname "$wheel")" && sha256sum "$name") >"$dir/$name.sha256"
    echo "gpu_wheel: $(ls "$dir/$name".part* | wc -l) parts of at most ${PART_MIB} MiB in $dir (sha256 in $dir/$name.sha256)"
    ;;
parts)
    dir=${1:-.fbgemm}
    ls "$dir"/*.part* 2>/dev/null || { echo "gpu_wheel: no parts in $dir (split first)" >&2; exit 2; }
    ;;
assemble)
    dir=${1:-.fbgemm}
    sums=("$dir"/*.sha256)
    [[ -f ${sums[0]} ]] || { echo "gpu_wheel: no .sha256 in $dir: the parts were not split by this script" >&2; exit 2; }
    for sum in "${sums[@]}"; do
        name=$(basename "$sum" .sha256)
        parts=("$dir/$name".part*)
        [[ -f ${parts[0]} ]] || { echo "gpu_wheel: $name: no parts in $dir" >&2; exit 2; }
        cat "${parts[@]}" >"$dir/$name"
        if ! (cd "$dir" && sha256sum -c --quiet "$name.sha256"); then
            echo "gpu_wheel: $name: sha256 mismatch after joining ${#parts[@]} parts (a part missing or cut short?)" >&2
            rm -f "$dir/$name"
            exit 3
        fi
        echo "gpu_wheel: $name reassembled from ${#parts[@]} parts, sha256 ok"
        if ((dry)); then
            echo "gpu_wheel: --dry-run: not installed"
        else
            # against the machine's own torch: --no-deps, so that no resolver replaces it
            python3 -m pip install -q --no-deps --no-index "$dir/$name"
            python3 -c "import fbgemm_gpu, torch; print('gpu_wheel: fbgemm_gpu', fbgemm_gpu.__version__, 'on torch', torch.__version__)" \
                || echo "gpu_wheel: installed, but fbgemm_gpu does not import against this torch: the cuda judge keeps the torch kernel" >&2
        fi
    done
    ;;
*)
    echo "usage: gpu_wheel.sh split WHEEL [DIR] | parts [DIR] | assemble [--dry-run] [DIR]" >&2
    exit 2
    ;;
esac
