"""Algorithm choice by measurement: ``compile(graph, tune=True)``.

Auto picks each conv's algorithm from named predicates and a cost model
(rlx_cpu/algorithms.py).  Tuning instead times every eligible candidate once
per conv shape on this machine, at the plan's thread count, and keeps the
fastest; the plan then carries the choice in its thunks (a pickled plan keeps
it) and lists the timings in ``plan.tuning`` and ``print(plan)``.

A candidate is an algorithm plus, for the two GEMM paths (im2col and the
1x1 GEMM), which GEMM runs it: sgemm or the conv microkernel.  Each is
compiled as a one-conv plan of the same geometry (the conv's own weight when
it is a constant, so a weight-dependent cost like a sparse weight would show;
a plan input otherwise, so a per-run Winograd filter transform is counted)
and timed round-robin with the others on the launches alone, one untimed
call first.  The reference loops are never a candidate.

Choices are cached per process by (geometry, weight constant or not, bias,
threads, flags, SIMD level), so compiling the same shapes again does not
time them again; ``clear_cache()`` forgets them.
"""
import dataclasses
import statistics
import time

import numpy as np

from . import _conv2d
from .algorithms import ConvAlgorithm, select_conv_algorithm

# Timed rounds per shape: at least MIN_ROUNDS, then more until every
# candidate has had about BUDGET_S of runs or MAX_ROUNDS is reached.  Five
# rounds keep one stray slow sample from deciding (the median is taken); the
# budget bounds a large conv's tuning to well under a second per candidate.
MIN_ROUNDS = 5
MAX_ROUNDS = 15
BUDGET_S = 0.05

_FORCEABLE = ("im2col", "direct", "winograd", "winograd_f4")
_cache = {}


def clear_cache():
    """Forget every tuned choice of this process."""
    _cache.clear()


def conv_candidates(dims, flags):
    """[(label, forced name, algorithm, flags)] of every algorithm a conv of these dims can
    run (forced selection accepts it), the GEMM paths once on sgemm and once
    on the microkernel where the microkernel exists for this CPU."""
    out = []
    seen = set()
    skip = {"direct"} if flags.direct is False else set()
    if flags.winograd is False:      # RLX_WINOGRAD=0: never Winograd without forcing it
        skip |= {"winograd", "winograd_f4"}
    for name in _FORCEABLE:
        if name in skip:
            continue
        try:
            algo = select_conv_algorithm(dims, name, flags)
        except ValueError:
            continue
        if algo in seen:
            continue
        seen.add(algo)
        if algo in (ConvAlgorithm.IM2COL, ConvAlgorithm.GEMM_1X1):
            if flags.microkernel is not None:      # RLX_CONV_MICROKERNEL set: only that GEMM
                variants = [("microkernel" if flags.microkernel else "sgemm", flags.microkernel)]
            else:
                variants = [("sgemm", False)]
                if _conv2d.simd_level() >= 1:
                    variants.append(("microkernel", True))
            for tag, mk in variants:
                f = dataclasses.replace(flags, microkernel=mk)
                if mk and algo == ConvAlgorithm.IM2COL and flags.implicit is None:
                    # the microkernel with and without the patch matrix, and
                    # without it reading X packed or in place
                    fi = dataclasses.replace(f, implicit=True)
                    if flags.implicit_direct is None:
                        out.append((f"{algo.label}+implicit", name, algo, dataclasses.replace(fi, implicit_direct=False)))
                        out.append((f"{algo.label}+direct", name, algo, dataclasses.replace(fi, implicit_direct=True)))
                    else:
                        out.append((f"{algo.label}+implicit", name, algo, fi))
                    f = dataclasses.replace(f, implicit=False)
                out.append((f"{algo.label}+{tag}", name, algo, f))
        else:
            out.append((algo.label, name, algo, flags))
    return out


