"""Random inputs shared by the unit tests."""

import torch

DTYPES = [torch.float32, torch.float64]
TOL = {torch.float32: 1e-5, torch.float64: 1e-10}


def random_qkv(gen: torch.Generator, batch: tuple, t: int, s: int, d_k: int, d_v: int, dtype: torch.dtype):
    """q: (*batch, t, d_k), k: (*batch, s, d_k), v: (*batch, s, d_v), standard normal."""
    return (torch.randn(*batch, t, d_k, generator=gen, dtype=dtype),
            torch.randn(*batch, s, d_k, generator=gen, dtype=dtype),
            torch.randn(*batch, s, d_v, generator=gen, dtype=dtype))
