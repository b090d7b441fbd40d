"""Training with rlx_cpu: an SGD trainer over one compiled forward+backward
plan, a synthetic image-classification task and the example CNN behind
``python -m rlx_cpu train`` (defaults: 10 seven-segment digit classes, 4096
training images, 8 epochs of SGD with momentum 0.9; the stated target is
>= 0.92 test accuracy: seeds 0, 1, 2 measured 0.951, 0.973, 0.956).

Trainer design (a step allocates nothing):

* The training graph's parameters are graph *inputs* (also declared graph
  *outputs*).  Graph inputs are never written by a plan and never placed in
  the arena, so a parameter keeps its value from one run to the next in the
  input buffer of the trainer's private :class:`~rlx_cpu.plan.RunContext`
  (``ctx.inputs``, which the launches read); they are written once at start.
* The gradients are outputs too (alive until the end of the run).  A step
  copies only the batch into its input slots, runs the launches, then
  updates every parameter in place on the arena views with numpy ufuncs
  (``out=``), optionally through a preallocated momentum buffer.  The SGD
  update stays outside the plan: it is a few in-place ufunc calls on small
  arrays, and keeping it out keeps the planner free of in-place state.
"""
import argparse
import sys
import time

import numpy as np

from . import _runtime
from .autograd import grads
from .compiler import compile as _compile
from .ir import Graph

__all__ = ["Trainer", "time_by_kind", "synthetic_digits", "cnn_parameter_shapes", "cnn_forward", "init_cnn_parameters",
           "build_cnn_training", "main"]


class Trainer:
    """SGD (with optional momentum) on one compiled training plan.

    graph: a Graph without outputs holding the forward ops and `loss`.
    params: the input nodes to train (graph inputs).  Every other graph input
        is a per-step input (`batch` in :meth:`step`).
    outputs: extra nodes to expose after each step (e.g. logits), readable
        through :meth:`output`.
    """

    def __init__(self, graph, loss, params, lr=0.05, momentum=0.0, outputs=(), num_threads=None,
                 conv_algorithm="auto"):
        params = list(params)
        for p in params:
            if p.op != "input":
                raise ValueError(f"Trainer: parameters must be graph inputs, got {p!r}")
        if not (lr > 0):
            raise ValueError(f"Trainer: lr must be > 0, got {lr!r}")
        if not (0 <= momentum < 1):
            raise ValueError(f"Trainer: momentum must be in [0, 1), got {momentum!r}")
        grad_nodes = grads(graph, loss, params)
        outputs = list(outputs)
        # loss, extras, grads, params: params as outputs pin their bytes (see module doc)
        graph.output(loss, *outputs, *grad_nodes, *params)
        self.plan = _compile(graph, conv_algorithm=conv_algorithm, num_threads=num_threads)
        self.lr = float(lr)
        self.momentum = float(momentum)
        self._ctx = self.plan.new_context()
        slots = {name: view for name, _, view in self._ctx.inputs}
        self.param_names = [p.name for p in params]
        self._params = [slots[p.name] for p in params]
        self._batch = [(name, view) for name, _, view in self._ctx.inputs if name not in self.param_names]
        outs = self._ctx.outputs
        self._loss = outs[0]
        self._extra = outs[1:1 + len(outputs)]
        self._grads = outs[1 + len(outputs):1 + len(outputs) + len(params)]
        self._velocity = [np.zeros_like(p) for p in self._params] if self.momentum else None
        for p in self._params:
            p.fill(0.0)

    # -- parameters -----------------------------------------------------------
    def set_parameters(self, values):
        """Write parameter values (dict name -> array); missing names keep theirs."""
        for name, view in zip(self.param_names, self._params):
            if name in values:
                src = np.asarray(values[name])
                if src.shape != view.shape:
                    raise ValueError(f"set_parameters: {name!r} must have shape {list(view.shape)}, "
                                     f"got {list(src.shape)}")
                np.copyto(view, src, casting="unsafe")
        if self._velocity is not None:
            for v in self._velocity:
                v.fill(0.0)

    def parameters(self):
        """Copies of the current parameters, by name."""
        return {name: view.copy() for name, view in zip(self.param_names, self._params)}

    def gradients(self):
        """Copies of the gradients computed by the last :meth:`forward_backward`
        (:meth:`step` reuses the gradient buffers for the update)."""
        return {name: g.copy() for name, g in zip(self.param_names, self._grads)}

    def output(self, i):
        """View of extra output i of the last step (valid until the next step)."""
        return self._extra[i]

    # -- running ------------------------------------------------------------
    def _load(self, batch):
        for name, view in self._batch:
            try:
                src = batch[name]
            except KeyError:
                raise ValueError(f"step: batch must provide {[n for n, _ in self._batch]}, "
                                 f"missing {name!r}") from None
            if np.shape(src) != view.shape:
                raise ValueError(f"step: {name!r} must have shape {list(view.shape)}, got {list(np.shape(src))}")
            np.copyto(view, src, casting="unsafe")

    def forward_backward(self, batch):
        """Run the plan (loss and gradients) without updating; returns the loss."""
        self._load(batch)
        self._ctx.sequence.run(self.plan.num_threads)
        return float(self._loss)

    def step(self, batch):
        """One SGD step on `batch` (dict input name -> array); returns the loss."""
        self._load(batch)
        self._ctx.sequence.run(self.plan.num_threads)
        lr, mu = self.lr, self.momentum
        for i, (p, g) in enumerate(zip(self._params, self._grads)):
            if mu:
                v = self._velocity[i]
                np.multiply(v, mu, out=v)          # v = mu v + g
                np.add(v, g, out=v)
                g = v
            np.multiply(g, -lr, out=self._grads[i])  # the grad buffer is dead now: reuse it
            np.add(p, self._grads[i], out=p)
        return float(self._loss)

    def profile(self, batch, repeat=10, warmup=1):
        """Median seconds per thunk of a forward+backward run: [(thunk, seconds)]."""
        self._load(batch)
        for _ in range(warmup):
            self._ctx.sequence.run(self.plan.num_threads)
        samples = [_runtime.run_launches_timed(self._ctx.launches, self.plan.num_threads, time.perf_counter)
                   for _ in range(max(1, repeat))]
        med = np.median(np.array(samples), axis=0)
        return list(zip(self.plan.thunks, (float(v) for v in med)))


