"""The layers `amp-tui profile` times, written in plain PyTorch at a model family's shapes.

Imported only once torch is known to be installed (backend.py). One GPU of a tensor-parallel group
computes a shard: heads/tp (and kv_heads/tp, at least one), ffn/tp, the vocabulary/tp of the
embedding and the head; the group's all-reduces are left out (the cost model adds them from the
links). The families:

  gpt    LayerNorm, fused QKV, causal attention (SDPA), tanh-GELU MLP, biases (GPT-2, Megatron)
  llama  RMSNorm, grouped-query attention with rotary embeddings, SwiGLU, no biases
  MoE    a block whose MLP is a router over every expert and `ep`'s share of the experts, each
         token going to its top_k (load balanced, as the planner assumes)

AMP's explicit layer lists (gpt2-medium) are built layer by layer: a norm, a projection to the
vocabulary without its loss, the loss alone on its logits.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _shard(count: int, tp: int) -> int:
    return max(count // tp, 1)


class GptBlock(nn.Module):
    def __init__(self, hidden: int, heads: int, ffn: int, tp: int, experts: "Experts | None" = None):
        super().__init__()
        self.heads = _shard(heads, tp)
        self.head_dim = hidden // heads
        inner = self.heads * self.head_dim
        self.norm1, self.norm2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * inner)
        self.proj = nn.Linear(inner, hidden)
        self.experts = experts
        if experts is None:
            self.fc1, self.fc2 = nn.Linear(hidden, _shard(ffn, tp)), nn.Linear(_shard(ffn, tp), hidden)

    def mlp(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        attention = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attention.transpose(1, 2).reshape(b, s, -1))
        y = self.norm2(x)
        return x + (self.experts(y) if self.experts is not None else self.mlp(y))


def _rotary(sequence: int, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    inverse = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(sequence, dtype=torch.float32), inverse)
    return torch.cos(angles).repeat(1, 2), torch.sin(angles).repeat(1, 2)


def _rotate(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


class LlamaBlock(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, ffn: int, tp: int, sequence: int,
                 theta: float = 10000.0, experts: "Experts | None" = None):
        super().__init__()
        self.heads, self.kv_heads = _shard(heads, tp), _shard(kv_heads, tp)
        self.head_dim = hidden // heads
        self.norm1, self.norm2 = nn.RMSNorm(hidden), nn.RMSNorm(hidden)
        self.q = nn.Linear(hidden, self.heads * self.head_dim, bias=False)
        self.kv = nn.Linear(hidden, 2 * self.kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(self.heads * self.head_dim, hidden, bias=False)
        cos, sin = _rotary(sequence, self.head_dim, theta)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.experts = experts
        if experts is None:
            width = _shard(ffn, tp)
            self.w1 = nn.Linear(hidden, width, bias=False)
            self.w3 = nn.Linear(hidden, width, bias=False)
            self.w2 = nn.Linear(width, hidden, bias=False)

    def mlp(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))

    def forward(self, x):
        b, s, _ = x.shape
        y = self.norm1(x)
        q = self.q(y).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(y).view(b, s, 2, self.kv_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        cos, sin = self.cos[:s].to(q.dtype), self.sin[:s].to(q.dtype)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        group = self.heads // self.kv_heads
        if group > 1:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        attention = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(attention.transpose(1, 2).reshape(b, s, -1))
        y = self.norm2(x)
        return x + (self.experts(y) if self.experts is not None else self.mlp(y))


class Experts(nn.Module):
    """A router over every expert and the local share of them (experts / ep): each token's top_k
    picks among the local ones, so a GPU does the expert work it would do under balanced routing."""

    def __init__(self, hidden: int, num_experts: int, top_k: int, ffn: int, ep: int, tp: int, gated: bool):
        super().__init__()
        self.router = nn.Linear(hidden, num_experts, bias=False)
        self.local = max(num_experts // ep, 1)
        self.top_k = min(top_k, self.local)
        width = _shard(ffn, tp)
        self.gated = gated
        self.up = nn.ModuleList(nn.Linear(hidden, (2 if gated else 1) * width, bias=not gated)
                                for _ in range(self.local))
        self.down = nn.ModuleList(nn.Linear(width, hidden, bias=not gated) for _ in range(self.local))

    def forward(self, x):
        shape = x.shape
        tokens = x.reshape(-1, shape[-1])
        scores = self.router(tokens).float().softmax(dim=-1)[:, :self.local]
        weights, chosen = scores.topk(self.top_k, dim=-1)
        out = torch.zeros_like(tokens)
        for expert in range(self.local):
            rows, slot = (chosen == expert).nonzero(as_tuple=True)
            up = self.up[expert](tokens[rows])
            if self.gated:
                gate, value = up.chunk(2, dim=-1)
                hidden = F.silu(gate) * value
            else:
                hidden = F.gelu(up, approximate="tanh")
            out.index_add_(0, rows, self.down[expert](hidden) * weights[rows, slot, None].to(tokens.dtype))
        return out.view(shape)


class Embedding(nn.Module):
    def __init__(self, vocab: int, hidden: int, tp: int, sequence: int, positions: bool):
        super().__init__()
        self.tokens = nn.Embedding(_shard(vocab, tp), hidden)
        self.positions = nn.Embedding(sequence, hidden) if positions else None

    def forward(self, ids):
        x = self.tokens(ids)
        if self.positions is not None:
            x = x + self.positions(torch.arange(ids.shape[1], device=ids.device))
        return x


class Head(nn.Module):
    """The final norm (optional), the projection to the vocabulary/tp, and (optionally) the loss on
    fp32 logits, as a trainer upcasts them."""

    def __init__(self, hidden: int, vocab: int, tp: int, norm: str | None, loss: bool):
        super().__init__()
        self.norm = {"layer": nn.LayerNorm, "rms": nn.RMSNorm}[norm](hidden) if norm else None
        self.proj = nn.Linear(hidden, _shard(vocab, tp), bias=False)
        self.loss = loss

    def forward(self, x, labels=None):
        if self.norm is not None:
            x = self.norm(x)
        logits = self.proj(x)
        if not self.loss:
            return logits
        return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten())


class Loss(nn.Module):
    """A loss layer alone (AMP's lists): cross-entropy on its input logits, upcast to fp32."""

    def forward(self, logits, labels):
        return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten())


class Norm(nn.Module):
    def __init__(self, hidden: int, rms: bool):
        super().__init__()
        self.norm = nn.RMSNorm(hidden) if rms else nn.LayerNorm(hidden)

    def forward(self, x):
        return self.norm(x)
