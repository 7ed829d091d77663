"""deep.py SECONDS: recurse(300) calls itself 300 deep, then burns CPU in
leaf_burn: deeper than tprof's Python walk goes (128 frames)."""
import sys
import time

from truth import truth


def leaf_burn(seconds):
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        for i in range(200):
            x += i * i


def recurse(n, seconds):
    if n == 0:
        leaf_burn(seconds)
    else:
        recurse(n - 1, seconds)


sys.setrecursionlimit(2000)
recurse(300, float(sys.argv[1]))
truth("done")
