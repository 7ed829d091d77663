#!/usr/bin/env bash
# The checks that need a real NVIDIA GPU, which the suite's machines lack:
# tprof on the suite's PyTorch job (tests/workloads/train_job.py) running on
# CUDA, against nvidia-smi and the job's own timestamps. Run as root on a
# machine with a GPU, PyTorch and OpenCV:
#
#     xtask/scripts/gpu_check.sh TPROF PYTHON OUTDIR
#
# It writes OUTDIR/gpu.tar.gz (reports, job truth, nvidia-smi samples,
# logs) and OUTDIR/recordings.tar.gz, and prints a summary; read the
# results with xtask/scripts/gpu_check_read.py. Each case runs whatever
# the one before it did, so one failure still leaves the others' results.
set -u
TPROF=$(realpath "$1")
PY=$2
mkdir -p "$3"
OUT=$(realpath "$3")
W=$OUT/w
mkdir -p "$W"
IMG=/dev/shm/tprof-train-job-images
JOB=(tests/workloads/train_job.py --data-dir "$IMG")

echo "== machine"
uname -r
nproc
nvidia-smi -L
ls -la /sys/kernel/btf/vmlinux
ldconfig -p | grep -E "libnvidia-ml|libcuda.so"
"$PY" -c 'import sys, torch, cv2; print(sys.version.split()[0], torch.__version__, torch.cuda.is_available(), cv2.__version__)'
"$PY" "${JOB[@]}" --generate-only || exit 1

# The two clocks at one moment, to place nvidia-smi's wall-clock samples
# on the recording's monotonic time.
clocks() { "$PY" -c 'import time; print(time.time_ns(), time.monotonic_ns())'; }

# record NAME JOB-ARGS...: the job under `tprof record`, nvidia-smi
# sampling alongside, then the report as JSON and text.
record() {
    local name=$1
    shift
    echo "== record $name: $*"
    clocks >"$W/$name.clocks"
    nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used \
        --format=csv,noheader,nounits -lms 100 >"$W/$name.smi" &
    local smi=$!
    TPROF_TRUTH_FILE=$W/$name.truth timeout 240 "$TPROF" record -o "$W/$name.tprof" \
        --no-flamegraphs --no-timeline -- "$PY" "${JOB[@]}" "$@" \
        >"$W/$name.stdout" 2>"$W/$name.stderr"
    echo "rc=$?"
    kill "$smi"
    tail -5 "$W/$name.stderr"
    "$TPROF" report "$W/$name.tprof" --json >"$W/$name.json" 2>>"$W/$name.stderr"
    "$TPROF" report "$W/$name.tprof" >"$W/$name.txt" 2>>"$W/$name.stderr"
    head -40 "$W/$name.txt"
}

# untraced NAME JOB-ARGS...: the same job without tprof, for its own it/s.
untraced() {
    local name=$1
    shift
    echo "== untraced $name: $*"
    TPROF_TRUTH_FILE=$W/$name.truth timeout 240 "$PY" "${JOB[@]}" "$@" >"$W/$name.stdout" 2>&1
    echo "rc=$?"
    grep -o '"iterations_per_s":[0-9.]*' "$W/$name.truth"
}

record pin2 --num-workers 2 --pin-memory --persistent-workers --iterations 200
record nw0 --num-workers 0 --iterations 60
# The setting nw0's leading finding advises, measured untraced.
advised=$("$PY" -c '
import json, sys
r = json.load(open(sys.argv[1]))
for f in r["findings"]:
    for c in f.get("changes") or []:
        if c.get("setting") == "num_workers":
            print(c["to"]); sys.exit()
' "$W/nw0.json")
echo "advised num_workers: ${advised:-none}"
untraced nw0-untraced --num-workers 0 --iterations 60
if [ -n "$advised" ]; then
    untraced advised --num-workers "$advised" --persistent-workers --iterations 60
fi
untraced pin2-untraced --num-workers 2 --pin-memory --persistent-workers --iterations 200

echo "== top"
clocks >"$W/top.clocks"
TPROF_TRUTH_FILE=$W/top.truth timeout 120 "$TPROF" top --json -n 8 -- "$PY" "${JOB[@]}" \
    --num-workers 2 --pin-memory --persistent-workers --iterations 100000 \
    >"$W/top.jsonl" 2>"$W/top.stderr"
echo "rc=$?"
tail -3 "$W/top.stderr"
pgrep -f train_job.py && echo "LEFT RUNNING: the job outlived top"
bpftool prog show 2>/dev/null | grep -c tprof

tar czf "$OUT/gpu.tar.gz" -C "$W" --exclude='*.tprof' .
(cd "$W" && tar czf "$OUT/recordings.tar.gz" ./*.tprof)
rm -rf "$W"
ls -la "$OUT"
