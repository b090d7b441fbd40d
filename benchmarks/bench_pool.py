"""Memory-bound ops (pooling, pool backward, depthwise conv, resize, im2col / col2im, training
elementwise ops)
per thread count, side by side with PyTorch and ONNX Runtime.

    python benchmarks/bench_pool.py [--repeat 30] [--threads 1,2] [--shapes mp2d,ap2d] [--json out.json]

For each shape and thread count it reports, in a markdown table:
  * `kernel ms`: the median over `repeat` runs of rlx_cpu's launches alone
    (no input copy, no output allocation);
  * `run ms`: the whole `plan.run_into`, timed round-robin with the peers;
  * the peers, in the same process on the same thread count: the matching
    torch.nn.functional call (inference mode) and ONNX Runtime on the
    matching one-node model (weights as initializers; ORT has no op for
    im2col, pool backward, relu backward or a bias gradient);
  * GB/s: input bytes read once + output bytes written over the kernel time
    (the memory-bound lower bound on traffic);
  * %memcpy: numpy copying the same bytes (one thread) over the kernel time,
    the physical reference of a memory-bound op (the copy and the kernel are
    timed round-robin, so both medians come from the same minutes);
  * `best/run` and `best/kernel`: the faster peer's ms over rlx_cpu's (> 1:
    rlx_cpu faster).
Every thread count of a shape is timed in the same rounds (the kernels at
each count and memcpy round-robin, then rlx_cpu's runs and the peers at each
count), so the two-against-one-thread table at the end compares samples
from the same minutes: timed a shape at a time, one thread count after the
other, the ratio moved with this shared machine's phases (avg pool k2s2:
1.22x in one run, 1.98x interleaved).
Max pool backward comes two ways, each against torch doing the same work.
rlx_cpu's backward from x and dy re-finds each window's maximum; torch's
backward needs the forward's indices, so its counterpart there is the
forward with indices and then the backward (`from x` rows).  The `from
indices` rows time rlx_cpu's backward from a forward's indices alone (the
plan's one kernel of that kind, its buffers' bytes; no `run ms`) against
torch's backward from indices.
Each runtime's timed sample comes after 100 ms of busy waiting and 5 ms of
untimed calls (rlx_cpu/timing.py), so no other runtime's spinning pool shares
its cores; the same at every thread count.  A sample is the mean of a batch
of calls lasting about SAMPLE_BATCH_S (one call for the slower ones), the
same for every runtime: timed one call at a time, the 0.02-0.2 ms kernels
read as much of the machine's jitter as of the call (the kernel and the
run_into of one plan, which do the same work, came 1.5x apart).
`--json PATH` also writes every row.  Timings on a shared machine are noisy:
compare within one run.
"""
import argparse
import json

import numpy as np

import rlx_cpu
from _harness import DEFAULT_SETTLE_S, interleaved_medians, optional_ort, optional_torch, ort_session, \
    ort_single_node
from rlx_cpu import _runtime


def _dw_weight(c, k):
    return np.random.default_rng(1).standard_normal((c, 1, k, k)).astype(np.float32)


def _mp_bwd_torch(k, s):
    def call(torch, F, x, dy):
        _, ind = F.max_pool2d(x, k, s, return_indices=True)
        return lambda: torch.ops.aten.max_pool2d_with_indices_backward(dy, x, [k, k], [s, s], [0, 0], [1, 1],
                                                                       False, ind)
    return call


def _mp_fwd_bwd_torch(k, s, p):
    def call(torch, F, x, dy):
        def run():
            y, ind = F.max_pool2d(x, k, s, p, return_indices=True)
            return torch.ops.aten.max_pool2d_with_indices_backward(dy, x, [k, k], [s, s], [p, p], [1, 1], False,
                                                                    ind)
        return run
    return call


