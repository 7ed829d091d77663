"""mix.py SECONDS [DEPTH]: the Python bench's job (cargo xtask
bench-python). Under DEPTH extra frames (recurse), main -> step runs
burn_a, burn_b and compress_loop for 3, 1 and 2 slices of 2 ms of the
thread's own CPU time each round, so their true shares of the job's CPU
are 1/2, 1/6 and 1/3; a second thread, napper, sleeps 0.5 ms at a time
(switch-outs for the off-CPU walk). Prints {"role": "done", "rounds",
"a_ns", "b_ns", "zlib_ns", "naps"}: the CPU time each measured, and how
many rounds (work done) and naps fit."""
import random
import sys
import threading
import time
import zlib

from truth import truth

SLICE_NS = 2_000_000
DATA = bytes(random.Random(1).choice(b"abcdefgh ") for _ in range(1 << 14))


def spin(cpu_ns):
    end = time.thread_time_ns() + cpu_ns
    x = 0
    while time.thread_time_ns() < end:
        for i in range(200):
            x += i * i
    return x


def burn_a(cpu_ns):
    return spin(cpu_ns)


def burn_b(cpu_ns):
    return spin(cpu_ns)


def compress_loop(cpu_ns):
    end = time.thread_time_ns() + cpu_ns
    while time.thread_time_ns() < end:
        zlib.compress(DATA, 9)


def step(totals):
    for i, (f, slices) in enumerate(((burn_a, 3), (burn_b, 1), (compress_loop, 2))):
        t0 = time.thread_time_ns()
        f(slices * SLICE_NS)
        totals[i] += time.thread_time_ns() - t0


def napper(stop, naps):
    while not stop.is_set():
        time.sleep(0.0005)
        naps[0] += 1


def main(seconds):
    stop = threading.Event()
    naps = [0]
    t = threading.Thread(target=napper, args=(stop, naps), name="napper")
    t.start()
    end = time.monotonic() + seconds
    totals = [0, 0, 0]
    rounds = 0
    while time.monotonic() < end:
        step(totals)
        rounds += 1
    stop.set()
    t.join()
    truth("done", rounds=rounds, a_ns=totals[0], b_ns=totals[1], zlib_ns=totals[2], naps=naps[0])


def recurse(n, seconds):
    if n == 0:
        main(seconds)
    else:
        recurse(n - 1, seconds)


sys.setrecursionlimit(1000)
recurse(int(sys.argv[2]) if len(sys.argv) > 2 else 0, float(sys.argv[1]))
