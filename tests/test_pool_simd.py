"""The row-separable pool kernel (src/rlx_pool.h: max without indices and
average, w dilation 1), the max / avg pool backward kernels (rlx_mpb_plane,
rlx_apb_plane) and the global pool partials (rlx_gmax, rlx_gsum) in
both SIMD variants: parity with the float64 reference on shapes long enough
for the 8-wide blocks and their tails, NaN / -inf / signed-zero / tied data,
thread-count invariance, and RLX_SIMD=baseline giving the same bits as the
variant this CPU selects."""
import os
import subprocess
import sys

import numpy as np
import pytest

import rlx_cpu
from rlx_cpu import _pool
import reference as ref

# (input shape, kernel, stride, pads_begin, pads_end, ceil_mode); output widths
# 19-40 cover full AVX2 blocks and a scalar tail.
CASES = [
    ((2, 3, 10, 38), 2, 2, 0, 0, False),                  # k2s2
    ((1, 2, 11, 39), 3, 2, 1, 1, True),                   # k3s2p1 ceil
    ((1, 3, 7, 37), 3, 1, 1, 1, False),                   # k3s1p1
    ((2, 2, 9, 45), (2, 5), (1, 3), (1, 2), (0, 2), True),
    ((1, 2, 8, 41), (3, 4), 2, (1, 2), (1, 1), True),     # even kw, stride 2
    ((2, 3, 77), 4, 2, 1, 1, True),                       # 1-D
    ((1, 2, 5, 6, 40), 2, 2, 0, 0, False),                # 3-D
    ((1, 2, 5, 7, 33), 3, 2, 1, 1, True),
    ((2, 2, 5, 7), 2, 2, 0, 0, False),                    # k2s2 direct kernel: one masked block only
    ((1, 3, 6, 39), 2, 2, 0, 0, True),                    # k2s2 ceil, odd width: the last window clipped
    ((1, 2, 4, 6, 66), 2, 2, 0, 0, False),                # 3-D k2s2: a 32-output block and a tail of 1
    ((2, 3, 67), 2, 2, 0, 0, False),                      # 1-D k2s2
    ((1, 2, 5, 45), 3, 1, 0, 0, False),                   # stride 1 without padding
    # window 3, stride 1, w padding 1 (rlx_max_k3s1_avx2: column maxima shifted across blocks, no buffer)
    ((2, 2, 6, 40), 3, 1, 1, (1, 0), False),              # whole blocks only, OW = W - 1
    ((1, 2, 5, 6), 3, 1, 1, 1, False),                    # one masked block
    ((1, 2, 4, 5, 19), 3, 1, 1, 1, True),                 # 3-D, a masked tail of 3
    # window 3, stride 2, w padding 1 (rlx_max_k3s2_avx2: even / odd column maxima, the odd shifted a lane)
    ((1, 2, 9, 32), 3, 2, 1, 1, False),                   # whole blocks only, OW = 16
    ((2, 2, 5, 5), 3, 2, 1, 1, False),                    # one masked block, OW = 3
    ((1, 2, 6, 47), 3, 2, 1, 1, True),                    # the last window's third column is padding
    ((1, 2, 7, 49), 3, 2, 1, 0, True),                    # ceil, no end padding: the last window clipped
    # one input row per line (rlx_pool.h rlx_row1_avx2: blocks of 8 read x in place, the ends one by one)
    ((2, 3, 83), 3, 1, 1, 1, False),                      # 1-D stride 1
    ((1, 2, 91), 5, 2, 2, 1, True),                       # 1-D kw 5: three deinterleaved loads per block
    ((1, 2, 7, 43), (1, 3), (1, 2), 0, (0, 1), True),     # 2-D, windows one row high
    ((1, 2, 6, 45), (2, 3), 2, 1, 1, True),               # first / last line: one row, two counted
]

# 3x3 windows, stride 2 along w, w padding 1, 2-D (rlx_pool.h, the 2-D path
# of rlx_pool_lines_body: rows straight from (plane, oh); averages summed in
# registers, two lines at a time where both have 3 rows and the same count):
# (input shape, kernel, stride, pads_begin, pads_end, ceil_mode)
AVG3_CASES = [
    ((2, 3, 13, 40), 3, 2, 1, 1, True),                   # OW = 21: a last block of 1 past W, 2-row last line
    ((1, 2, 12, 43), 3, 2, (0, 1), (0, 1), False),        # no h padding: pairs from the first line
    ((1, 2, 10, 38), 3, (1, 2), 1, 1, False),             # stride 1 along h: no pairs
    ((1, 3, 16, 34), 3, 2, (2, 1), (2, 1), True),         # h padding 2: a first line of one row
    ((1, 1, 9, 6), 3, 2, 1, 1, True),                     # one masked block, first and last at once
    ((1, 2, 11, 45), 3, 2, 1, 0, True),                   # ceil, no end padding: the last window clipped
    ((1, 1, 9, 9), 3, 2, 1, 2, True),                     # end padding 2
    ((2, 2, 14, 29), 3, 2, 1, 1, False),                  # tails of 2 and 3 outputs across the cases
    ((1, 2, 15, 27), 3, 2, 1, 1, True),
]


