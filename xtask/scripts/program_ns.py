"""The kernel programs' own time on a job, from the kernel's BPF statistics.

Runs `tprof record -- COMMAND...` (or `tprof record -p PID` with --pid),
turns on `kernel.bpf_stats_enabled` for the run (it adds two clock reads
to every program run, included in the figures), reads `bpftool prog show`
at --from and --to seconds into the recording, and prints each program's
runs a second, nanoseconds a run and milliseconds a second between the
two, busiest first, with the total. One run; alternate builds by hand:

    sudo python3 xtask/scripts/program_ns.py --tprof target/release/tprof -- \\
        $PY tests/workloads/train_job.py --data-dir /dev/shm/tprof-train-job-images \\
        --num-workers 8 --iterations 250

Run from the repository root as root; bpftool must be on the PATH.
"""

import argparse
import json
import subprocess
import sys
import time


def programs():
    out = subprocess.run(["bpftool", "prog", "show", "-j"], check=True,
                         capture_output=True, text=True).stdout
    return {p["id"]: p for p in json.loads(out)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tprof", default="target/release/tprof")
    ap.add_argument("--pid", type=int, help="attach to this process instead of launching")
    ap.add_argument("--from", dest="start", type=float, default=8.0,
                    help="seconds into the recording of the first read (default 8)")
    ap.add_argument("--to", dest="end", type=float, default=14.0,
                    help="seconds into the recording of the second read (default 14)")
    ap.add_argument("command", nargs="*")
    a = ap.parse_args()
    if not a.command and a.pid is None:
        sys.exit("error: give a command after `--`, or --pid PID")
    record = [a.tprof, "record", "--force", "--no-report", "--no-flamegraphs",
              "--no-timeline", "-o", "/tmp/program_ns.tprof"]
    if a.pid is not None:
        record += ["-p", str(a.pid), "-d", f"{a.end + 1:.0f}s"]
    else:
        record += ["--"] + a.command
    stats = "/proc/sys/kernel/bpf_stats_enabled"
    with open(stats, "w") as f:
        f.write("1")
    try:
        tprof = subprocess.Popen(record, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(a.start)
        before = programs()
        time.sleep(a.end - a.start)
        after = programs()
        tprof.wait()
    finally:
        with open(stats, "w") as f:
            f.write("0")
    secs = a.end - a.start
    rows = []
    for pid, p in after.items():
        b = before.get(pid, {})
        runs = p.get("run_cnt", 0) - b.get("run_cnt", 0)
        ns = p.get("run_time_ns", 0) - b.get("run_time_ns", 0)
        if runs > 0 and p.get("name", "").startswith("tprof"):
            rows.append((ns / secs / 1e6, runs / secs, ns / runs, p["name"]))
    rows.sort(reverse=True)
    for ms, per_s, per_run, name in rows:
        print(f"{name:24s} {per_s:10.0f} runs/s {per_run:7.0f} ns {ms:6.1f} ms/s")
    print(f"{'all':24s} {'':25s} {sum(r[0] for r in rows):6.1f} ms/s")
    if tprof.returncode != 0:
        sys.exit(f"error: tprof exited {tprof.returncode}")


if __name__ == "__main__":
    main()
