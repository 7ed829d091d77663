"""workers.py: the shapes of a DataLoader job. The main thread starts a
thread (thread_spin, 0.6 s of CPU), a forked child (child_burn, 0.6 s of
CPU, exits before the recording ends) and a process from the forkserver
start method (an exec'd interpreter forking its worker: server_burn), then
waits on a queue.Queue the thread fills only when done, so it blocks in
wait_for_item with the GIL released. Prints one truth line per part."""
import multiprocessing
import os
import queue
import threading
import time

from truth import truth


def burn(cpu_s):
    end = time.thread_time() + cpu_s
    x = 0
    while time.thread_time() < end:
        for i in range(200):
            x += i * i


def thread_spin(q):
    truth("thread")
    burn(0.6)
    q.put(1)


def child_burn():
    truth("child")
    burn(0.6)


def server_burn():
    truth("server")
    burn(0.6)


def wait_for_item(q):
    t0 = time.monotonic_ns()
    q.get()
    return time.monotonic_ns() - t0


def main():
    pid = os.fork()
    if pid == 0:
        child_burn()
        os._exit(0)
    q = queue.Queue()
    threading.Thread(target=thread_spin, args=(q,), name="spinner").start()
    waited = wait_for_item(q)
    os.waitpid(pid, 0)
    ctx = multiprocessing.get_context("forkserver")
    p = ctx.Process(target=server_burn)
    p.start()
    p.join()
    truth("main", waited_ns=waited)


if __name__ == "__main__":
    main()