def _mp_bwd_torch_nd(k, s, p, ceil=False, nd=2):
    """torch's max pool backward from indices (1-D: the 2-D op on [N, C, 1, L])."""
    def call(torch, F, x, dy):
        if nd == 1:
            x, dy = x.unsqueeze(2), dy.unsqueeze(2)
        kk, ss, pp = ([1, k], [1, s], [0, p]) if nd == 1 else ([k] * nd, [s] * nd, [p] * nd)
        pool = F.max_pool3d if nd == 3 else F.max_pool2d
        _, ind = pool(x, kk, ss, pp, ceil_mode=ceil, return_indices=True)
        op = torch.ops.aten.max_pool3d_with_indices_backward if nd == 3 else \
            torch.ops.aten.max_pool2d_with_indices_backward
        return lambda: op(dy, x, kk, ss, pp, [1] * len(kk), ceil, ind)
    return call


def _mp_grad_torch(k, s, p=0, ceil=False, nd=2):
    """The torch counterpart of rlx_cpu's max pool backward from x and dy:
    torch's backward takes the forward's indices, so from x it is the forward
    with indices, then the backward from them (1-D: the 2-D ops on [N, C, 1, L])."""
    def call(torch, F, x, dy):
        if nd == 1:
            x, dy = x.unsqueeze(2), dy.unsqueeze(2)
        kk, ss, pp = ([1, k], [1, s], [0, p]) if nd == 1 else ([k] * nd, [s] * nd, [p] * nd)

        def run():
            _, ind = F.max_pool2d(x, kk, ss, pp, ceil_mode=ceil, return_indices=True)
            return torch.ops.aten.max_pool2d_with_indices_backward(dy, x, kk, ss, pp, [1] * len(kk), ceil, ind)
        return run
    return call


def _mp_bwd_from_indices(k, s, p=0, ceil=False, nd=2):
    """rlx_cpu's graph for the backward-from-indices rows: the forward with
    indices (not timed, see _spec's `only`), then the backward from them."""
    def build(g, x, dy):
        pool = g.max_pool1d if nd == 1 else g.max_pool2d
        _, ind = pool(x, k, s, p, ceil_mode=ceil, return_indices=True)
        return g.max_pool_backward_indices(dy, ind)
    return build


def _mp_fwd_bwd_torch_nd(k, s, p, nd):
    def call(torch, F, x, dy):
        pool = F.max_pool3d if nd == 3 else F.max_pool1d
        kk, ss, pp = [k] * nd, [s] * nd, [p] * nd

        def run():
            _, ind = pool(x, k, s, p, return_indices=True)
            if nd == 3:
                return torch.ops.aten.max_pool3d_with_indices_backward(dy, x, kk, ss, pp, [1] * nd, False, ind)
            return torch.ops.aten.max_pool2d_with_indices_backward(dy.unsqueeze(2), x.unsqueeze(2), [1, k], [1, s],
                                                                    [0, p], [1, 1], False, ind.unsqueeze(2))
        return run
    return call


def _ap_bwd_torch(xshape, k, s, p, ceil=False, nd=2):
    def call(torch, F, dy):
        x = torch.empty(xshape)
        if nd == 1:
            return lambda: torch.ops.aten.avg_pool2d_backward(dy.unsqueeze(2), x.unsqueeze(2), [1, k], [1, s], [0, p],
                                                              ceil, True, None)
        return lambda: torch.ops.aten.avg_pool2d_backward(dy, x, [k, k], [s, s], [p, p], ceil, True, None)
    return call


def _mp_fwd_bwd(k, s, p):
    def build(g, x, dy):
        y, ind = g.max_pool2d(x, k, s, p, return_indices=True)
        return g.max_pool_backward_indices(dy, ind), y
    return build


def _spec(desc, inputs, build, torch_call=None, ort=None, only=None):
    """inputs: {name: shape}; build(g, *values) -> output(s); torch_call(torch, F, *tensors) -> a
    zero-argument callable; ort: (op_type, n_out, attrs, initializers) on the first input.
    only: a thunk kind; then `kernel ms` times that kernel alone (the plan ran once before, so
    what it reads is in place) and its bytes are those of its buffers, and there is no
    `run ms` (the whole plan does more than the peers' call)."""
    return dict(desc=desc, inputs=inputs, build=build, torch=torch_call, ort=ort, only=only)


def _fwd(call):
    return lambda torch, F, *t: (lambda: call(F, *t))


W3 = _dw_weight(128, 3)
W5 = _dw_weight(128, 5)
W3_32 = _dw_weight(32, 3)
ACT = (8, 64, 56, 56)
B64 = np.linspace(-1, 1, 64, dtype=np.float32)