def time_by_kind(profile):
    """{thunk kind: seconds} summed over a profile, largest first."""
    out = {}
    for th, sec in profile:
        out[th.kind] = out.get(th.kind, 0.0) + sec
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


# ---------------------------------------------------------------------------
# Synthetic task: seven-segment digits
# ---------------------------------------------------------------------------

_SEGMENTS = {0: "abcdef", 1: "bc", 2: "abdeg", 3: "abcdg", 4: "bcfg",
             5: "acdfg", 6: "acdefg", 7: "abc", 8: "abcdefg", 9: "abcdfg"}


def synthetic_digits(n, size=28, seed=0, noise=0.2, classes=10):
    """n grayscale images [n, 1, size, size] of seven-segment digits 0..classes-1
    with random box size, stroke width, position and intensity plus Gaussian
    noise; labels [n] as float32 class indices.  Deterministic in `seed`."""
    if not 2 <= classes <= 10:
        raise ValueError(f"synthetic_digits: classes must be in [2, 10], got {classes}")
    if size < 24:
        raise ValueError(f"synthetic_digits: size must be >= 24, got {size}")
    rng = np.random.default_rng(seed)
    x = np.zeros((n, 1, size, size), np.float32)
    labels = rng.integers(0, classes, n)
    for i in range(n):
        w, h, t = rng.integers(8, 13), rng.integers(14, 21), rng.integers(2, 4)
        top, left = rng.integers(1, size - h), rng.integers(1, size - w)
        mid = top + h // 2
        box = {"a": (top, top + t, left, left + w), "d": (top + h - t, top + h, left, left + w),
               "g": (mid - t // 2, mid - t // 2 + t, left, left + w),
               "f": (top, mid + 1, left, left + t), "b": (top, mid + 1, left + w - t, left + w),
               "e": (mid, top + h, left, left + t), "c": (mid, top + h, left + w - t, left + w)}
        v = rng.uniform(0.6, 1.0)
        for s in _SEGMENTS[int(labels[i])]:
            r0, r1, c0, c1 = box[s]
            x[i, 0, r0:r1, c0:c1] = v
    x += (noise * rng.standard_normal(x.shape)).astype(np.float32)
    return x, labels.astype(np.float32)


# ---------------------------------------------------------------------------
# The example CNN: (conv 3x3 - relu - maxpool 2) x 2, dense
# ---------------------------------------------------------------------------

def cnn_parameter_shapes(size=28, classes=10, channels=(8, 16)):
    c1, c2 = channels
    flat = c2 * (size // 4) * (size // 4)
    return {"conv1.weight": (c1, 1, 3, 3), "conv1.bias": (c1,),
            "conv2.weight": (c2, c1, 3, 3), "conv2.bias": (c2,),
            "fc.weight": (classes, flat), "fc.bias": (classes,)}


def cnn_forward(g, x, p):
    """Logits of the example CNN for input node x and parameter nodes p (dict)."""
    h = g.max_pool2d(g.relu(g.conv2d(x, p["conv1.weight"], p["conv1.bias"], padding=1)), 2)
    h = g.max_pool2d(g.relu(g.conv2d(h, p["conv2.weight"], p["conv2.bias"], padding=1)), 2)
    return g.linear(g.flatten(h), p["fc.weight"], p["fc.bias"])


def init_cnn_parameters(shapes, seed=0):
    """PyTorch's default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in shapes.items():
        layer = name.rsplit(".", 1)[0]
        fan_in = int(np.prod(shapes[layer + ".weight"][1:]))
        bound = 1.0 / np.sqrt(fan_in)
        out[name] = rng.uniform(-bound, bound, shape).astype(np.float32)
    return out


def build_cnn_training(batch_size, size=28, classes=10, channels=(8, 16), lr=0.05, momentum=0.9,
                       num_threads=None, seed=0):
    """A Trainer for the example CNN (extra output 0: the logits), initialised."""
    shapes = cnn_parameter_shapes(size, classes, channels)
    g = Graph()
    x = g.input("x", (batch_size, 1, size, size))
    labels = g.input("labels", (batch_size,))
    p = {name: g.input(name, shape) for name, shape in shapes.items()}
    logits = cnn_forward(g, x, p)
    loss = g.softmax_cross_entropy(logits, labels)
    trainer = Trainer(g, loss, list(p.values()), lr=lr, momentum=momentum, outputs=[logits],
                      num_threads=num_threads)
    trainer.set_parameters(init_cnn_parameters(shapes, seed))
    return trainer


def build_cnn_eval(batch_size, size=28, classes=10, channels=(8, 16), num_threads=None):
    """A forward-only plan of the example CNN: inputs x and the parameters, output logits."""
    shapes = cnn_parameter_shapes(size, classes, channels)
    g = Graph()
    x = g.input("x", (batch_size, 1, size, size))
    p = {name: g.input(name, shape) for name, shape in shapes.items()}
    g.output(cnn_forward(g, x, p))
    return _compile(g, num_threads=num_threads)


def evaluate(plan, params, x, labels, batch_size):
    """Accuracy of the eval plan on (x, labels); the tail that does not fill a batch is skipped."""
    correct = total = 0
    feeds = dict(params)
    for i in range(0, len(x) - batch_size + 1, batch_size):
        feeds["x"] = x[i:i + batch_size]
        logits = plan.run(feeds)[0]
        correct += int((logits.argmax(axis=1) == labels[i:i + batch_size]).sum())
        total += batch_size
    return correct / max(total, 1)


def train_cnn(epochs=8, batch_size=32, train_size=4096, test_size=1024, lr=0.05, momentum=0.9,
              num_threads=None, seed=0, classes=10, noise=0.2, channels=(8, 16), log=print):
    """Train the example CNN on synthetic digits; returns {"history": [per-epoch
    dict], "trainer": Trainer, "batch": the last batch}."""
    x_train, y_train = synthetic_digits(train_size, seed=seed, noise=noise, classes=classes)
    x_test, y_test = synthetic_digits(test_size, seed=seed + 1, noise=noise, classes=classes)
    trainer = build_cnn_training(batch_size, classes=classes, channels=channels, lr=lr, momentum=momentum,
                                 num_threads=num_threads, seed=seed)
    eval_plan = build_cnn_eval(batch_size, classes=classes, channels=channels, num_threads=num_threads)
    rng = np.random.default_rng(seed)
    history = []
    batch = {}
    for epoch in range(1, epochs + 1):
        order = rng.permutation(train_size)
        xs, ys = x_train[order], y_train[order]
        losses, correct, seen = [], 0, 0
        t0 = time.perf_counter()
        for i in range(0, train_size - batch_size + 1, batch_size):
            batch["x"], batch["labels"] = xs[i:i + batch_size], ys[i:i + batch_size]
            losses.append(trainer.step(batch))
            correct += int((trainer.output(0).argmax(axis=1) == batch["labels"]).sum())
            seen += batch_size
        elapsed = time.perf_counter() - t0
        test_acc = evaluate(eval_plan, trainer.parameters(), x_test, y_test, batch_size)
        rec = {"epoch": epoch, "loss": float(np.mean(losses)), "train_acc": correct / seen,
               "test_acc": test_acc, "images_per_s": seen / elapsed, "seconds": elapsed}
        history.append(rec)
        log(f"epoch {epoch:2d}  loss {rec['loss']:.4f}  train acc {rec['train_acc']:.3f}  "
            f"test acc {rec['test_acc']:.3f}  {rec['images_per_s']:8.0f} images/s")
    return {"history": history, "trainer": trainer, "batch": batch}


def add_train_arguments(ap):
    """The options of ``python -m rlx_cpu train`` (also used by main())."""
    ap.add_argument("--epochs", type=int, default=8, help="passes over the training set")
    ap.add_argument("--batch-size", type=int, default=32, help="images per SGD step (fixed in the plan)")
    ap.add_argument("--train-size", type=int, default=4096, help="synthetic training images")
    ap.add_argument("--test-size", type=int, default=1024, help="synthetic test images")
    ap.add_argument("--lr", type=float, default=0.05, help="SGD learning rate")
    ap.add_argument("--momentum", type=float, default=0.9, help="SGD momentum")
    ap.add_argument("--threads", type=int, default=None,
                    help="OpenMP threads of the training plan (None: rlx_cpu.get_num_threads())")
    ap.add_argument("--seed", type=int, default=0, help="seed of the data and the initial weights")
    ap.add_argument("--classes", type=int, default=10, help="digits 0..classes-1 (2..10)")
    ap.add_argument("--noise", type=float, default=0.2, help="std of the Gaussian pixel noise")
    ap.add_argument("--target", type=float, default=0.92, help="final test accuracy to reach (exit 1 if missed)")
    ap.add_argument("--profile", action="store_true", help="print the time of one step by thunk kind")
    return ap


TRAIN_DESCRIPTION = ("Train a small CNN (conv-relu-maxpool x2, dense) with SGD on synthetic "
                     "seven-segment digits (generated in code).")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m rlx_cpu train", description=TRAIN_DESCRIPTION,
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_train_arguments(ap)
    return run_train(ap.parse_args(argv))


def run_train(args):
    """Run the training job for parsed `args` (see add_train_arguments)."""
    out = train_cnn(args.epochs, args.batch_size, args.train_size, args.test_size, args.lr, args.momentum,
                    args.threads, args.seed, args.classes, args.noise)
    trainer, hist = out["trainer"], out["history"]
    print(f"threads {trainer.plan.num_threads}, batch {args.batch_size}, "
          f"arena {trainer.plan.arena_nbytes / 1024:.0f} KiB, {len(trainer.plan.thunks)} thunks")
    if args.profile:
        prof = trainer.profile(out["batch"], repeat=20)
        total = sum(s for _, s in prof)
        print(f"one forward+backward run: {total * 1e3:.3f} ms (median per thunk, summed)")
        for kind, sec in time_by_kind(prof).items():
            print(f"  {kind:28s} {sec * 1e3:8.3f} ms  {100 * sec / total:5.1f}%")
    final = hist[-1]["test_acc"]
    ok = final >= args.target
    print(f"final test accuracy {final:.3f} ({'reached' if ok else 'MISSED'} target {args.target:.2f})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
