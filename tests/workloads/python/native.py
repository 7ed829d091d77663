"""native.py SECONDS: compress_loop() calls zlib.compress in a loop (C code
in libz under a Python frame) for SECONDS. Prints {"role": "done",
"calls"}."""
import random
import sys
import time
import zlib

from truth import truth


def compress_loop(seconds):
    rng = random.Random(1)
    # Compressible but not trivially so: deflate works for its output.
    data = bytes(rng.choice(b"abcdefgh ") for _ in range(1 << 16))
    end = time.monotonic() + seconds
    calls = 0
    while time.monotonic() < end:
        zlib.compress(data, 9)
        calls += 1
    return calls


truth("done", calls=compress_loop(float(sys.argv[1])))
