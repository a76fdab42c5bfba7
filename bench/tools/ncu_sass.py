#!/usr/bin/env python3
"""Summarises a per-SASS-instruction CSV from Nsight Compute (`ncu -i REPORT --page source
--print-source sass --csv`, as `scripts/device-session.sh ncu` writes them).

Prints the warp instructions executed, the stall reasons' shares of the samples, the opcode mix,
and the instructions grouped by how often each ran: a group is one region of the kernel run
the same number of times (once per program, per head, per k-step, ...).

Usage: ncu_sass.py FILE.csv [--lines FROM TO] [--top N]
  --lines: those SASS lines, with counts; --top: the N lines with the most stall samples, with
  their main stall reasons
"""
import collections
import csv
import sys


def load(path):
    rows = list(csv.reader(open(path)))
    name, header, data = rows[0][1], rows[1], rows[2:]
    col = {h: i for i, h in enumerate(header)}

    def num(r, key):
        try:
            return float(r[col[key]])
        except (KeyError, ValueError):
            return 0.0

    insts = []
    for r in data:
        src = r[col["Source"]].strip()
        words = src.split()
        op = words[1] if words and words[0].startswith("@") and len(words) > 1 else (words[0] if words else "?")
        insts.append(
            {
                "src": src,
                "op": op.split(".")[0],
                "exec": num(r, "Instructions Executed"),
                "samples": num(r, "Warp Stall Sampling (All Samples)"),
                "stalls": {h[6:]: num(r, h) for h in header if h.startswith("stall_") and "Not Issued" not in h},
            }
        )
    return name, insts


def summary(name, insts):
    total = sum(i["exec"] for i in insts) or 1.0
    samples = sum(i["samples"] for i in insts) or 1.0
    print(f"{name}\n  warp instructions executed {total:.4g}, static {len(insts)}, stall samples {samples:.0f}")
    stalls = collections.Counter()
    for i in insts:
        stalls.update(i["stalls"])
    print("  stalls: " + ", ".join(f"{k} {v / samples:.0%}" for k, v in stalls.most_common(8) if v / samples >= 0.02))
    ops = collections.Counter()
    for i in insts:
        ops[i["op"]] += i["exec"]
    print("  opcodes: " + ", ".join(f"{k} {v / total:.1%}" for k, v in ops.most_common(16)))
    groups = collections.defaultdict(list)
    for i in insts:
        if i["exec"] > 0:
            groups[i["exec"]].append(i)
    print("  by run count (each region of the kernel runs a fixed number of times):")
    for count, members in sorted(groups.items(), key=lambda g: -g[0] * len(g[1]))[:8]:
        mix = collections.Counter(i["op"] for i in members)
        share = count * len(members) / total
        print(f"    ran {count:>10.0f}×: {len(members):5} instructions, {share:5.1%} of executed; "
              + ", ".join(f"{k} {v}" for k, v in mix.most_common(10)))


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    name, insts = load(args[0])
    if "--lines" in args:
        a, b = (int(x) for x in args[args.index("--lines") + 1:][:2])
        for n, i in enumerate(insts[a:b], a):
            print(f"{n:5} {i['exec']:>10.0f} {i['samples']:>6.0f}  {i['src'][:90]}")
        return
    if "--top" in args:
        top(insts, int(args[args.index("--top") + 1]))
        return
    summary(name, insts)


def top(insts, n):
    samples = sum(i["samples"] for i in insts) or 1.0
    ranked = sorted(enumerate(insts), key=lambda p: -p[1]["samples"])[:n]
    for line, i in ranked:
        why = ", ".join(f"{k} {v / samples:.1%}" for k, v in collections.Counter(i["stalls"]).most_common(2) if v)
        print(f"{line:5} {i['samples'] / samples:6.1%} {i['exec']:>10.0f}  {i['src'][:70]:70}  {why}")


if __name__ == "__main__":
    main()
