"""Decodes a Perfetto trace with Perfetto's own proto definitions (the
`perfetto` Python package that `cargo xtask setup` installs) and prints what
tests/integration/export.rs checks, as JSON: each thread track with its
state slices counted and summed, each counter track with its values, the
machines, the flows, and every field Perfetto's definitions do not know.

usage: python perfetto_summary.py TRACE
"""

import json
import sys
from collections import defaultdict

from google.protobuf import unknown_fields
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb


def unknown(msg, path, out):
    """Paths of fields the definitions do not know, anywhere in msg."""
    if len(unknown_fields.UnknownFieldSet(msg)) > 0:
        out.append(path)
    for field, value in msg.ListFields():
        if field.message_type is None:
            continue
        if field.is_repeated:
            for i, item in enumerate(value):
                unknown(item, f"{path}.{field.name}[{i}]", out)
        else:
            unknown(value, f"{path}.{field.name}", out)


def main(path):
    trace = pb.Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())
    unknown_paths = []
    machines = {}
    threads = {}
    counters = {}
    counter_values = defaultdict(int)
    state = defaultdict(lambda: [0, 0])
    open_slices = defaultdict(list)
    # Interned category names, per sequence.
    categories = defaultdict(dict)
    flows = set()
    flow_ends = set()
    for i, p in enumerate(trace.packet):
        unknown(p, f"packet[{i}]", unknown_paths)
        seq = p.trusted_packet_sequence_id
        if p.HasField("interned_data"):
            for c in p.interned_data.event_categories:
                categories[seq][c.iid] = c.name
        kind = p.WhichOneof("data")
        if kind == "system_info":
            machines[p.machine_id] = p.system_info.machine_name
        elif kind == "track_descriptor":
            d = p.track_descriptor
            if d.HasField("thread"):
                threads[d.uuid] = {
                    "machine": p.machine_id,
                    "pid": d.thread.pid,
                    "tid": d.thread.tid,
                    "name": d.thread.thread_name,
                }
            if d.HasField("counter"):
                counters[d.uuid] = {"machine": p.machine_id, "name": d.name}
        elif kind == "track_event":
            e = p.track_event
            if e.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
                is_state = any(categories[seq].get(c) == "state" for c in e.category_iids)
                open_slices[e.track_uuid].append((p.timestamp, is_state))
            elif e.type == pb.TrackEvent.TYPE_SLICE_END:
                begin, is_state = open_slices[e.track_uuid].pop()
                if is_state:
                    state[e.track_uuid][0] += 1
                    state[e.track_uuid][1] += p.timestamp - begin
            elif e.type == pb.TrackEvent.TYPE_COUNTER:
                counter_values[e.track_uuid] += 1
            flows.update(e.flow_ids)
            flow_ends.update(e.terminating_flow_ids)
    out = {
        "packets": len(trace.packet),
        "unknown_fields": unknown_paths[:20],
        "unclosed_slices": sum(len(v) for v in open_slices.values()),
        "machines": {str(k): v for k, v in machines.items()},
        "threads": [
            dict(t, state_slices=state[u][0], state_ns=state[u][1]) for u, t in threads.items()
        ],
        "counters": [
            dict(c, values=counter_values[u]) for u, c in counters.items()
        ],
        "flows": len(flows),
        "flows_ended": len(flows & flow_ends),
    }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