SHAPES = {
    "mp2d": _spec("max_pool2d k3 s2 p1 N1 C64 112", {"x": (1, 64, 112, 112)},
                  lambda g, x: g.max_pool2d(x, 3, 2, 1), _fwd(lambda F, x: F.max_pool2d(x, 3, 2, 1)),
                  ("MaxPool", 1, dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), ())),
    "mp2d_b8": _spec("max_pool2d k3 s2 p1 N8 C64 112", {"x": (8, 64, 112, 112)},
                     lambda g, x: g.max_pool2d(x, 3, 2, 1), _fwd(lambda F, x: F.max_pool2d(x, 3, 2, 1)),
                     ("MaxPool", 1, dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), ())),
    "mp2d_idx": _spec("max_pool2d k3 s2 p1 +indices N1", {"x": (1, 64, 112, 112)},
                      lambda g, x: g.max_pool2d(x, 3, 2, 1, return_indices=True),
                      _fwd(lambda F, x: F.max_pool2d(x, 3, 2, 1, return_indices=True)),
                      ("MaxPool", 2, dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), ())),
    "mp2d_k2": _spec("max_pool2d k2 s2 N8 C128 56", {"x": (8, 128, 56, 56)},
                     lambda g, x: g.max_pool2d(x, 2), _fwd(lambda F, x: F.max_pool2d(x, 2)),
                     ("MaxPool", 1, dict(kernel_shape=[2, 2], strides=[2, 2]), ())),
    "mp2d_k3s1": _spec("max_pool2d k3 s1 p1 N1 C64 56", {"x": (1, 64, 56, 56)},
                       lambda g, x: g.max_pool2d(x, 3, 1, 1), _fwd(lambda F, x: F.max_pool2d(x, 3, 1, 1)),
                       ("MaxPool", 1, dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]), ())),
    "ap2d_k2": _spec("avg_pool2d k2 s2 N8 C64 56", {"x": (8, 64, 56, 56)},
                     lambda g, x: g.avg_pool2d(x, 2), _fwd(lambda F, x: F.avg_pool2d(x, 2)),
                     ("AveragePool", 1, dict(kernel_shape=[2, 2], strides=[2, 2]), ())),
    "ap2d": _spec("avg_pool2d k3 s2 p1 ceil N1 C64 112", {"x": (1, 64, 112, 112)},
                  lambda g, x: g.avg_pool2d(x, 3, 2, 1, ceil_mode=True),
                  _fwd(lambda F, x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True)),
                  ("AveragePool", 1, dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1,
                                          count_include_pad=1), ())),
    "mp1d": _spec("max_pool1d k4 s2 (long line)", {"x": (1, 2, 200000)},
                  lambda g, x: g.max_pool1d(x, 4, 2), _fwd(lambda F, x: F.max_pool1d(x, 4, 2)),
                  ("MaxPool", 1, dict(kernel_shape=[4], strides=[2]), ())),
    "mp3d": _spec("max_pool3d k2 s2 N2 C32 16x56", {"x": (2, 32, 16, 56, 56)},
                  lambda g, x: g.max_pool3d(x, 2), _fwd(lambda F, x: F.max_pool3d(x, 2)),
                  ("MaxPool", 1, dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2]), ())),
    "mp2d_bwd": _spec("max_pool2d backward k2 s2 N32 C64 28 from x (torch: fwd with indices + bwd)",
                      {"x": (32, 64, 28, 28), "dy": (32, 64, 14, 14)},
                      lambda g, x, dy: g.max_pool2d_backward(x, dy, 2, 2), _mp_grad_torch(2, 2)),
    "mp2d_bwd_idx": _spec("max_pool2d backward from indices k2 s2 N32 C64 28",
                          {"x": (32, 64, 28, 28), "dy": (32, 64, 14, 14)}, _mp_bwd_from_indices(2, 2),
                          _mp_bwd_torch(2, 2), only="max_pool_backward_indices"),
    "mp2d_fb": _spec("max_pool2d k2 s2 +indices, then backward from them, N32 C64 28",
                     {"x": (32, 64, 28, 28), "dy": (32, 64, 14, 14)}, _mp_fwd_bwd(2, 2, 0), _mp_fwd_bwd_torch(2, 2, 0)),
    "mp2d_fb_k3": _spec("max_pool2d k3 s2 p1 +indices, then backward from them, N1 C64 112",
                        {"x": (1, 64, 112, 112), "dy": (1, 64, 56, 56)}, _mp_fwd_bwd(3, 2, 1),
                        _mp_fwd_bwd_torch(3, 2, 1)),
    "ap2d_bwd": _spec("avg_pool2d backward k2 s2 N32 C64 28", {"dy": (32, 64, 14, 14)},
                      lambda g, dy: g.avg_pool2d_backward(dy, (32, 64, 28, 28), 2, 2),
                      lambda torch, F, dy: (lambda: torch.ops.aten.avg_pool2d_backward(
                          dy, torch.empty(32, 64, 28, 28), [2, 2], [2, 2], [0, 0], False, True, None))),
    "mp2d_bwd_b1": _spec("max_pool2d backward k2 s2 N1 C64 112 from x (torch: fwd with indices + bwd)",
                         {"x": (1, 64, 112, 112), "dy": (1, 64, 56, 56)},
                         lambda g, x, dy: g.max_pool2d_backward(x, dy, 2, 2), _mp_grad_torch(2, 2)),
    "mp2d_bwd_idx_b1": _spec("max_pool2d backward from indices k2 s2 N1 C64 112",
                             {"x": (1, 64, 112, 112), "dy": (1, 64, 56, 56)}, _mp_bwd_from_indices(2, 2),
                             _mp_bwd_torch(2, 2), only="max_pool_backward_indices"),
    "mp2d_bwd_k3": _spec("max_pool2d backward k3 s2 p1 ceil N1 C64 112 from x (torch: fwd with indices + bwd)",
                         {"x": (1, 64, 112, 112), "dy": (1, 64, 57, 57)},
                         lambda g, x, dy: g.max_pool2d_backward(x, dy, 3, 2, 1, ceil_mode=True),
                         _mp_grad_torch(3, 2, 1, ceil=True)),
    "mp2d_bwd_idx_k3": _spec("max_pool2d backward from indices k3 s2 p1 ceil N1 C64 112",
                             {"x": (1, 64, 112, 112), "dy": (1, 64, 57, 57)}, _mp_bwd_from_indices(3, 2, 1, True),
                             _mp_bwd_torch_nd(3, 2, 1, ceil=True), only="max_pool_backward_indices"),
    "ap2d_bwd_k3": _spec("avg_pool2d backward k3 s2 p1 ceil N1 C64 112", {"dy": (1, 64, 57, 57)},
                         lambda g, dy: g.avg_pool2d_backward(dy, (1, 64, 112, 112), 3, 2, 1, ceil_mode=True),
                         _ap_bwd_torch((1, 64, 112, 112), 3, 2, 1, ceil=True)),
    "mp1d_bwd": _spec("max_pool1d backward k2 s2 N8 C64 4096 from x (torch: fwd with indices + bwd)",
                      {"x": (8, 64, 4096), "dy": (8, 64, 2048)},
                      lambda g, x, dy: g.max_pool1d_backward(x, dy, 2, 2), _mp_grad_torch(2, 2, nd=1)),
    "mp1d_bwd_idx": _spec("max_pool1d backward from indices k2 s2 N8 C64 4096",
                          {"x": (8, 64, 4096), "dy": (8, 64, 2048)}, _mp_bwd_from_indices(2, 2, nd=1),
                          _mp_bwd_torch_nd(2, 2, 0, nd=1), only="max_pool_backward_indices"),
    "ap1d_bwd": _spec("avg_pool1d backward k3 s2 p1 N8 C64 4096", {"dy": (8, 64, 2048)},
                      lambda g, dy: g.avg_pool1d_backward(dy, (8, 64, 4096), 3, 2, 1),
                      _ap_bwd_torch((8, 64, 4096), 3, 2, 1, nd=1)),
    "mp1d_idx": _spec("max_pool1d k3 s2 p1 +indices N1 C64 8192", {"x": (1, 64, 8192)},
                      lambda g, x: g.max_pool1d(x, 3, 2, 1, return_indices=True),
                      _fwd(lambda F, x: F.max_pool1d(x, 3, 2, 1, return_indices=True)),
                      ("MaxPool", 2, dict(kernel_shape=[3], strides=[2], pads=[1, 1]), ())),
    "mp3d_idx": _spec("max_pool3d k2 s2 +indices N2 C32 16x56", {"x": (2, 32, 16, 56, 56)},
                      lambda g, x: g.max_pool3d(x, 2, return_indices=True),
                      _fwd(lambda F, x: F.max_pool3d(x, 2, return_indices=True)),
                      ("MaxPool", 2, dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2]), ())),
    "mp1d_fb": _spec("max_pool1d k3 s2 p1 +indices, then backward from them, N8 C64 4096",
                     {"x": (8, 64, 4096), "dy": (8, 64, 2048)},
                     lambda g, x, dy: (lambda y, i: (g.max_pool_backward_indices(dy, i), y))(
                         *g.max_pool1d(x, 3, 2, 1, return_indices=True)),
                     _mp_fwd_bwd_torch_nd(3, 2, 1, 1)),
    "mp3d_fb": _spec("max_pool3d k2 s2 +indices, then backward from them, N2 C32 16x56",
                     {"x": (2, 32, 16, 56, 56), "dy": (2, 32, 8, 28, 28)},
                     lambda g, x, dy: (lambda y, i: (g.max_pool_backward_indices(dy, i), y))(
                         *g.max_pool3d(x, 2, return_indices=True)),
                     _mp_fwd_bwd_torch_nd(2, 2, 0, 3)),
    "gap": _spec("global_avg_pool N8 C512 14", {"x": (8, 512, 14, 14)},
                 lambda g, x: g.global_avg_pool(x), _fwd(lambda F, x: F.adaptive_avg_pool2d(x, 1)),
                 ("GlobalAveragePool", 1, {}, ())),
    "gmp": _spec("global_max_pool N8 C512 14", {"x": (8, 512, 14, 14)},
                 lambda g, x: g.global_max_pool(x), _fwd(lambda F, x: F.adaptive_max_pool2d(x, 1)),
                 ("GlobalMaxPool", 1, {}, ())),
    "dw3": _spec("depthwise 3x3 p1 N1 C128 112", {"x": (1, 128, 112, 112)},
                 lambda g, x: g.conv2d(x, W3, padding=1, groups=128),
                 lambda torch, F, x: (lambda w=torch.from_numpy(W3): F.conv2d(x, w, None, 1, 1, 1, 128)),
                 ("Conv", 1, dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=128), (("w", W3),))),
    "dw3s2": _spec("depthwise 3x3 s2 p1 N1 C128 112", {"x": (1, 128, 112, 112)},
                   lambda g, x: g.conv2d(x, W3, stride=2, padding=1, groups=128),
                   lambda torch, F, x: (lambda w=torch.from_numpy(W3): F.conv2d(x, w, None, 2, 1, 1, 128)),
                   ("Conv", 1, dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], group=128),
                    (("w", W3),))),
    "dw5s2": _spec("depthwise 5x5 s2 p2 N1 C128 56", {"x": (1, 128, 56, 56)},
                   lambda g, x: g.conv2d(x, W5, stride=2, padding=2, groups=128),
                   lambda torch, F, x: (lambda w=torch.from_numpy(W5): F.conv2d(x, w, None, 2, 2, 1, 128)),
                   ("Conv", 1, dict(kernel_shape=[5, 5], strides=[2, 2], pads=[2, 2, 2, 2], group=128),
                    (("w", W5),))),
    "dw5": _spec("depthwise 5x5 p2 N1 C128 56", {"x": (1, 128, 56, 56)},
                 lambda g, x: g.conv2d(x, W5, padding=2, groups=128),
                 lambda torch, F, x: (lambda w=torch.from_numpy(W5): F.conv2d(x, w, None, 1, 2, 1, 128)),
                 ("Conv", 1, dict(kernel_shape=[5, 5], pads=[2, 2, 2, 2], group=128), (("w", W5),))),
    "up2x": _spec("upsample_nearest2x N1 C64 56", {"x": (1, 64, 56, 56)},
                  lambda g, x: g.upsample_nearest2x(x),
                  _fwd(lambda F, x: F.interpolate(x, scale_factor=2, mode="nearest")),
                  ("Resize", 1, dict(mode="nearest", coordinate_transformation_mode="asymmetric",
                                     nearest_mode="floor"),
                   (("roi", np.zeros(0, np.float32)), ("scales", np.array([1, 1, 2, 2], np.float32))))),
    "interp": _spec("interpolate nearest x1.5 N1 C64 56", {"x": (1, 64, 56, 56)},
                    lambda g, x: g.interpolate(x, scale_factor=1.5),
                    _fwd(lambda F, x: F.interpolate(x, scale_factor=1.5, mode="nearest")),
                    ("Resize", 1, dict(mode="nearest", coordinate_transformation_mode="asymmetric",
                                       nearest_mode="floor"),
                     (("roi", np.zeros(0, np.float32)), ("scales", np.array([1, 1, 1.5, 1.5], np.float32))))),
    "im2col": _spec("im2col k3 s1 p1 (onnx layout) C64 56", {"x": (1, 64, 56, 56)},
                    lambda g, x: g.im2col(x, 3, 1, 1, layout="onnx"), _fwd(lambda F, x: F.unfold(x, 3, 1, 1, 1))),
    "col2im": _spec("col2im k3 s1 p1 (onnx layout) C64 56", {"x": (1, 64 * 9, 56 * 56)},
                    lambda g, x: g.col2im(x, (56, 56), 3, 1, 1, layout="onnx"),
                    _fwd(lambda F, x: F.fold(x, (56, 56), 3, 1, 1, 1)),
                    ("Col2Im", 1, dict(pads=[1, 1, 1, 1]),
                     (("image_shape", np.array([56, 56], np.int64)), ("block_shape", np.array([3, 3], np.int64))))),
    "ap1d": _spec("avg_pool1d k3 s2 p1 ceil N8 C64 3137", {"x": (8, 64, 3137)},
                  lambda g, x: g.avg_pool1d(x, 3, 2, 1, ceil_mode=True),
                  _fwd(lambda F, x: F.avg_pool1d(x, 3, 2, 1, ceil_mode=True)),
                  ("AveragePool", 1, dict(kernel_shape=[3], strides=[2], pads=[1, 1], ceil_mode=1,
                                          count_include_pad=1), ())),
    "ap3d": _spec("avg_pool3d k3 s2 p1 ceil N2 C32 15x55", {"x": (2, 32, 15, 55, 55)},
                  lambda g, x: g.avg_pool3d(x, 3, 2, 1, ceil_mode=True),
                  _fwd(lambda F, x: F.avg_pool3d(x, 3, 2, 1, ceil_mode=True)),
                  ("AveragePool", 1, dict(kernel_shape=[3, 3, 3], strides=[2, 2, 2], pads=[1, 1, 1, 1, 1, 1],
                                          ceil_mode=1, count_include_pad=1), ())),
    # training elementwise ops on one [8, 64, 56, 56] activation (ORT: the second operand as an initializer)
    "relu": _spec("relu N8 C64 56", {"x": ACT},
                  lambda g, x: g.relu(x), _fwd(lambda F, x: F.relu(x)), ("Relu", 1, {}, ())),
    "relu_bwd": _spec("relu_backward N8 C64 56", {"dy": ACT, "y": ACT},
                      lambda g, dy, y: g.relu_backward(dy, y),
                      lambda torch, F, dy, y: (lambda: torch.ops.aten.threshold_backward(dy, y, 0))),
    "bias_add": _spec("bias_add N8 C64 56", {"x": ACT, "b": (64,)},
                      lambda g, x, b: g.bias_add(x, b), lambda torch, F, x, b: (lambda: x + b[:, None, None]),
                      ("Add", 1, {}, (("b", B64[:, None, None]),))),
    "bias_grad": _spec("bias_grad N8 C64 56", {"dy": ACT},
                       lambda g, dy: g.bias_grad(dy), lambda torch, F, dy: (lambda: dy.sum((0, 2, 3)))),
    "add": _spec("add N8 C64 56", {"a": ACT, "b": ACT},
                 lambda g, a, b: g.add(a, b), lambda torch, F, a, b: (lambda: a + b),
                 ("Add", 1, {}, (("b", np.ones(ACT, np.float32)),))),
}


