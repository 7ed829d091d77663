"""What tprof costs the real PyTorch job, and tprof's own CPU while it runs.

Runs tests/workloads/train_job.py untraced and under `tprof record --`
(each configuration given, in an order rotated each round), and prints
per configuration the median of the job's own iterations per second, its
ratio to the same round's untraced run (median over rounds), and tprof's
own CPU (its threads' schedstat, sampled from /proc every 0.25 s)
over the job's timed iterations, in ms per second. With
TPROF_SWITCH_PROFILE=1 in a configuration's environment the switch
program's breakdown line tprof prints is shown too.

    sudo PY=.../bin/python python3 xtask/scripts/real_overhead.py \
        --rounds 5 --num-workers 2 --omp 1 --iterations 80 \
        --config default= --config no-python=--no-python-frames

A configuration is NAME=ARGS (extra `tprof record` arguments, split on
spaces) or NAME=ARGS@ENV=VALUE,ENV=VALUE; the untraced run is always
there. ARGS that begin with `top` run `tprof top --batch` (a plain-text
frame a second, to /dev/null) with the rest as its arguments instead of
`tprof record`, e.g. `--config top=top`; ARGS that begin with `perf` run
`perf record -F 99 --call-graph dwarf` with the rest as more of its
arguments (its CPU is counted as tprof's is), e.g. `--config perf=perf`. Run from the repository root after `cargo build --release -p
profiler` and `python train_job.py --data-dir
/dev/shm/tprof-train-job-images --generate-only`.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

DATA = "/dev/shm/tprof-train-job-images"


def job_args(a):
    return [a.python, "tests/workloads/train_job.py", "--data-dir", DATA,
            "--num-workers", str(a.num_workers), "--iterations", str(a.iterations)]


def job_env(a):
    env = dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)
    env.pop("MKL_NUM_THREADS", None)
    if a.omp:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(a.omp)
    return env


def summary(path):
    with open(path) as f:
        for line in f:
            try:
                v = json.loads(line)
            except ValueError:
                continue
            if v.get("event") == "summary":
                return v
    raise RuntimeError("no summary from the job")


def cpu_ns(pid):
    """CPU nanoseconds of the process's live threads (each task's
    schedstat): exact, where /proc/PID/stat counts 10 ms ticks, which over
    a few seconds' iterations is ±2 ms/s."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def run(a, extra, env_extra):
    truth = tempfile.NamedTemporaryFile(prefix="real-truth-", suffix=".jsonl", delete=False).name
    env = job_env(a)
    env["TPROF_TRUTH_FILE"] = truth
    if extra is None:
        subprocess.run(job_args(a), env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=True)
        s = summary(truth)
        os.unlink(truth)
        return s["iterations_per_s"], None, ""
    env.update(env_extra)
    rec = os.path.join(tempfile.mkdtemp(prefix="real-overhead-"), "job.tprof")
    if extra[:1] == ["top"]:
        cmd = [a.tprof, "top", "--batch", *extra[1:], "--", *job_args(a)]
    elif extra[:1] == ["perf"]:
        cmd = ["perf", "record", "-q", "-F", "99", "--call-graph", "dwarf", "-o", rec,
               *extra[1:], "--", *job_args(a)]
    else:
        cmd = [a.tprof, "record", "--no-report", "--no-flamegraphs", "--no-timeline", "-o", rec,
               *extra, "--", *job_args(a)]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    samples = []

    def sample():
        while p.poll() is None:
            try:
                samples.append((time.monotonic_ns(), cpu_ns(p.pid)))
            except (OSError, ValueError, IndexError):
                pass
            time.sleep(0.25)

    t = threading.Thread(target=sample)
    t.start()
    err = p.stderr.read()
    p.wait()
    t.join()
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed: {err}")
    s = summary(truth)
    os.unlink(truth)
    if os.path.exists(rec):
        os.unlink(rec)
    os.rmdir(os.path.dirname(rec))
    start = s["iterations"][0]["start_ns"]
    end = s["iterations"][-1]["end_ns"]
    inside = [x for x in samples if start <= x[0] <= end]
    ms_per_s = None
    if len(inside) >= 2:
        (t0, c0), (t1, c1) = inside[0], inside[-1]
        ms_per_s = (c1 - c0) / 1e6 / ((t1 - t0) / 1e9)
    profile = "".join(line for line in err.splitlines() if "switch profile" in line)
    return s["iterations_per_s"], ms_per_s, profile


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--iterations", type=int, default=80)
    p.add_argument("--num-workers", type=int, default=2)
    p.add_argument("--omp", type=int, default=None)
    p.add_argument("--python", default=os.environ.get("PY", sys.executable))
    p.add_argument("--tprof", default="target/release/tprof")
    p.add_argument("--config", action="append", default=[])
    a = p.parse_args()
    configs = [("untraced", None, {})]
    for c in a.config or ["default="]:
        name, rest = c.split("=", 1)
        args, _, envs = rest.partition("@")
        env = dict(kv.split("=", 1) for kv in envs.split(",") if kv)
        configs.append((name, args.split(), env))
    results = {name: [] for name, _, _ in configs}
    print(f"load average at start: {os.getloadavg()}", flush=True)
    for r in range(a.rounds):
        order = configs[r % len(configs):] + configs[:r % len(configs)]
        row = {}
        for name, extra, env in order:
            rate, cpu, prof = run(a, extra, env)
            row[name] = (rate, cpu)
            print(f"round {r} {name:<12} {rate:6.2f} it/s"
                  + (f"  tool {cpu:5.1f} ms/s" if cpu is not None else "")
                  + (f"\n    {prof}" if prof else ""), flush=True)
        for name in row:
            rate, cpu = row[name]
            results[name].append((rate, rate / row["untraced"][0], cpu))
    print(f"load average at end: {os.getloadavg()}")
    print("\n| configuration | median it/s | median ratio to the round's untraced | the tool's CPU, ms/s over the timed iterations (median) |")
    print("|---|---|---|---|")
    for name, _, _ in configs:
        rs = results[name]
        cpus = [c for _, _, c in rs if c is not None]
        print(f"| {name} | {statistics.median(x for x, _, _ in rs):.2f} | "
              f"{statistics.median(x for _, x, _ in rs):.3f} | "
              + (f"{statistics.median(cpus):.1f}" if cpus else "–") + " |")


if __name__ == "__main__":
    main()
