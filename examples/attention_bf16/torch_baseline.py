"""PyTorch baseline for attention_bf16: scaled_dot_product_attention on the flash
backend (the one a user on Hopper gets for bf16), the heads as one batch."""


def baseline(q, k, v, *, BH, S, D, causal):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    shape = (1, BH, S, D)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        o = torch.nn.functional.scaled_dot_product_attention(
            q.view(shape), k.view(shape), v.view(shape), is_causal=bool(causal))
    return o.view(BH, S, D)