def _dw_s1_spec(c, hw, k):
    """A stride-1 'same' depthwise conv of one image (MobileNet/EfficientNet layers)."""
    w, p = _dw_weight(c, k), k // 2
    return _spec(f"depthwise {k}x{k} p{p} N1 C{c} {hw}", {"x": (1, c, hw, hw)},
                 lambda g, x: g.conv2d(x, w, padding=p, groups=c),
                 lambda torch, F, x: (lambda wt=torch.from_numpy(w): F.conv2d(x, wt, None, 1, p, 1, c)),
                 ("Conv", 1, dict(kernel_shape=[k, k], pads=[p] * 4, group=c), (("w", w),)))


# MobileNetV2's stride-1 depthwise layers at 224 (mv2_<C>_<H>) and 5x5 ones
# of MobileNetV3 / EfficientNet (dw5_<C>_<H>).
for _c, _hw in ((32, 112), (96, 112), (144, 56), (192, 28), (384, 14), (576, 14), (960, 7)):
    SHAPES[f"mv2_{_c}_{_hw}"] = _dw_s1_spec(_c, _hw, 3)
for _c, _hw in ((120, 28), (480, 14), (960, 7)):
    SHAPES[f"dw5_{_c}_{_hw}"] = _dw_s1_spec(_c, _hw, 5)