def _avg3_data(shape, seed):
    """Real values, -0.0 in the first and last column of every row (the
    padding adds +0.0 to them), and columns whose sums cancel, so that
    another order of the adds gives other bits: column 10 runs 1e20, -1e20,
    x down the rows (the row order), columns 7 and 8 hold 1e20 and -1e20
    (the window of output 4 sums columns 7, 8, 9 in that order)."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 1000 + 3.25).astype(np.float32)
    x[..., 0] = -0.0
    x[..., -1] = -0.0
    x.reshape(-1)[::7] *= np.float32(1e-3)
    if shape[-1] > 11:
        x[..., 0::3, 10] = 1e20
        x[..., 1::3, 10] = -1e20
        x[..., 7] = 1e20
        x[..., 8] = -1e20
    return x


@pytest.mark.parametrize("case", range(len(AVG3_CASES)))
def test_avg3_stride2_lines_match_reference(case):
    shape, k, s, pb, pe, ceil = AVG3_CASES[case]
    x = _avg3_data(shape, 500 + case)
    xs = _x(shape, 600 + case)                                # max: NaN, -inf, -0.0, ties
    plan = rlx_cpu.compile(_graph(shape, k, s, pb, pe, ceil), num_threads=2)
    _, a_in, a_ex, a_div = plan.run({"x": x})
    assert ref.rel_error(a_in, ref.avg_pool_nd(x, k, s, pb, pe, 1, ceil, True)) <= 1e-6
    assert ref.rel_error(a_ex, ref.avg_pool_nd(x, k, s, pb, pe, 1, ceil, False)) <= 1e-6
    assert ref.rel_error(a_div, ref.avg_pool_nd(x, k, s, pb, pe, 1, ceil, False, divisor_override=5)) <= 1e-6
    want, _ = ref.max_pool_nd(xs, k, s, pb, pe, 1, ceil)
    np.testing.assert_array_equal(plan.run({"x": xs})[0], want.astype(np.float32))


# Lines too long for the row-separable kernel's buffer (chunks of W_CHUNK
# outputs, rlx_pool_row1): strides 1 and 2 in blocks of 8, stride 3 one by one
LONG_CASES = [
    ((1, 2, 20011), 3, 2, 1, 1, True),
    ((1, 1, 16411), 4, 1, 2, 1, False),
    ((1, 1, 18001), 3, 3, 1, 1, True),
]

# max pool backward: (input shape, kernel, stride, pads_begin, pads_end, dilation, ceil_mode)
BWD_CASES = [
    ((2, 3, 12, 44), 2, 2, 0, 0, 1, False),                # k2s2, 22 outputs: blocks + overlapped tail
    ((1, 2, 9, 41), 3, 2, 1, 1, 1, True),                  # k3s2p1 ceil, overlapping windows
    ((1, 2, 7, 37), 3, 1, 1, 1, 1, False),                 # k3s1p1
    ((1, 2, 8, 50), (2, 3), (2, 3), (0, 1), (1, 1), 1, True),   # stride 3: portable chunk loop
    ((1, 2, 9, 46), 3, 2, 1, 1, (1, 2), False),            # w dilation 2
    ((2, 2, 70), 4, 2, 1, 1, 1, True),                     # 1-D
    ((1, 1, 5, 41), 3, 2, 0, 0, 1, False),                 # last window ends the buffer: loads stay inside
    # windows that never overlap (src/rlx_pool_bwd.h: each dx element written once)
    ((2, 3, 11, 37), 2, 2, 0, 0, 1, True),                 # k2s2 ceil: last row / column alone
    ((2, 3, 11, 37), 2, 2, 0, 0, 1, False),                # k2s2 floor: last row / column uncovered
    ((1, 2, 9, 39), 2, 2, 0, 1, 1, False),                 # k2s2, end padding cuts the last windows
    ((1, 1, 16, 64), 2, 2, 0, 0, 1, False),                # batch 1, one plane: bands of rows
    ((1, 1, 5, 40), 2, 2, 0, 0, 1, True),                  # ceil with an odd row count, few rows
    ((2, 2, 70), 2, 2, 0, 0, 1, True),                     # 1-D k2s2
    ((1, 2, 10, 42), 2, 2, 1, 1, 1, False),                # k2s2 with padding (avg: the general line)
    ((1, 2, 9, 40), (2, 3), 3, (1, 0), (0, 1), 1, True),   # stride > window: zero gaps
    ((1, 2, 12, 40), 2, 3, 0, 0, (2, 2), False),           # dilated, still no overlap
    # window 3 stride 2 (src/rlx_pool_bwd.h rlx_mpb33_band: winners of 8 windows, dx rows written once)
    ((1, 3, 17, 35), 3, 2, 1, 1, 1, True),                 # p1 ceil, odd width: pair blocks + column tail
    ((2, 2, 16, 48), 3, 2, 0, 0, 1, False),                # p0 floor: last row / column uncovered
    ((1, 2, 13, 40), 3, 2, (1, 0), (1, 0), 1, False),      # padding on h only
    ((1, 2, 12, 33), 3, 2, (0, 1), (0, 1), 1, True),       # padding on w only, ceil
    ((1, 1, 30, 64), 3, 2, 1, 1, 1, False),                # batch 1, one plane: bands of rows
    ((2, 2, 6, 11), 3, 2, 1, 1, 1, True),                  # fewer than 8 outputs, narrow rows
]


# max pool with indices on lines of >= 8 outputs (src/rlx_pool_bwd.h: rows
# buffered with -inf padding, blocks of 8; lines holding a NaN take the
# NaN-aware blocks): (input shape, kernel, stride, pads_begin, pads_end, ceil_mode)
IDX_CASES = [
    ((2, 3, 9, 40), 3, 2, 1, 1, True),                     # k3s2p1 ceil
    ((1, 2, 7, 37), 3, 1, 1, 1, False),                    # k3s1p1
    ((2, 2, 8, 45), (2, 3), (1, 2), (1, 1), (0, 1), True),
    ((1, 2, 6, 50), 2, 2, 0, 0, False),                    # k2s2
    ((1, 2, 5, 41), (3, 5), 2, (1, 2), (1, 2), True),      # kw 5, w padding 2
    ((1, 2, 1100), 3, 2, 1, 1, True),                      # 1-D: line chunks of W_CHUNK outputs
    ((1, 1, 2, 1030), 3, 1, 1, 1, False),                  # last chunk of 6 outputs: the general line
    ((1, 2, 4, 6, 40), 3, 2, 1, 1, False),                 # 3-D
    # window 2 stride 2 along w, no w padding, 2*OW <= W: blocks read x in place
    ((2, 3, 6, 41), 2, 2, 0, 0, False),                    # odd width: the last column unread
    ((1, 2, 4, 6, 38), 2, 2, 0, 0, False),                 # 3-D: rows over depth and height
    ((2, 3, 70), 2, 2, 0, 0, True),                        # 1-D, ceil mode that adds no window
    ((1, 2, 5, 33), (1, 2), (1, 2), 0, 0, False),          # one row per window
]


def _idx_data(shape, seed):
    """Ties, -inf runs (all -inf windows) and -0; NaN in plane 0 only, so
    other planes' lines take the NaN-free blocks."""
    x = _x(shape, seed)
    rest = x[1:, :] if shape[0] > 1 else x[:, 1:]
    np.nan_to_num(rest, copy=False, nan=2.0)
    flat = x.reshape(-1)
    flat[flat.size // 2: flat.size // 2 + 7] = -np.inf
    return x


def _idx_plan(case, num_threads, layout="plane"):
    shape, k, s, pb, pe, ceil = case
    nsp = len(shape) - 2
    pads = ((pb,) * nsp if np.isscalar(pb) else tuple(pb)) + ((pe,) * nsp if np.isscalar(pe) else tuple(pe))
    g = rlx_cpu.Graph()
    x = g.input("x", shape)
    g.output(*g.max_pool(x, k, s, pads, 1, ceil, return_indices=True, indices_layout=layout))
    return rlx_cpu.compile(g, num_threads=num_threads)


@pytest.mark.parametrize("layout", ["plane", "onnx"])
@pytest.mark.parametrize("case", range(len(IDX_CASES)))
def test_max_pool_indices_wide_lines_match_reference(case, layout):
    shape, k, s, pb, pe, ceil = IDX_CASES[case]
    x = _idx_data(shape, 300 + case)
    want, want_idx = ref.max_pool_nd(x, k, s, pb, pe, 1, ceil)
    if layout == "onnx":
        planes = np.arange(shape[0] * shape[1]).reshape(shape[:2] + (1,) * (len(shape) - 2))
        want_idx = want_idx + planes * int(np.prod(shape[2:]))
    for threads in (1, 2):
        y, idx = _idx_plan(IDX_CASES[case], threads, layout).run({"x": x})
        np.testing.assert_array_equal(y, want.astype(np.float32))
        np.testing.assert_array_equal(idx, want_idx)


def _x(shape, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 4, size=shape).astype(np.float32)        # many ties
    flat = x.reshape(-1)
    pos = rng.choice(flat.size, size=max(4, flat.size // 50), replace=False)
    flat[pos[0::3]] = np.nan
    flat[pos[1::3]] = -np.inf
    flat[pos[2::3]] = -0.0
    return x


def _graph(shape, k, s, pb, pe, ceil):
    nsp = len(shape) - 2
    pads = ((pb,) * nsp if np.isscalar(pb) else tuple(pb)) + ((pe,) * nsp if np.isscalar(pe) else tuple(pe))
    g = rlx_cpu.Graph()
    x = g.input("x", shape)
    g.output(g.max_pool(x, k, s, pads, 1, ceil),
             g.avg_pool(x, k, s, pads, ceil, True),
             g.avg_pool(x, k, s, pads, ceil, False),
             g.avg_pool(x, k, s, pads, ceil, False, divisor_override=5))
    return g


# global pools: planes shorter than the 32 max lanes, with a lane tail, and
# longer than one 4096-float partial (rlx_cpu._pool.GLOBAL_CHUNK) with a tail
GLOBAL_CASES = [(3, 4, 5, 5), (2, 3, 70, 71), (1, 2, 5, 7, 9), (2, 3, 33), (1, 2, 128, 64),
                (1, 3, 9, 9)]            # an odd number of planes: the average's last plane alone


# Plane lengths around the global average's float blocks (512 floats, 32
# lanes, a masked tail of 1-31) and its 4096-float partials.
SUM_LENGTHS = [1, 7, 31, 32, 33, 100, 196, 511, 512, 513, 1100, 4096 + 600]


def _sum_planes(length, seed):
    """Four planes: plain; offset and large; one with FLT_MAX at offsets 0, 16
    and 32 of its last block (where they exist: the float lanes' fold and one
    lane overflow where the double sum does not); one with +inf."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, 4, length)).astype(np.float32)
    x[0, 1] = x[0, 1] * 1000 + 5
    start = (length - 1) // 512 * 512
    x[0, 2, [i for i in (start, start + 16, start + 32) if i < length]] = np.finfo(np.float32).max
    x[0, 3, length // 2] = np.inf
    return x


def _global_graph(shape):
    g = rlx_cpu.Graph()
    x = g.input("x", shape)
    g.output(g.global_max_pool(x), g.global_avg_pool(x))
    return g


def _run_all(num_threads):
    out = {}
    for i, shape in enumerate(GLOBAL_CASES):
        x = _x(shape, 200 + i)
        plan = rlx_cpu.compile(_global_graph(shape), num_threads=num_threads)
        out[f"{i}_gmax"] = plan.run({"x": x})[0]
        out[f"{i}_gavg"] = plan.run({"x": np.nan_to_num(x, nan=0.5, neginf=-2.5)})[1]
    for length in SUM_LENGTHS[2::3]:
        x = _sum_planes(length, 7)
        out[f"sum{length}_gavg"] = rlx_cpu.compile(_global_graph(x.shape), num_threads=num_threads).run({"x": x})[1]
    for i, (shape, k, s, pb, pe, ceil) in enumerate(CASES):
        x = _x(shape, i)
        xa = np.nan_to_num(x, nan=0.5, neginf=-2.5)               # finite data for the averages
        plan = rlx_cpu.compile(_graph(shape, k, s, pb, pe, ceil), num_threads=num_threads)
        out[f"{i}_max"] = plan.run({"x": x})[0]
        for j, y in enumerate(plan.run({"x": xa})[1:]):
            out[f"{i}_avg{j}"] = y
    for i, (shape, k, s, pb, pe, ceil) in enumerate(AVG3_CASES):
        plan = rlx_cpu.compile(_graph(shape, k, s, pb, pe, ceil), num_threads=num_threads)
        out[f"{i}_a3max"] = plan.run({"x": _x(shape, 600 + i)})[0]
        for j, y in enumerate(plan.run({"x": _avg3_data(shape, 500 + i)})[1:]):
            out[f"{i}_a3avg{j}"] = y
    for i, (shape, k, s, pb, pe, ceil) in enumerate(LONG_CASES):
        x = _x(shape, 400 + i)
        plan = rlx_cpu.compile(_graph(shape, k, s, pb, pe, ceil), num_threads=num_threads)
        out[f"{i}_lmax"] = plan.run({"x": x})[0]
        for j, y in enumerate(plan.run({"x": np.nan_to_num(x, nan=0.5, neginf=-2.5)})[1:]):
            out[f"{i}_lavg{j}"] = y
    for i, case in enumerate(IDX_CASES):
        y, idx = _idx_plan(case, num_threads).run({"x": _idx_data(case[0], 300 + i)})
        out[f"{i}_idxy"], out[f"{i}_idx"] = y, idx
    for i, case in enumerate(APG_CASES):
        dy = _apg_dy(case, 40 + i, True)
        for j, (cip, div) in enumerate(AVG_BWD_MODES):
            out[f"{i}_apg{j}"] = _apg_plan(case, cip, div, num_threads).run({"dy": dy})[0]
    for i, case in enumerate(BWD_CASES):
        x, dy, plan = _bwd_plan(case, num_threads)
        out[f"{i}_bwd"] = plan.run({"x": x, "dy": dy})[0]
        for j, (cip, div) in enumerate(AVG_BWD_MODES):
            dy, plan = _avg_bwd_plan(case, cip, div, num_threads)
            out[f"{i}_avgbwd{j}"] = plan.run({"dy": dy})[0]
    return out


AVG_BWD_MODES = [(True, None), (False, None), (False, 3)]


def _avg_bwd_plan(case, cip, div, num_threads):
    shape, k, s, pb, pe, d, ceil = case
    nsp = len(shape) - 2
    out_sp = ref.avg_pool_nd(np.zeros((1, 1) + shape[2:]), k, s, pb, pe, d, ceil).shape[2:]
    dy = np.random.default_rng(6).standard_normal(shape[:2] + out_sp).astype(np.float32)
    pads = tuple(zip((pb,) * nsp if np.isscalar(pb) else pb, (pe,) * nsp if np.isscalar(pe) else pe))
    g = rlx_cpu.Graph()
    dyi = g.input("dy", dy.shape)
    g.output(getattr(g, f"avg_pool{nsp}d_backward")(dyi, shape, k, s, pads, ceil, cip, div, dilation=d))
    return dy, rlx_cpu.compile(g, num_threads=num_threads)


@pytest.mark.parametrize("mode", range(len(AVG_BWD_MODES)))
@pytest.mark.parametrize("case", range(len(BWD_CASES)))
def test_avg_pool_backward_matches_reference(case, mode):
    shape, k, s, pb, pe, d, ceil = BWD_CASES[case]
    cip, div = AVG_BWD_MODES[mode]
    dy, plan = _avg_bwd_plan(BWD_CASES[case], cip, div, 2)
    want = ref.avg_pool_nd_backward(dy, shape, k, s, pb, pe, d, ceil, cip, div)
    assert ref.rel_error(plan.run({"dy": dy})[0], want) <= 1e-6


# average pool backward by gather (src/rlx_pool_bwd.h rlx_apg_plane: overlapping windows, h dilation 1, dx
# columns in chunks of RLX_APG_CH = 1024): (input shape, kernel, stride, pads_begin, pads_end, dilation,
# ceil_mode)
APG_CASES = [
    ((1, 2, 4100), 3, 2, 1, 1, 1, False),                  # 1-D k3s2p1 longer than 4096: five chunks
    ((1, 2, 4097), 3, 2, 1, 1, 1, True),                   # ceil: the last window alone at the edge
    ((1, 1, 2500), 3, 1, 1, 1, 1, False),                  # stride 1: tap-major lines
    ((1, 1, 2100), 5, 2, 2, 2, 1, True),                   # k5: a chunk's outputs reach back two
    ((1, 1, 2100), 3, 2, 0, 0, 2, True),                   # w dilation 2
    ((1, 1, 3, 2100), 3, 2, 1, 1, 1, True),                # 2-D, odd w padding: chunks start on odd columns
    ((1, 1, 4, 2050), 3, 2, (1, 0), (1, 1), 1, True),      # even w padding, chunk of 2 columns
    ((1, 2, 13, 19), (5, 3), (1, 2), (2, 1), (2, 1), 1, True),   # five output rows per dx row
    ((1, 2, 12, 17), (2, 3), (3, 2), 0, 0, 1, False),      # rows between windows along h: zero rows
    ((2, 3, 15, 16), 3, 2, 1, 1, 1, True),
]


def _apg_dy(case, seed, special):
    shape, k, s, pb, pe, d, ceil = case
    out_sp = ref.avg_pool_nd(np.zeros((1, 1) + shape[2:]), k, s, pb, pe, d, ceil).shape[2:]
    rng = np.random.default_rng(seed)
    dy = rng.standard_normal(shape[:2] + out_sp).astype(np.float32)
    if special:                                    # NaN, +-inf and -0 gradients, a -0 run at each line start
        flat = dy.reshape(-1)
        pos = rng.choice(flat.size, size=max(4, flat.size // 50), replace=False)
        flat[pos[0::4]], flat[pos[1::4]], flat[pos[2::4]], flat[pos[3::4]] = np.nan, np.inf, -np.inf, -0.0
        dy[..., :3] = -0.0
    return dy


def _apg_plan(case, cip, div, num_threads):
    shape, k, s, pb, pe, d, ceil = case
    nsp = len(shape) - 2
    pads = tuple(zip((pb,) * nsp if np.isscalar(pb) else pb, (pe,) * nsp if np.isscalar(pe) else pe))
    out_sp = ref.avg_pool_nd(np.zeros((1, 1) + shape[2:]), k, s, pb, pe, d, ceil).shape[2:]
    g = rlx_cpu.Graph()
    dyi = g.input("dy", shape[:2] + out_sp)
    g.output(getattr(g, f"avg_pool{nsp}d_backward")(dyi, shape, k, s, pads, ceil, cip, div, dilation=d))
    return rlx_cpu.compile(g, num_threads=num_threads)


def _avg_bwd_scatter_f32(dy, shape, k, s, pb, pe, d, cip, div):
    """float32 dx in the scatter order the gather must reproduce bit for bit:
    per output row a line from +0, tap j (ascending) adding dy / divisor at
    every output, added to dx (from +0) at each in-bounds row, output rows
    ascending."""
    nsp = len(shape) - 2
    k, s, pb, pe, d = (ref._tuple(v, nsp) for v in (k, s, pb, pe, d))
    if nsp == 1:
        k, s, pb, pe, d = (1,) + k, (1,) + s, (0,) + pb, (0,) + pe, (1,) + d
    H, W = ((1,) + shape[2:]) if nsp == 1 else shape[2:]
    dy4 = dy.reshape(shape[:2] + (-1, dy.shape[-1]))
    OH, OW = dy4.shape[2:]
    dx = np.zeros(shape[:2] + (H, W), np.float32)

    def taps(start, dil, kk, lo, hi):
        return [j for j in range(kk) if lo <= start + j * dil < hi]
    lo_w, hi_w = (-pb[1], W + pe[1]) if cip else (0, W)
    cols = np.array([1 if div else len(taps(ow * s[1] - pb[1], d[1], k[1], lo_w, hi_w)) for ow in range(OW)])
    length = max((OW - 1) * s[1] + (k[1] - 1) * d[1] + 1, pb[1] + W)
    for oh in range(OH):
        hs = oh * s[0] - pb[0]
        rows = taps(hs, d[0], k[0], 0, H)
        if rows:
            n = div or len(taps(hs, d[0], k[0], -pb[0], H + pe[0]) if cip else rows)
            gv = dy4[:, :, oh, :] / (n * cols).astype(np.float32)
            line = np.zeros(shape[:2] + (length,), np.float32)
            for j in range(k[1]):
                line[:, :, j * d[1]: j * d[1] + (OW - 1) * s[1] + 1: s[1]] += gv
            for a in rows:
                dx[:, :, hs + a * d[0]] += line[:, :, pb[1]: pb[1] + W]
    return dx.reshape(shape)


@pytest.mark.parametrize("special", [False, True])
@pytest.mark.parametrize("mode", range(len(AVG_BWD_MODES)))
@pytest.mark.parametrize("case", range(len(APG_CASES)))
def test_avg_pool_backward_gather_matches_reference_and_scatter_bits(case, mode, special):
    shape, k, s, pb, pe, d, ceil = APG_CASES[case]
    cip, div = AVG_BWD_MODES[mode]
    dy = _apg_dy(APG_CASES[case], 40 + case, special)
    want32 = _avg_bwd_scatter_f32(dy, shape, k, s, pb, pe, d, cip, div)
    if not special:
        want = ref.avg_pool_nd_backward(dy, shape, k, s, pb, pe, d, ceil, cip, div)
        assert ref.rel_error(want32, want) <= 1e-6             # the emulation itself is right
    for threads in (1, 2):
        dx = _apg_plan(APG_CASES[case], cip, div, threads).run({"dy": dy})[0]
        if not special:
            assert ref.rel_error(dx, want) <= 1e-6
        np.testing.assert_array_equal(dx.view(np.uint32), want32.view(np.uint32))


def _bwd_plan(case, num_threads):
    shape, k, s, pb, pe, d, ceil = case
    nsp = len(shape) - 2
    x = _x(shape, 100 + len(shape) + shape[-1])
    out_sp = ref.max_pool_nd(x[:1, :1], k, s, pb, pe, d, ceil)[0].shape[2:]
    dy = np.random.default_rng(5).standard_normal(shape[:2] + out_sp).astype(np.float32)
    pads = tuple(zip((pb,) * nsp if np.isscalar(pb) else pb, (pe,) * nsp if np.isscalar(pe) else pe))
    g = rlx_cpu.Graph()
    xi, dyi = g.input("x", x.shape), g.input("dy", dy.shape)
    g.output(getattr(g, f"max_pool{nsp}d_backward")(xi, dyi, k, s, pads, d, ceil))
    return x, dy, rlx_cpu.compile(g, num_threads=num_threads)


@pytest.mark.parametrize("case", range(len(BWD_CASES)))
def test_max_pool_backward_matches_reference(case):
    shape, k, s, pb, pe, d, ceil = BWD_CASES[case]
    x, dy, plan = _bwd_plan(BWD_CASES[case], 2)
    dx = plan.run({"x": x, "dy": dy})[0]
    want = ref.max_pool_nd_backward(x, dy, k, s, pb, pe, d, ceil)
    assert ref.rel_error(dx, want) <= 1e-6           # float32 sums where windows overlap
    nsp = len(shape) - 2
    kk = (k,) * nsp if np.isscalar(k) else k
    ss = (s,) * nsp if np.isscalar(s) else s
    if all(a <= b for a, b in zip(kk, ss)):
        np.testing.assert_array_equal(dx, want.astype(np.float32))   # one window per input: exact


K3S2_SPECIAL = ["ties", "nan", "neg-inf", "const"]


@pytest.mark.parametrize("special", K3S2_SPECIAL)
@pytest.mark.parametrize("geom", [((1, 2, 17, 37), (1, 1), True), ((1, 3, 16, 40), (0, 0), False),
                                  ((1, 1, 31, 50), (1, 0), True), ((2, 2, 9, 13), (0, 1), False)],
                         ids=["p1-ceil", "p0", "p10-ceil-b1", "p01-narrow"])
def test_max_pool_backward_k3s2_special_values(geom, special):
    """Window 3 stride 2 backward (rlx_mpb33_band) on ties, NaN, -inf and constant inputs: the forward's
    winners (first maximum, last NaN, first in-bounds tap of an all -inf window), same bits at 1 and 2
    threads."""
    shape, p, ceil = geom
    rng = np.random.default_rng(17)
    if special == "ties":
        x = rng.integers(0, 3, shape).astype(np.float32)
    elif special == "nan":
        x = rng.standard_normal(shape).astype(np.float32)
        x[rng.random(shape) < 0.08] = np.nan
    elif special == "neg-inf":
        x = np.full(shape, -np.inf, np.float32)
        x[rng.random(shape) < 0.3] = 1.5
    else:
        x = np.zeros(shape, np.float32)
    want_y = ref.max_pool_nd(x, 3, 2, p, p, 1, ceil)[0]
    dy = rng.standard_normal(want_y.shape).astype(np.float32)
    dy[..., 0, 0] = -0.0
    want = ref.max_pool_nd_backward(x, dy, 3, 2, p, p, 1, ceil)
    g = rlx_cpu.Graph()
    xi, dyi = g.input("x", shape), g.input("dy", dy.shape)
    g.output(g.max_pool2d_backward(xi, dyi, 3, 2, tuple(zip(p, p)), 1, ceil))
    outs = [rlx_cpu.compile(g, num_threads=t).run({"x": x, "dy": dy})[0] for t in (1, 2)]
    np.testing.assert_array_equal(outs[0].view(np.int32), outs[1].view(np.int32))
    assert not np.isnan(outs[0]).any()
    assert ref.rel_error(outs[0], want) <= 1e-6


def test_cases_take_the_separable_kernel():
    for shape, k, s, pb, pe, ceil in CASES:
        plan = rlx_cpu.compile(_graph(shape, k, s, pb, pe, ceil), num_threads=1)
        for th in plan.thunks:
            rl = _pool.separable_row_len(th.pool_kind, th.dims.as_tuple(), False)
            assert rl > 0 and th.scratch.nbytes == 16 * rl, th      # a row and a sum line of doubles


def test_long_cases_take_the_chunked_kernel():
    for shape, k, s, pb, pe, ceil in LONG_CASES:
        plan = rlx_cpu.compile(_graph(shape, k, s, pb, pe, ceil), num_threads=1)
        for th in plan.thunks:
            assert _pool.separable_row_len(th.pool_kind, th.dims.as_tuple(), False) == 0, th


@pytest.mark.parametrize("case", range(len(CASES) + len(LONG_CASES)))
def test_separable_pools_match_reference(case):
    shape, k, s, pb, pe, ceil = (CASES + LONG_CASES)[case]
    x = _x(shape, case)
    xa = np.nan_to_num(x, nan=0.5, neginf=-2.5)
    plan = rlx_cpu.compile(_graph(shape, k, s, pb, pe, ceil), num_threads=2)
    y = plan.run({"x": x})[0]
    want, _ = ref.max_pool_nd(x, k, s, pb, pe, 1, ceil)
    np.testing.assert_array_equal(y, want.astype(np.float32))       # NaN where the window has one
    _, a_in, a_ex, a_div = plan.run({"x": xa})
    assert ref.rel_error(a_in, ref.avg_pool_nd(xa, k, s, pb, pe, 1, ceil, True)) <= 1e-6
    assert ref.rel_error(a_ex, ref.avg_pool_nd(xa, k, s, pb, pe, 1, ceil, False)) <= 1e-6
    assert ref.rel_error(a_div, ref.avg_pool_nd(xa, k, s, pb, pe, 1, ceil, False, divisor_override=5)) <= 1e-6


# Lines whose rows hold no NaN take plain maxps (the span of x a run of lines
# has checked grows line by line); a NaN in one row of one plane, at its start,
# middle or end, must still reach exactly the windows that hold it.
NAN_ROW_CASES = [((2, 3, 12, 56), 3, 1, 1, 1), ((2, 2, 12, 40), 2, 2, 0, 0), ((1, 3, 13, 41), 3, 2, 1, 1),
                 ((1, 2, 9, 37), (2, 5), (1, 3), (1, 2), (0, 2))]


@pytest.mark.parametrize("where", ["first", "middle", "last"])
@pytest.mark.parametrize("case", range(len(NAN_ROW_CASES)))
def test_max_pool_nan_in_one_row(case, where):
    shape, k, s, p, pe = NAN_ROW_CASES[case]
    rng = np.random.default_rng(case)
    x = rng.integers(-3, 4, size=shape).astype(np.float32)          # ties
    x[x == 0] = -0.0
    h = {"first": 0, "middle": shape[2] // 2, "last": shape[2] - 1}[where]
    x[-1, 1, h, rng.integers(0, shape[3])] = np.nan
    want, _ = ref.max_pool_nd(x, k, s, p, pe, 1, False)
    assert np.isnan(want).any() and not np.isnan(want).all()
    for t in (1, 2):
        g = rlx_cpu.Graph()
        pads = ((p,) * 2 if np.isscalar(p) else tuple(p)) + ((pe,) * 2 if np.isscalar(pe) else tuple(pe))
        g.output(g.max_pool(g.input("x", shape), k, s, pads, 1, False))
        y = rlx_cpu.compile(g, num_threads=t).run({"x": x})[0]
        np.testing.assert_array_equal(y, want.astype(np.float32))
        # signed zeros: the first of tied maxima, as the reference
        np.testing.assert_array_equal(np.signbit(y), np.signbit(want.astype(np.float32)))


@pytest.mark.parametrize("case", range(len(GLOBAL_CASES)))
def test_global_pools_match_reference(case):
    shape = GLOBAL_CASES[case]
    x = _x(shape, 200 + case)
    x[0, 0] = np.abs(x[0, 0])                       # one plane without NaN, with -0.0 turned to +0
    x[-1, -1] = np.where(np.isnan(x[-1, -1]), -np.inf, x[-1, -1])
    if x[-1, -1].size > 40:
        x[-1, -1].reshape(-1)[-1] = 7.0             # the max in a plane's very last element
    plan = rlx_cpu.compile(_global_graph(shape), num_threads=2)
    np.testing.assert_array_equal(plan.run({"x": x})[0], ref.global_pool(x, "max").astype(np.float32))
    xa = np.nan_to_num(x, nan=0.5, neginf=-2.5)
    assert ref.rel_error(plan.run({"x": xa})[1], ref.global_pool(xa, "avg")) <= 1e-6


@pytest.mark.parametrize("length", SUM_LENGTHS)
def test_global_avg_blocks_tails_and_overflow(length):
    # float sums: the error is bounded relative to the summed magnitudes
    # (mean |x|), not to the mean itself, which cancels towards 0 on plane 0
    x = _sum_planes(length, 11 + length)
    x64 = x.astype(np.float64)
    want = ref.global_pool(x64, "avg").reshape(-1)
    scale = np.abs(x64).mean(axis=2).reshape(-1)
    for t in (1, 2):
        y = rlx_cpu.compile(_global_graph(x.shape), num_threads=t).run({"x": x})[1].reshape(-1)
        for p in range(3):
            assert np.isfinite(y[p]), (p, y[p])     # plane 2 overflows float lanes only
            assert abs(float(y[p]) - want[p]) <= 1e-6 * scale[p], (p, y[p], want[p])
        assert y[3] == np.inf


def test_separable_pools_thread_invariant():
    one = _run_all(1)
    for t in (2, 3):
        other = _run_all(t)
        for key, v in one.items():
            np.testing.assert_array_equal(v, other[key], err_msg=f"{key} with {t} threads")


SCRIPT = r"""
import sys, numpy as np
sys.path.insert(0, sys.argv[1])
import test_pool_simd as t
from rlx_cpu import _pool
assert _pool.simd_level() == 0
np.savez(sys.argv[2], **t._run_all(2))
"""


def test_baseline_variant_gives_the_same_bits(tmp_path):
    here = os.path.dirname(__file__)
    env = dict(os.environ, RLX_SIMD="baseline")
    env["PYTHONPATH"] = os.pathsep.join([here] + [p for p in sys.path if p])
    path = str(tmp_path / "base.npz")
    out = subprocess.run([sys.executable, "-c", SCRIPT, here, path], env=env, cwd=here, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    base = np.load(path)
    mine = _run_all(2)
    assert set(base.files) == set(mine)
    for key, v in mine.items():
        np.testing.assert_array_equal(base[key], v, err_msg=key)


def test_simd_level_is_reported():
    from rlx_cpu import _conv2d
    assert _pool.simd_level() in (0, 1, 2)
    # every module runs the level src/rlx_simd.h resolved from the CPU
    assert _pool.simd_level() == _conv2d.simd_level()
