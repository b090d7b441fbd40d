"""Timing helpers shared by the benchmark scripts (medians, as we report).

Peers: PyTorch (torch.nn.functional) and ONNX Runtime (a one-node ONNX model
built with onnx.helper, run by an InferenceSession with intra_op_num_threads
set to the same thread count).  A ratio is peer ms / rlx ms: above 1 means
rlx_cpu is faster.  "best" is the faster of the two peers, which is the one a
speed claim has to beat.
"""
import statistics
import time

import numpy as np

from rlx_cpu.timing import DEFAULT_SETTLE_S, busy_wait, interleaved_medians, wake  # noqa: F401  (re-exported)


def median_ms(fn, repeat, warmup=2):
    """Median wall milliseconds of fn() over `repeat` calls after `warmup`,
    started once the peers' spinning workers have parked."""
    busy_wait(DEFAULT_SETTLE_S)
    wake(fn)
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(ts)


def optional_torch(disabled=False):
    """torch if installed (and not disabled), else None."""
    if disabled:
        return None
    try:
        import torch
    except ImportError:
        return None
    return torch


def optional_ort(disabled=False):
    """(onnx, onnxruntime) if both are installed (and not disabled), else None."""
    if disabled:
        return None
    try:
        import onnx
        import onnxruntime
    except ImportError:
        return None
    return onnx, onnxruntime


def ort_single_node(ort, op_type, x_shape, n_outputs=1, initializers=(), inputs=(), **attrs):
    """A one-node ONNX model reading the float input "x".  `initializers` are
    (name, array) pairs passed after x, unless `inputs` names the node's
    inputs after x explicitly (e.g. "" for an absent optional input)."""
    onnx, onnxruntime = ort
    from onnx import TensorProto, helper, numpy_helper
    init = [numpy_helper.from_array(np.asarray(a), name) for name, a in initializers]
    in_names = ["x", *inputs] if inputs else ["x", *(name for name, _ in initializers)]
    outs = [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, in_names, outs, **attrs)
    out_vi = [helper.make_tensor_value_info(o, TensorProto.FLOAT if i == 0 else TensorProto.INT64, None)
              for i, o in enumerate(outs)]
    graph = helper.make_graph([node], "bench", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                             list(x_shape))],
                              out_vi, init)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model


def ort_session(ort, model, threads):
    """An InferenceSession on `threads` intra-op threads, or None when ORT
    refuses the model."""
    _, onnxruntime = ort
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    try:
        sess = onnxruntime.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    except Exception:
        return None
    return sess


def memcpy_ms(nbytes, repeat):
    """Median ms of copying `nbytes` between two preallocated buffers
    (numpy's copyto, single thread): the bandwidth reference for
    memory-bound kernels."""
    a = np.ones(max(1, nbytes // 4), np.float32)
    b = np.empty_like(a)
    return median_ms(lambda: np.copyto(b, a), repeat)


def fmt_ratio(peer_ms, ms):
    return f"{peer_ms / ms:7.2f}" if peer_ms else f"{'-':>7}"


def fmt_ms(v):
    return f"{v:9.3f}" if v else f"{'-':>9}"
