"""The independent oracle for fp8_gemm: the e4m3 inputs arrive as their exact float64
values (decoded from their bits on the host) and the product stays float64, scales
applied after it (exact arithmetic does not care where); the tolerance covers fp32
accumulation and the one rounding to bfloat16."""


def reference(A, B, scale_a, scale_b, *, M, N, K):
    assert A.shape == (M, K) and B.shape == (N, K) and scale_a.shape == scale_b.shape == (1,)
    return (A @ B.T) * (scale_a[0] * scale_b[0])
