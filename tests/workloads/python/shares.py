"""shares.py SECONDS: main -> step -> burn_a, burn_b in rounds of 6 ms and
2 ms of the thread's own CPU time (time.thread_time), so on-CPU samples
must split 3:1 between them whatever the scheduler does; then nap() sleeps
0.5 s with the GIL released. Prints {"role": "done", "a_ns", "b_ns",
"nap_ns"}: the CPU time each burn measured and the sleep's length."""
import sys
import time

from truth import truth

SLICE_NS = 2_000_000


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


def step(totals):
    t0 = time.thread_time_ns()
    burn_a(3 * SLICE_NS)
    t1 = time.thread_time_ns()
    burn_b(SLICE_NS)
    t2 = time.thread_time_ns()
    totals[0] += t1 - t0
    totals[1] += t2 - t1


def nap():
    t0 = time.monotonic_ns()
    time.sleep(0.5)
    return time.monotonic_ns() - t0


def main():
    end = time.monotonic() + float(sys.argv[1])
    totals = [0, 0]
    while time.monotonic() < end:
        step(totals)
    slept = nap()
    truth("done", a_ns=totals[0], b_ns=totals[1], nap_ns=slept)


main()
