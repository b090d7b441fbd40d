"""Max gradient errors of every backward kernel over the test grids.

    PYTHONPATH=. python benchmarks/grad_errors.py

For each kernel: max relative error (max |got - want| / max |want|) against
the float64 reference, and against central finite differences of the float64
forward (eps 1e-3 per kernel; 1e-6 for the whole network, whose ReLU and
max-pool kinks a 1e-3 step crosses), over sampled entries.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import reference as R  # noqa: E402
import test_autograd as TA  # noqa: E402
import test_conv_backward as TC  # noqa: E402
import test_pool_backward as TP  # noqa: E402


def fd_err(got, f, x, idx, eps):
    fd = R.numeric_grad(f, x, idx, eps)
    return float(np.abs(got.reshape(-1)[idx] - fd).max() / max(np.abs(got).max(), 1e-30))


def main():
    rows = {}

    def note(kernel, kind, err):
        rows.setdefault(kernel, {}).setdefault(kind, []).append(err)

    rng = np.random.default_rng(0)
    for spec in TC.CASES:
        c = TC.Case(spec)
        nd = c.nsp
        for threads in (1, 2):
            for algo in ("auto", "reference"):
                dx, dw = c.plan(threads, algo).run(c.feeds())
                tag = "gemm" if algo == "auto" else "reference"
                note(f"conv{nd}d_backward_input", f"ref/{tag}", R.rel_error(dx, c.ref_dx()))
                note(f"conv{nd}d_backward_weight", f"ref/{tag}", R.rel_error(dw, c.ref_dw()))
        dx, dw = c.plan(2).run(c.feeds())          # the default (GEMM) kernels
        dy = c.dy.astype(np.float64)
        note(f"conv{nd}d_backward_input", "fd", fd_err(dx, lambda v: float((c.forward(v, c.w) * dy).sum()), c.x,
                                                      R.sample_indices(dx.size, 20, rng), 1e-3))
        note(f"conv{nd}d_backward_weight", "fd", fd_err(dw, lambda v: float((c.forward(c.x, v) * dy).sum()), c.w,
                                                       R.sample_indices(dw.size, 20, rng), 1e-3))
    for spec in TP.CASES:
        c = TP.PoolCase(spec)
        dx = c.max_plan(2).run(c.feeds())[0]
        note(f"max_pool{c.nsp}d_backward", "ref", R.rel_error(dx, c.ref_max_backward()))
        x = (rng.permutation(int(np.prod(c.shape))).reshape(c.shape) * 0.01).astype(np.float32)
        c2 = TP.PoolCase(spec, x=x, seed=3)
        dx = c2.max_plan(2).run(c2.feeds())[0]
        idx = np.union1d(R.sample_indices(dx.size, 40, rng), np.flatnonzero(dx)[:20])
        note(f"max_pool{c.nsp}d_backward", "fd", fd_err(dx, lambda v: float((c2.ref_max(v) * c2.dy).sum()), c2.x, idx, 1e-3))
    for spec in TP.AVG_CASES:
        for cip in (True, False):
            c = TP.PoolCase(spec)
            dx = c.avg_plan(2, cip).run(c.feeds())[0]
            note(f"avg_pool{c.nsp}d_backward", "ref", R.rel_error(dx, c.ref_avg_backward(cip)))
            note(f"avg_pool{c.nsp}d_backward", "fd", fd_err(dx, lambda v: float((c.ref_avg(v, cip) * c.dy).sum()), c.x,
                                                     R.sample_indices(dx.size, 40, rng), 1e-3))
    params, x, labels = TA.gradcheck_problem.__wrapped__()
    _, ours = TA._our_grads(params, x, labels, 2)
    ref = TA._ref_backward(params, x, labels)
    for k, g in ours.items():
        note("whole CNN", "ref", R.rel_error(g, ref[k]))
        base = x if k == "x" else params[k]
        f = (lambda v: TA._ref_forward(params, v, labels)) if k == "x" else \
            (lambda v, k=k: TA._ref_forward({**params, k: v}, x, labels))
        note("whole CNN", "fd(eps=1e-6)", fd_err(g, f, base, R.sample_indices(g.size, 12, rng), 1e-6))

    print(f"{'kernel':26s} {'check':16s} {'cases':>5s} {'max rel error':>14s}")
    for kernel, kinds in rows.items():
        for kind, errs in kinds.items():
            print(f"{kernel:26s} {kind:16s} {len(errs):5d} {max(errs):14.2e}")


if __name__ == "__main__":
    main()
