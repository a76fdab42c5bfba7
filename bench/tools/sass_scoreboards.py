#!/usr/bin/env python3
"""Static scoreboard check of a kernel's loops, without a GPU: the waits that pay a global
load's latency. Each SASS instruction of sm_70 and later carries control bits: the scoreboard
(0-5) that its result or its operand reads release, and the scoreboards it waits on. A load
from global memory (`LDG`) releases its scoreboard when the data arrives, hundreds of cycles
later; a wait on that scoreboard soon after the load pays that time. ptxas has six scoreboards
per warp: with more loads and shared-memory, shuffle or special-function results in flight, it
gives several of them one scoreboard, and a wait for a shuffle then also waits for the loads
(H200, Nano's verification with `TABLES`: 19 % of the launch's stall samples on one add of a
scan, 11 instructions after four loads of the next head's inputs; the same list by Nsight's
per-line `long_sb` samples).

For each loop (a backward branch's body, scanned twice so that loads late in an iteration meet
the waits early in the next), prints every wait on a scoreboard that a global load set fewer
than `--near` instructions earlier (default 400: about the latency of a loaded DRAM at a few
warps per scheduler): the instruction, the scoreboard, the distance, and whether shorter
operations share the scoreboard (`shared`: the wait is ptxas's doing, not the data's).

Usage: sass_scoreboards.py KERNEL.cubin [--near N]
Needs `cuobjdump` and `nvdisasm` on PATH, and sass_loops.py beside it (its loops).
"""
import re
import subprocess
import sys

from sass_loops import loop_bodies

NO_BARRIER = 7


def instructions(cubin):
    """Every SASS instruction: its text (predicate kept) and its control bits (the top 23 bits
    of the 128-bit word: stall 4, yield 1, write barrier 3, read barrier 3, wait mask 6)."""
    lines = subprocess.run(["cuobjdump", "-sass", cubin], check=True, capture_output=True, text=True).stdout
    lines = lines.splitlines()
    out = []
    for k, line in enumerate(lines):
        m = re.match(r"\s+/\*([0-9a-f]+)\*/\s+(.*?)\s*;\s*/\* (0x[0-9a-f]+) \*/", line)
        if not m:
            continue
        hi = re.search(r"/\* (0x[0-9a-f]+) \*/", lines[k + 1])
        ctrl = int(hi.group(1), 16) >> 41
        text = m.group(2)
        op = re.sub(r"^@!?U?P\w+\s+", "", text).split(" ", 1)[0]
        out.append(
            dict(
                addr=int(m.group(1), 16),
                text=text,
                op=op,
                wr=(ctrl >> 5) & 7,
                rd=(ctrl >> 8) & 7,
                wait=(ctrl >> 11) & 63,
            )
        )
    return out


def is_global_load(x):
    return x["op"].startswith("LDG") and not x["op"].startswith("LDGSTS")


def exposed_waits(ins, first, last, near):
    """The waits of body `first..=last` on a scoreboard a global load set within `near`
    instructions, the body run twice: (index, scoreboard, distance, shared)."""
    pending = {b: [] for b in range(6)}
    body = list(range(first, last + 1))
    n = len(body)
    found = []
    for step, i in enumerate(body + body):
        x = ins[i]
        for b in range(6):
            if not (x["wait"] >> b) & 1:
                continue
            loads = [s for s, j, w in pending[b] if w and is_global_load(ins[j])]
            if step >= n and loads and step - max(loads) < near:
                shared = any(not (w and is_global_load(ins[j])) for _, j, w in pending[b])
                found.append((i, b, step - max(loads), shared))
            pending[b] = []
        if x["wr"] != NO_BARRIER:
            pending[x["wr"]].append((step, i, True))
        if x["rd"] not in (NO_BARRIER, x["wr"]):
            pending[x["rd"]].append((step, i, False))
    return found


def main():
    args = sys.argv[1:]
    near = 400
    if "--near" in args:
        k = args.index("--near")
        near = int(args[k + 1])
        del args[k : k + 2]
    if len(args) != 1:
        sys.exit(__doc__)
    ins = instructions(args[0])
    for first, last in loop_bodies([(x["addr"], x["text"]) for x in ins]):
        waits = exposed_waits(ins, first, last, near)
        print(
            f"loop {ins[first]['addr']:#x}..{ins[last]['addr']:#x}: {last - first + 1} instructions, "
            f"{len(waits)} waits on a global load within {near}"
        )
        for i, b, dist, shared in waits:
            kind = "shared with shorter operations" if shared else "the load's own"
            print(f"  {ins[i]['addr']:#07x} {ins[i]['text'][:60]:60s} SB{b} {dist:4d} after ({kind})")


if __name__ == "__main__":
    main()
