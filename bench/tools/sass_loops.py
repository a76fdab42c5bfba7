#!/usr/bin/env python3
"""Static SASS of a kernel's loops, without a GPU: each backward branch's body with its length
and its barriers, tensor-core, global-load, shared-load and shuffle instructions. The
verification's code paths (value tile × record tier) each have one head loop, so their bodies
compare tilings: issued instructions per batch row ≈ programs × warps × body length × heads.

Usage: sass_loops.py KERNEL.cubin
Needs `cuobjdump` and `nvdisasm` on PATH; neither is in the `nvidia-cuda-nvcc` wheel, but both
are on PyPI: `pip download --no-deps nvidia-cuda-cuobjdump==13.2.51 nvidia-cuda-nvdisasm`, then
unzip the wheels (`nvidia/cu13/bin/`). A cubin: `replay ptx KERNEL --set ... > k.ptx && ptxas
-arch sm_90a k.ptx -o k.cubin`.
"""
import re
import subprocess
import sys

COUNTED = {
    "bars": lambda op: op.startswith("BAR"),
    "hmma": lambda op: op.startswith("HMMA"),
    "ldg": lambda op: op.startswith("LDG"),
    "lds": lambda op: op.startswith("LDS"),
    "shfl": lambda op: op.startswith("SHFL"),
}


def instructions(cubin):
    """(address, text) of every SASS instruction, the predicate stripped."""
    sass = subprocess.run(["cuobjdump", "-sass", cubin], check=True, capture_output=True, text=True).stdout
    out = []
    for line in sass.splitlines():
        m = re.match(r"\s+/\*([0-9a-f]+)\*/\s+(?:@!?U?P\w+\s+)?(.*?)\s*;", line)
        if m:
            out.append((int(m.group(1), 16), m.group(2)))
    return out


def loop_bodies(ins):
    """(first, last) index of each backward branch's body in `ins`, a list of (address, text)."""
    index = {a: i for i, (a, _) in enumerate(ins)}
    found = []
    for i, (addr, text) in enumerate(ins):
        m = re.search(r"BRA\s+0x([0-9a-f]+)", text)
        target = int(m.group(1), 16) if m else None
        if target is not None and target < addr and target in index:
            found.append((index[target], i))
    return found


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    ins = instructions(sys.argv[1])
    print(f"{len(ins)} instructions")
    for first, last in loop_bodies(ins):
        body = [t for _, t in ins[first : last + 1]]
        counts = " ".join(f"{k} {sum(f(t) for t in body)}" for k, f in COUNTED.items())
        print(f"loop {ins[first][0]:#x}..{ins[last][0]:#x}: {len(body)} instructions, {counts}")


if __name__ == "__main__":
    main()