def _one_conv_plan(dims, weight, weight_constant, has_bias, algo_label, flags, nthreads):
    """A compiled one-conv plan of `dims` forced to `algo_label` under `flags`,
    and its feeds."""
    from .compiler import compile_with_flags
    from .ir import Graph

    d = dims
    rng = np.random.default_rng(0)
    x = rng.standard_normal((d.n, d.c_in, d.h, d.w)).astype(np.float32)
    g = Graph()
    xi = g.input("x", x.shape)
    feeds = {"x": x}
    if weight_constant:
        wv = g.constant(weight, "w")
    else:
        wv = g.input("w", weight.shape)
        feeds["w"] = weight
    b = g.constant(rng.standard_normal(d.c_out).astype(np.float32), "b") if has_bias else None
    # The end padding that gives the same output size (the kernels only see
    # begin padding and the output size).
    ends = [max(0, (o - 1) * s + dl * (k - 1) + 1 - i - p)
            for o, s, dl, k, i, p in ((d.h_out, d.sh, d.dh, d.kh, d.h, d.ph), (d.w_out, d.sw, d.dw, d.kw, d.w, d.pw))]
    y = g.conv2d(xi, wv, b, stride=(d.sh, d.sw), padding=((d.ph, ends[0]), (d.pw, ends[1])),
                 dilation=(d.dh, d.dw), groups=d.groups)
    g.output(y)
    plan = compile_with_flags(g, flags, conv_algorithm=algo_label, num_threads=nthreads, passes=False,
                              adaptive_threads=False)
    return plan, feeds


def _time_candidates(runs):
    """{label: median ms} of the zero-argument callables in `runs`, timed
    round-robin after one untimed call each."""
    for fn in runs.values():
        fn()
    samples = {k: [] for k in runs}
    t_start = time.perf_counter()
    rounds = 0
    while rounds < MIN_ROUNDS or (rounds < MAX_ROUNDS and
                                  time.perf_counter() - t_start < BUDGET_S * len(runs)):
        for k, fn in runs.items():
            t0 = time.perf_counter()
            fn()
            samples[k].append(time.perf_counter() - t0)
        rounds += 1
    return {k: 1e3 * statistics.median(v) for k, v in samples.items()}


def tune_conv(dims, weight, weight_constant, has_bias, flags, nthreads):
    """(algorithm, flags, {label: ms}, chosen label) for one conv: the fastest
    candidate measured now, or the cached choice for the same key."""
    from ._runtime import run_launches

    key = (dims.as_tuple(), bool(weight_constant), bool(has_bias), int(nthreads), flags,
           _conv2d.simd_level())
    hit = _cache.get(key)
    if hit is not None:
        return hit
    if weight is None:
        shape = (dims.c_out, dims.c_in // dims.groups, dims.kh, dims.kw)
        weight = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    weight = np.ascontiguousarray(weight, dtype=np.float32).reshape(
        dims.c_out, dims.c_in // dims.groups, dims.kh, dims.kw)
    cands = conv_candidates(dims, flags)
    runs, chosen_by = {}, {}
    keep = []     # the contexts' arenas stay alive while timed
    for label, name, algo, f in cands:
        plan, feeds = _one_conv_plan(dims, weight, weight_constant, has_bias, name, f, nthreads)
        ctx = plan.new_context()
        ctx.load(feeds)
        keep.append((plan, ctx))
        runs[label] = (lambda launches=ctx.launches: run_launches(launches, nthreads))
        chosen_by[label] = (algo, f)
    ms = _time_candidates(runs)
    best = min(ms, key=ms.get)
    algo, f = chosen_by[best]
    result = (algo, f, ms, best)
    _cache[key] = result
    return result


def describe(tuning):
    """Lines for print(plan): per tuned conv, the choice and every timing."""
    lines = []
    for name, (best, ms) in tuning.items():
        timings = ", ".join(f"{k} {v:.3f}" for k, v in sorted(ms.items(), key=lambda kv: kv[1]))
        lines.append(f"    {name}: {best} ({timings} ms)")
    return lines

