"""Ground truth for the Python workloads, as truth.h gives it to the C
ones: one JSON object per line on stdout, and appended to
$TPROF_TRUTH_FILE when it is set (tprof mixes the child's stdout with
its report, so tests read the file)."""
import json
import os
import sys
import threading


def truth(role, **fields):
    fields = {"role": role, "pid": os.getpid(), "tid": threading.get_native_id(),
              "python": "%d.%d" % sys.version_info[:2], **fields}
    line = json.dumps(fields)
    print(line, flush=True)
    path = os.environ.get("TPROF_TRUTH_FILE")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")
