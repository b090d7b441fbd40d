"""Matrix-vector GEMMs (one row or one column: a dense layer at batch 1, a
conv with one output channel or one output pixel) go through sgemv instead of
sgemm (src/_blas.pxd).  Every transpose combination, alpha/beta, a broadcast
C and stale NaNs in the output buffer are checked against numpy float64,
1e-4 relative to the magnitude of the sum."""
import itertools

import numpy as np
import pytest

import rlx_cpu

from conftest import check_parity, conv_nd


def _gemm_ref(a, b, c, alpha, beta, ta, tb):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    y = alpha * ((a64.T if ta else a64) @ (b64.T if tb else b64))
    return y + beta * c.astype(np.float64) if c is not None else y


@pytest.mark.parametrize("m, n, k", [(1, 1000, 257), (1, 7, 3), (513, 1, 300), (5, 1, 1), (1, 1, 64)])
@pytest.mark.parametrize("ta, tb", list(itertools.product([False, True], repeat=2)))
@pytest.mark.parametrize("threads", [1, 2])
def test_gemm_with_one_row_or_column(rng, m, n, k, ta, tb, threads):
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    c = rng.standard_normal((n,)).astype(np.float32)
    g = rlx_cpu.Graph()
    xa = g.input("a", a.shape)
    g.output(g.gemm(xa, g.constant(b), g.constant(c), alpha=0.5, beta=2.0, trans_a=ta, trans_b=tb))
    plan = rlx_cpu.compile(g, num_threads=threads)
    out = [np.full((m, n), np.nan, np.float32)]         # stale NaNs must not leak into the result
    plan.run_into({"a": a}, out)
    check_parity(out[0], _gemm_ref(a, b, c, 0.5, 2.0, ta, tb), f"gemm m={m} n={n} k={k} ta={ta} tb={tb}")


@pytest.mark.parametrize("batch", [1, 3])
def test_linear_at_batch_one_matches_numpy(rng, batch):
    x = rng.standard_normal((batch, 1280)).astype(np.float32)
    w = rng.standard_normal((1000, 1280)).astype(np.float32)
    bias = rng.standard_normal(1000).astype(np.float32)
    g = rlx_cpu.Graph()
    g.output(g.linear(g.input("x", x.shape), g.constant(w), g.constant(bias)))
    got = rlx_cpu.compile(g, num_threads=2).run({"x": x})[0]
    check_parity(got, x.astype(np.float64) @ w.T.astype(np.float64) + bias, "linear batch 1")


@pytest.mark.parametrize("c_out, spatial", [(1, 9), (8, 1), (1, 1)])
def test_conv_with_one_output_channel_or_pixel(rng, c_out, spatial):
    x = rng.standard_normal((2, 16, spatial, spatial)).astype(np.float32)
    w = rng.standard_normal((c_out, 16, 1, 1)).astype(np.float32)
    g = rlx_cpu.Graph()
    g.output(g.conv2d(g.input("x", x.shape), w))
    got = rlx_cpu.compile(g).run({"x": x})[0]
    check_parity(got, conv_nd(x, w), f"1x1 conv c_out={c_out} {spatial}x{spatial}")


# A GEMM with b transposed and at most GEMM_NT_MAX_M rows (a dense layer at a
# small batch) runs rlx_gemm_nt (src/rlx_gemm_nt.h), not sgemm: every row
# count around that limit, k below, at and off a multiple of 8, and column
# counts off a multiple of 4.
@pytest.mark.parametrize("m", [1, 2, 3, 8, 16, 17])
@pytest.mark.parametrize("n, k", [(1000, 1280), (5, 7), (13, 33), (4, 8), (3, 1)])
@pytest.mark.parametrize("threads", [1, 2])
def test_gemm_nt_of_a_few_rows(rng, m, n, k, threads):
    from rlx_cpu import _matmul
    assert _matmul.GEMM_NT_MAX_ROWS == 16
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((n, k)).astype(np.float32)
    c = rng.standard_normal((n,)).astype(np.float32)
    g = rlx_cpu.Graph()
    g.output(g.gemm(g.input("a", a.shape), g.constant(b), g.constant(c), alpha=0.5, beta=2.0, trans_b=True))
    plan = rlx_cpu.compile(g, num_threads=threads)
    out = [np.full((m, n), np.nan, np.float32)]
    plan.run_into({"a": a}, out)
    check_parity(out[0], _gemm_ref(a, b, c, 0.5, 2.0, False, True), f"gemm_nt m={m} n={n} k={k}")


GEMM_NT_SCRIPT = r"""
import io, sys, numpy as np, rlx_cpu
rng = np.random.default_rng(3)
outs = []
for m, n, k in [(1, 1000, 1280), (8, 1001, 2049), (3, 7, 5), (16, 64, 24)]:
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((n, k)).astype(np.float32)
    g = rlx_cpu.Graph()
    g.output(g.linear(g.input("a", a.shape), g.constant(b)))
    for threads in (1, 2):
        outs.append(rlx_cpu.compile(g, num_threads=threads).run({"a": a})[0].ravel())
buf = io.BytesIO()
np.save(buf, np.concatenate(outs))
sys.stdout.buffer.write(buf.getvalue())
"""


def test_gemm_nt_gives_the_same_bits_on_every_simd_level_and_thread_count():
    from conftest import script_array
    base = script_array(GEMM_NT_SCRIPT, RLX_SIMD="baseline")
    here = script_array(GEMM_NT_SCRIPT)
    assert base.dtype == np.float32 and base.size == 2 * (1000 + 8 * 1001 + 21 + 16 * 64)
    assert np.array_equal(base, here)
    # the 1- and 2-thread results of each case, side by side
    sizes = [1000, 8 * 1001, 21, 16 * 64]
    at = 0
    for s in sizes:
        assert np.array_equal(here[at:at + s], here[at + s:at + 2 * s]), s
        at += 2 * s