# Seconds of calls one timed sample averages (rlx_cpu.timing.interleaved_samples' batch_s).
SAMPLE_BATCH_S = 0.002


def bench_shape(name, spec, threads, repeat, torch, ort):
    """The shape's rows, one per thread count.  Every thread count is timed
    in the same rounds (the kernels and memcpy in one round-robin, then the
    runs and the peers in another), so the 1- against 2-thread ratios come
    from the same minutes of this shared machine."""
    rng = np.random.default_rng(0)
    arrays = {k: rng.standard_normal(s).astype(np.float32) for k, s in spec["inputs"].items()}
    g = rlx_cpu.Graph()
    vals = [g.input(k, s) for k, s in spec["inputs"].items()]
    out = spec["build"](g, *vals)
    g.output(*(out if isinstance(out, tuple) else (out,)))
    in_bytes = sum(a.nbytes for a in arrays.values())
    kernels, runs, nbytes = {}, {}, {}
    for t in threads:
        plan = rlx_cpu.compile(g, num_threads=t)
        ctx = plan.new_context()
        ctx.load(arrays)
        out_bytes = sum(int(np.prod(s)) * np.dtype(d).itemsize
                        for s, d in zip(plan.output_shapes, plan.output_dtypes))
        nbytes[t] = in_bytes + out_bytes
        launches = ctx.launches
        if spec["only"]:
            # one kernel of the plan: the plan runs once first, then that kernel is timed on its own
            _runtime.run_launches(ctx.launches, t)
            picks = [i for i, th in enumerate(plan.thunks) if th.kind == spec["only"]]
            if len(picks) != 1:
                raise RuntimeError(f"{name}: expected one {spec['only']} thunk, got {len(picks)}")
            th = plan.thunks[picks[0]]
            launches = [ctx.launches[picks[0]]]
            nbytes[t] = sum(getattr(th, f).nbytes for f in th.reads + th.writes)
        kernels[f"kernel{t}"] = lambda launches=launches, t=t, ctx=ctx: _runtime.run_launches(launches, t)
        if not spec["only"]:
            outs = [np.empty(s_, d) for s_, d in zip(plan.output_shapes, plan.output_dtypes)]
            runs[f"rlx{t}"] = lambda plan=plan, outs=outs: plan.run_into(arrays, outs)
        if torch is not None and spec["torch"] is not None:
            tens = [torch.from_numpy(a) for a in arrays.values()]
            with torch.inference_mode():
                call = spec["torch"](torch, torch.nn.functional, *tens)

            def torch_run(call=call, t=t):
                torch.set_num_threads(t)        # a no-op but for the first of each turn's wake-up calls
                with torch.inference_mode():
                    call()
            runs[f"torch{t}"] = torch_run
        if ort is not None and spec["ort"] is not None:
            op_type, n_out, attrs, inits = spec["ort"]
            xa = next(iter(arrays.values()))      # the first input is "x"; other operands are initializers
            sess = ort_session(ort, ort_single_node(ort, op_type, xa.shape, n_out, inits, **attrs), t)
            if sess is not None:
                runs[f"ort{t}"] = lambda sess=sess, xa=xa: sess.run(None, {"x": xa})
    # the kernels and their bandwidth reference interleaved, so all see the same machine
    src = np.ones(max(1, max(nbytes.values()) // 4), np.float32)
    dst = np.empty_like(src)
    km = interleaved_medians({**kernels, "memcpy": lambda: np.copyto(dst, src)}, repeat, settle=DEFAULT_SETTLE_S,
                             batch_s=SAMPLE_BATCH_S)
    timed = interleaved_medians(runs, repeat, settle=DEFAULT_SETTLE_S, batch_s=SAMPLE_BATCH_S) if runs else {}
    rows = []
    for t in threads:
        ms = km[f"kernel{t}"]
        copy_ms = km["memcpy"] * nbytes[t] / (4 * src.size)
        run_ms = timed.get(f"rlx{t}")
        peer = {k: timed.get(f"{k}{t}") for k in ("torch", "ort")}
        best = min((v for v in peer.values() if v is not None), default=None)
        rows.append(dict(shape=name, op=spec["desc"], threads=t, kernel_ms=ms, run_ms=run_ms,
                         torch_ms=peer["torch"], ort_ms=peer["ort"], memcpy_ms=copy_ms,
                         gbs=nbytes[t] / (ms * 1e-3) / 1e9, pct_memcpy=100 * copy_ms / ms,
                         best_over_run=(best / run_ms) if best and run_ms else None,
                         best_over_kernel=(best / ms) if best else None))
    return rows


def _f(v, fmt):
    return "-" if v is None else format(v, fmt)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--no-ort", action="store_true")
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    torch = optional_torch(args.no_torch)
    ort = optional_ort(args.no_ort)
    unknown = [s for s in args.shapes.split(",") if s not in SHAPES]
    if unknown:
        ap.error(f"unknown shapes {unknown}; known: {', '.join(SHAPES)}")
    print("| shape | op | thr | kernel ms | run ms | torch ms | ort ms | GB/s | %memcpy | best/run | best/kernel |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for name in args.shapes.split(","):
        for r in bench_shape(name, SHAPES[name], threads, args.repeat, torch, ort):
            rows.append(r)
            print(f"| {r['shape']} | {r['op']} | {r['threads']} | {r['kernel_ms']:.3f} | {_f(r['run_ms'], '.3f')} | "
                  f"{_f(r['torch_ms'], '.3f')} | {_f(r['ort_ms'], '.3f')} | {r['gbs']:.1f} | "
                  f"{r['pct_memcpy']:.0f}% | {_f(r['best_over_run'], '.2f')} | {_f(r['best_over_kernel'], '.2f')} |",
                  flush=True)
    if 1 in threads and 2 in threads:
        print_scaling(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(rlx_cpu=rlx_cpu.__version__, rows=rows), f, indent=1)


def print_scaling(rows):
    """Two threads against one, per shape: rlx_cpu's kernel and run, and the
    better of the peers' runs.  `short` marks a shape where a peer reaches
    1.8x and rlx_cpu's kernel does not."""
    by = {(r["shape"], r["threads"]): r for r in rows}
    print("\n| shape | rlx kernel 1T/2T | rlx run 1T/2T | best peer 1T/2T | short |")
    print("|---|---|---|---|---|")
    for name in dict.fromkeys(r["shape"] for r in rows):
        one, two = by.get((name, 1)), by.get((name, 2))
        if one is None or two is None:
            continue
        peer = max((one[k] / two[k] for k in ("torch_ms", "ort_ms") if one[k] and two[k]), default=None)
        kern = one["kernel_ms"] / two["kernel_ms"]
        short = peer is not None and peer >= 1.8 and kern < 1.8
        run = one["run_ms"] / two["run_ms"] if one["run_ms"] and two["run_ms"] else None
        print(f"| {name} | {kern:.2f} | {_f(run, '.2f')} | {_f(peer, '.2f')} | "
              f"{'yes' if short else ''} |")


if __name__ == "__main__":
    main()
