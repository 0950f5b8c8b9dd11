"""The one attention module every vispe backbone uses, with the encoding hooks at fixed points.

qkv -> q/k norm -> rotate (and transform_v) -> SDPA(attn_mask = sum of logit biases) -> transform_out
-> + value terms -> proj. Parameter names match timm's ``Attention`` so timm weights load unchanged.
Softmax weights are never materialised here: PyTorch's fused SDPA kernels stay available.
"""

from __future__ import annotations

from typing import Iterable, Optional

import torch
import torch.nn.functional as F
from timm.layers import Attention as TimmAttention
from torch import nn

from vispe.encodings.base import Encoding
from vispe.positions import Positions


def _has(enc: Encoding, hook: str) -> bool:
    return hook in enc.active_hooks() or (hook in ('transform_v', 'transform_out') and hasattr(enc, hook))


class Attention(nn.Module):
    """Multi-head self-attention with positional-encoding hooks.

    Args:
        dim: model width. num_heads: heads. qkv_bias, qk_norm, scale_norm, proj_bias, attn_drop, proj_drop,
        norm_layer: as in timm's Attention.
        encodings: per-layer encoding instances, keyed by registry name (stored under ``pe``).
    """

    def __init__(
        self,
        dim: int,
        num_heads: int = 8,
        qkv_bias: bool = False,
        qk_norm: bool = False,
        scale_norm: bool = False,
        proj_bias: bool = True,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        norm_layer: Optional[type] = None,
        encodings: Optional[dict] = None,
    ) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f'model width {dim} is not divisible by num_heads {num_heads}')
        if (qk_norm or scale_norm) and norm_layer is None:
            raise ValueError('qk_norm and scale_norm need a norm_layer')
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.q_norm = norm_layer(self.head_dim) if qk_norm else nn.Identity()
        self.k_norm = norm_layer(self.head_dim) if qk_norm else nn.Identity()
        self.attn_drop = nn.Dropout(attn_drop)
        self.norm = norm_layer(dim) if scale_norm else nn.Identity()
        self.proj = nn.Linear(dim, dim, bias=proj_bias)
        self.proj_drop = nn.Dropout(proj_drop)
        self.pe = nn.ModuleDict(encodings or {})

    @classmethod
    def from_timm(cls, attn: nn.Module, encodings: Optional[dict] = None) -> Attention:
        """Take over a timm ``Attention``'s submodules (weights included) and add encodings."""
        if type(attn) is not TimmAttention or getattr(attn, 'gate', None) is not None:
            raise TypeError(
                'vispe can convert blocks whose attention is timm.layers.Attention without a gate; this model uses '
                f'{type(attn).__module__}.{type(attn).__name__}. Pick a plain ViT (vit_*, deit_*) or build '
                'vispe.Attention into the model yourself.'
            )
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.num_heads, new.head_dim = attn.num_heads, attn.head_dim
        for name in ('qkv', 'q_norm', 'k_norm', 'attn_drop', 'norm', 'proj', 'proj_drop'):
            setattr(new, name, getattr(attn, name))
        new.pe = nn.ModuleDict(encodings or {})
        return new.train(attn.training)

    def encodings(self, hook: str) -> Iterable[Encoding]:
        return [enc for enc in self.pe.values() if _has(enc, hook)]

    def attention_weights(self, q, k, attn_mask=None, is_causal: bool = False) -> torch.Tensor:
        """softmax(q k^T / sqrt(d) + mask), with dropout in training: (B, H, N, N)."""
        logits = (q * self.head_dim**-0.5) @ k.transpose(-2, -1)
        if is_causal:
            n = logits.shape[-1]
            causal = torch.ones(n, n, dtype=torch.bool, device=logits.device).triu(1)
            logits = logits.masked_fill(causal, float('-inf'))
        if attn_mask is not None:
            logits = (
                logits.masked_fill(~attn_mask, float('-inf')) if attn_mask.dtype == torch.bool else logits + attn_mask
            )
        return self.attn_drop(logits.softmax(dim=-1))

    def forward(
        self,
        x: torch.Tensor,
        pos: Optional[Positions] = None,
        attn_mask: Optional[torch.Tensor] = None,
        is_causal: bool = False,
    ) -> torch.Tensor:
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        q, k = self.q_norm(q), self.k_norm(k)  # (B, H, N, d) each
        if pos is not None:
            for enc in self.encodings('rotate'):
                q, k = enc.rotate(q, k, pos)
            for enc in self.encodings('transform_v'):
                v = enc.transform_v(v, pos)
            for enc in self.encodings('logit_bias'):
                bias = enc.logit_bias(q, k, pos).to(q.dtype)  # (B or 1, H, N, N)
                attn_mask = bias if attn_mask is None else attn_mask + bias
        value_terms = self.encodings('value_term') if pos is not None else []
        if any(enc.needs_attn_weights for enc in value_terms):
            # an encoding sums over the attention weights themselves (iRPE on V): materialise them, only here
            attn = self.attention_weights(q, k, attn_mask, is_causal)  # (B, H, N, N)
            out = attn @ v
        else:
            attn = None
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=attn_mask, dropout_p=self.attn_drop.p if self.training else 0.0, is_causal=is_causal
            )  # (B, H, N, d)
        if pos is not None:
            for enc in self.encodings('transform_out'):
                out = enc.transform_out(out, pos)
            for enc in value_terms:
                out = out + (enc.value_term(v, pos, attn) if enc.needs_attn_weights else enc.value_term(v, pos))
        out = self.norm(out.transpose(1, 2).reshape(B, N, C))
        return self.proj_drop(self.proj(out))
