# SPDX-License-Identifier: MIT
"""tw-report's one index of calls (src/report/index.c; its own cmocka test is tests/c/test_report_index.c):
--trace and --flamegraph find a backward node's forward call in the same index, so they charge every
node to the same forward call, even on a file made so that each forward call's slot in a direct-mapped
table of 65536 slots (what --trace kept before) is taken by another call read between the forward call
and its node."""
import json
import os
import subprocess

import numpy as np

BUILD = os.environ.get("top_builddir", os.path.join(os.path.dirname(__file__), "..", ".."))
TW_REPORT = os.path.join(BUILD, "tw-report")
SLOTS = 1 << 16
PID = TID = 7
NODES = 300


def slots_of(pid, ids):
    """report_pid_id_hash (src/report/groups.h) modulo the old table's size, for many ids at once."""
    with np.errstate(over="ignore"):
        h = ids * np.uint64(0x9E3779B97F4A7C15) ^ np.uint64(pid) * np.uint64(0xC2B2AE3D27D4EB4F)
        h ^= h >> np.uint64(31)
    return h & np.uint64(SLOTS - 1)


def colliding_file(path):
    """NODES forward calls, then for each an unrelated call of the same old slot, then one backward
    call running a node for each forward call: the rows of a node come after its slot was taken."""
    forward = np.arange(1, NODES + 1, dtype=np.uint64)
    candidates = np.arange(10_000, 10_000 + (1 << 21), dtype=np.uint64)
    cand_slots = slots_of(PID, candidates)
    first = {}
    for cid, s in zip(candidates[::-1].tolist(), cand_slots[::-1].tolist()):
        first[s] = cid  # the least id in each slot
    collide = [first[s] for s in slots_of(PID, forward).tolist()]
    assert len(set(collide)) == NODES  # each forward call's slot, taken by a call of its own
    rows, t = [], 1_000_000
    for i, f in enumerate(forward.tolist()):
        rows.append((f, f"torch.f{i}", t, 10, 10, 0, 0, 0, ""))
        t += 100
    for c in collide:
        rows.append((c, "torch.other", t, 10, 10, 0, 0, 0, ""))
        t += 100
    backward_id, backward_start = 50_000_000, t
    for i, f in enumerate(forward.tolist()):
        rows.append((backward_id + 1 + i, f"Node{i}Backward0", t + 1, 10, 10, 1, backward_id, f, f"torch.f{i}"))
        t += 100
    rows.append((backward_id, "torch.Tensor.backward", backward_start, t - backward_start + 50, 50, 0, 0, 0, ""))
    with open(path, "w") as out:
        out.write("call_id,api,start_ns,cost_ns,self_ns,gpu_ns,pid,tid,depth,parent_id,error,args,module,step,"
                  "site,fwd_call_id,fwd_api\n")
        for cid, api, start, cost, self_ns, depth, parent, fwd, fwd_api in rows:
            out.write(f"{cid},{api},{start},{cost},{self_ns},0,{PID},{TID},{depth},{parent},0,,,0,0,{fwd},{fwd_api}\n")
    return {backward_id + 1 + i: f for i, f in enumerate(forward.tolist())}


def test_trace_and_flamegraph_charge_every_node_to_the_same_forward_call(tmp_path):
    records = tmp_path / "records"
    records.mkdir()
    forward_of = colliding_file(records / "calls.csv")
    trace, folded = tmp_path / "t.json", tmp_path / "f.folded"
    done = subprocess.run([TW_REPORT, "-j1", "--trace", trace, "--folded", folded, records],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr

    events = json.loads(trace.read_text())["traceEvents"]
    calls = {(e["tid"], e["ts"]): e for e in events if e.get("ph") == "X"}
    starts = {e["id"]: e for e in events if e.get("cat") == "fwdbwd" and e["ph"] == "s"}
    arrows = {}  # node call id -> the forward call its arrow comes from
    for e in events:
        if e.get("cat") == "fwdbwd" and e["ph"] == "f":
            s = starts[e["id"]]
            arrows[calls[(e["tid"], e["ts"])]["args"]["call_id"]] = calls[(s["tid"], s["ts"])]["args"]["call_id"]
    assert arrows == forward_of
    for e in events:  # and each node names its forward call's thread, as torch.profiler's
        if e.get("ph") == "X" and e["args"].get("fwd_call_id"):
            assert e["args"]["Fwd thread id"] == TID

    charged = {}  # node name -> the frame above it in the flame graph's stacks
    for line in folded.read_text().splitlines():
        stack, _ = line.rsplit(" ", 1)
        frames = stack.split(";")
        if frames[-1].endswith("Backward0"):
            charged[frames[-1]] = frames[-2]
    api_of = {f: f"torch.f{f - 1}" for f in forward_of.values()}
    assert charged == {f"Node{node - 50_000_001}Backward0": api_of[f] for node, f in forward_of.items()}
