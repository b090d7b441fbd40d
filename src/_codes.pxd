# Integer codes the compiler stores in thunks and the kernels switch on,
# defined once here.  Each kernel module exports the Python names it has
# always had from these (e.g. _conv2d.ALGO_IM2COL = CONV_IM2COL), and
# rlx_cpu/algorithms.py builds its IntEnums from those exports.

# Conv2D forward algorithm (rlx_cpu.algorithms.ConvAlgorithm).
cdef enum:
    CONV_REFERENCE = 0
    CONV_IM2COL = 1
    CONV_GEMM_1X1 = 2
    CONV_DIRECT = 3
    CONV_WINOGRAD = 4
    CONV_WINOGRAD_F4 = 5

# Conv backward algorithm (rlx_cpu.algorithms.ConvBackwardAlgorithm).
cdef enum:
    CONV_BWD_REFERENCE = 0
    CONV_BWD_GEMM = 1
    CONV_BWD_GEMM_1X1 = 2
    CONV_BWD_WIDE = 3
    CONV_BWD_WINOGRAD = 4

# Window pool kind and the form of max-pool indices.
cdef enum:
    POOL_KIND_MAX = 0
    POOL_KIND_AVG = 1
cdef enum:
    POOL_IND_NONE = 0
    POOL_IND_PLANE = 1        # PyTorch: flat index within the (n, c) plane
    POOL_IND_ONNX = 2         # ONNX MaxPool Indices: flat index over [N, C, *spatial]
    POOL_IND_ONNX_COL = 3     # ONNX storage_order=1: plane offset + column-major spatial index

# Patch-matrix layout of im2col / col2im.
cdef enum:
    COL_LAYOUT_ROWS = 0       # [N*L, C*K]
    COL_LAYOUT_ONNX = 1       # [N, C*K, L]

# The one cap on patch-matrix floats (2 GB of float32) for every GEMM path:
# conv2d im2col, conv3d / conv-transpose vol2col scratch and the conv
# backward slab.  Past it a constant-memory kernel runs instead (an
# ISTFT-as-conv head would otherwise gather ~150 GB of patches).
cdef enum:
    MAX_COL_FLOATS = 512 * 1024 * 1024
