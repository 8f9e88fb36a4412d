"""PyTorch baselines for attention_bf16: scaled_dot_product_attention on the heads as one
batch, pinned to each backend a Hopper user gets for bf16: FlashAttention-2 (`baseline`,
timed eager and under torch.compile) and cuDNN's fused attention (`baseline_cudnn`, the
workload's torch_cudnn baseline). Where this PyTorch has no cuDNN backend, or its cuDNN
cannot serve a shape, baseline_cudnn raises NotImplementedError and the worker reports
that case not applicable to it."""


def baseline(q, k, v, *, BH, S, D, causal):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    shape = (1, BH, S, D)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        o = torch.nn.functional.scaled_dot_product_attention(
            q.view(shape), k.view(shape), v.view(shape), is_causal=bool(causal))
    return o.view(BH, S, D)


def baseline_cudnn(q, k, v, *, BH, S, D, causal):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = getattr(SDPBackend, "CUDNN_ATTENTION", None)
    if backend is None:
        raise NotImplementedError(f"PyTorch {torch.__version__} has no SDPBackend.CUDNN_ATTENTION")
    shape = (1, BH, S, D)
    try:
        with sdpa_kernel(backend):
            o = torch.nn.functional.scaled_dot_product_attention(
                q.view(shape), k.view(shape), v.view(shape), is_causal=bool(causal))
    except RuntimeError as e:
        # SDPA's dispatch refuses before launching anything when the pinned backend cannot
        # run these inputs (cuDNN too old, a shape it does not take): no kernel ran.
        if "No available kernel" not in str(e):
            raise
        raise NotImplementedError(f"cuDNN attention cannot serve {BH}x{S}-d{D}: {str(e).splitlines()[0]}") from e
    return o.view(BH, S, D)
