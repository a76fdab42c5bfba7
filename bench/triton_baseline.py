#!/usr/bin/env python3
"""Triton baseline for the gallery kernels (our own Triton code), timed like `replay bench`.

Prints one JSON object: the device-to-device copy bandwidth measured in this run, and for vector
add, row softmax and RMSNorm at large sizes the median time (CUDA events via do_bench), achieved
GB/s, the fraction of the copy bandwidth, and Triton's cold compile time (fresh cache).

Usage: python3 bench/triton_baseline.py [--json FILE]
"""
import argparse
import json
import os
import tempfile
import time

os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="triton-cold-"))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def vector_add(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


@triton.jit
def softmax(x, out, n_cols, stride, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    base = tl.program_id(0) * stride
    v = tl.load(x + base + cols, mask=mask, other=-float("inf"))
    e = tl.exp(v - tl.max(v, 0))
    tl.store(out + base + cols, e / tl.sum(e, 0), mask=mask)


@triton.jit
def rmsnorm(x, w, out, n_cols, stride, eps, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    base = tl.program_id(0) * stride
    xv = tl.load(x + base + cols, mask=mask, other=0.0)
    r = tl.rsqrt(tl.sum(xv * xv, 0) / n_cols + eps)
    wv = tl.load(w + cols, mask=mask, other=0.0)
    tl.store(out + base + cols, xv * r * wv, mask=mask)


def median_ms(fn):
    return triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median")


def copy_bandwidth():
    n = 1 << 29  # 2 GiB of f32 per buffer
    a = torch.randn(n, device="cuda")
    b = torch.empty_like(a)
    ms = median_ms(lambda: b.copy_(a))
    return 2 * a.numel() * 4 / ms / 1e6  # GB/s, bytes read + written


def cold_compile(launch):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    launch()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.manual_seed(0)
    results = {"device": torch.cuda.get_device_name(), "triton": triton.__version__}
    results["copy_gbps"] = copy_bandwidth()
    kernels = {}

    n = 1 << 28
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.full_like(x, float("nan"))
    grid = (triton.cdiv(n, 1024),)
    run = lambda: vector_add[grid](x, y, out, n, BLOCK=1024, num_warps=4)  # noqa: E731
    compile_ms = cold_compile(run)
    torch.testing.assert_close(out, x + y)
    ms = median_ms(run)
    kernels["vector_add"] = dict(ms=ms, bytes=3 * n * 4, compile_ms=compile_ms)

    rows, cols = 1 << 16, 4096
    xs = torch.randn(rows, cols, device="cuda")
    outs = torch.full_like(xs, float("nan"))
    run = lambda: softmax[(rows,)](xs, outs, cols, cols, BLOCK=4096, num_warps=8)  # noqa: E731
    compile_ms = cold_compile(run)
    torch.testing.assert_close(outs, torch.softmax(xs, 1))
    ms = median_ms(run)
    kernels["softmax"] = dict(ms=ms, bytes=2 * rows * cols * 4, compile_ms=compile_ms)

    w = torch.randn(cols, device="cuda")
    outr = torch.full_like(xs, float("nan"))
    run = lambda: rmsnorm[(rows,)](xs, w, outr, cols, cols, 1e-6, BLOCK=4096, num_warps=8)  # noqa: E731
    compile_ms = cold_compile(run)
    ref = xs * torch.rsqrt((xs * xs).mean(1, keepdim=True) + 1e-6) * w
    torch.testing.assert_close(outr, ref, rtol=1e-4, atol=1e-4)
    ms = median_ms(run)
    kernels["rmsnorm"] = dict(ms=ms, bytes=2 * rows * cols * 4 + cols * 4, compile_ms=compile_ms)

    for k in kernels.values():
        k["gbps"] = k["bytes"] / k["ms"] / 1e6
        k["frac_copy"] = k["gbps"] / results["copy_gbps"]
    results["kernels"] = kernels
    text = json.dumps(results, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
