"""benchmarks/bench_pool.py's rows that time one kernel of a plan (`only`):
the max pool backward from a forward's indices, with the bytes of that
kernel's buffers."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "benchmarks"))
import bench_pool  # noqa: E402


def test_backward_from_indices_rows_time_that_kernel_alone():
    spec = bench_pool.SHAPES["mp2d_bwd_idx"]
    assert spec["only"] == "max_pool_backward_indices"
    (row,) = bench_pool.bench_shape("mp2d_bwd_idx", spec, [1], 3, None, None)
    assert row["run_ms"] is None and row["best_over_run"] is None and row["kernel_ms"] > 0
    # dy (float32) and the indices (int64) read, dx (float32) written
    nbytes = 32 * 64 * 14 * 14 * (4 + 8) + 32 * 64 * 28 * 28 * 4
    assert np.isclose(row["gbs"], nbytes / (row["kernel_ms"] * 1e-3) / 1e9)


def test_backward_from_x_rows_run_the_whole_plan():
    spec = bench_pool.SHAPES["mp2d_bwd"]
    assert spec["only"] is None
    (row,) = bench_pool.bench_shape("mp2d_bwd", spec, [1], 3, None, None)
    assert row["run_ms"] > 0 and row["kernel_ms"] > 0


def test_thread_counts_are_rows_of_one_interleaved_timing():
    spec = bench_pool.SHAPES["relu"]
    rows = bench_pool.bench_shape("relu", spec, [1, 2], 3, None, None)
    assert [r["threads"] for r in rows] == [1, 2]
    assert all(r["run_ms"] > 0 and r["kernel_ms"] > 0 for r in rows)
    # one memcpy reference for both (the same bytes), timed in the same rounds
    assert rows[0]["memcpy_ms"] == rows[1]["memcpy_ms"]
