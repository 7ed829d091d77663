#!/usr/bin/env python3
"""Reads what xtask/scripts/gpu_check.sh wrote (gpu.tar.gz, unpacked into a
folder): for each recorded case, tprof's GPU utilization against
nvidia-smi's over the steady state (the steps), the steps against the job's
own iterations, the CUDA section, the anatomy's GPU idle, and the leading
finding with its prediction against the advised setting measured untraced.

    python3 xtask/scripts/gpu_check_read.py FOLDER
"""

import csv
import datetime
import json
import os
import sys


def load(folder, name):
    path = os.path.join(folder, name)
    return open(path).read() if os.path.exists(path) else None


def summary(folder, name):
    text = load(folder, f"{name}.truth")
    for line in (text or "").splitlines():
        d = json.loads(line)
        if d.get("event") == "summary":
            return d
    return None


def smi_samples(folder, name):
    """nvidia-smi's samples as (monotonic ns, util %, MiB)."""
    clocks, rows = load(folder, f"{name}.clocks"), load(folder, f"{name}.smi")
    if not clocks or not rows:
        return []
    real, mono = (int(x) for x in clocks.split())
    out = []
    for row in csv.reader(rows.splitlines()):
        try:
            t = datetime.datetime.strptime(row[0].strip(), "%Y/%m/%d %H:%M:%S.%f")
        except (ValueError, IndexError):
            continue
        t = t.replace(tzinfo=datetime.timezone.utc).timestamp() * 1e9
        out.append((t - real + mono, float(row[1]), float(row[2])))
    return out


def case(folder, name):
    text = load(folder, f"{name}.json")
    print(f"\n### {name}")
    if not text:
        print("no report:", (load(folder, f"{name}.stderr") or "")[-800:])
        return None
    r = json.loads(text)
    start = r["start_monotonic_ns"]
    items = r["steps"]["items"]
    truth = summary(folder, name)
    if truth and items:
        its = truth["iterations"]
        span = (its[-1]["end_ns"] - its[0]["start_ns"]) / 1e9
        print(f"job: {len(its)} iterations, {len(its) / span:.2f} it/s; tprof: {len(items)} steps")
    print("gpu_status:", r.get("gpu_status"))
    for g in r["gpus"]:
        print(
            f"gpu {g['index']} {g['name']}: util {g['util_mean_pct']} idle {g['idle_frac']} "
            f"mem peak {g['mem_peak_bytes']} source {g['utilization_source']} missing {g['missing']} "
            f"processes {g['processes']}"
        )
    smi = smi_samples(folder, name)
    if smi and items:
        a, b = start + items[0]["start_s"] * 1e9, start + items[-1]["end_s"] * 1e9
        inside = [u for t, u, _ in smi if a <= t <= b]
        if inside:
            print(f"nvidia-smi over the steps: {len(inside)} samples, mean util {sum(inside) / len(inside):.1f}%")
        print(f"nvidia-smi peak memory: {max(m for _, _, m in smi):.0f} MiB")
    cuda = r["cuda"]
    print("cuda:", cuda["status"], "library", cuda["library"], "failed", cuda["failed_calls"])
    print("  calls:", json.dumps(cuda["calls"])[:600])
    print("  h2d:", cuda["h2d_copies"], "trainer:", json.dumps(cuda["trainer"])[:400])
    print("  findings:", [f.get("id") for f in cuda["findings"]])
    an = r["anatomy"]
    print("anatomy gpu_idle_s:", an.get("gpu_idle_s"), "batch_marked", an.get("batch_marked"))
    for p in an["phases"][:8]:
        print(f"  {p['phase']:16} share {p['share']:.3f} p50 {p['p50_ms']:.2f} ms gpu_idle {p.get('gpu_idle_s')}")
    print("roles:", json.dumps(r["roles"])[:500])
    for f in r["findings"][:4]:
        print(
            f"finding {f['id']}: {f['title']} | step {f.get('step_ms')} predicted {f.get('predicted_step_ms')} "
            f"changes {f.get('changes')}"
        )
    return r


def main():
    folder = sys.argv[1]
    for name in ("pin2", "nw0"):
        case(folder, name)
    print()
    for name in ("pin2-untraced", "nw0-untraced", "advised"):
        s = summary(folder, name)
        if s:
            print(f"{name}: {s['iterations_per_s']:.2f} it/s, step {1000 / s['iterations_per_s']:.2f} ms")
    frames = [json.loads(l) for l in (load(folder, "top.jsonl") or "").splitlines() if l.strip()]
    print(f"\ntop: {len(frames)} frames")
    for f in frames[-2:]:
        print(json.dumps({k: v for k, v in f.items() if k not in ("threads", "processes")})[:1500])


if __name__ == "__main__":
    main()
