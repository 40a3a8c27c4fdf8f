"""`amp-tui profile --hf`: Hugging Face transformers' block of the family, the code many users train.

Llama: `LlamaDecoderLayer` with its rotary embedding, SDPA attention, heads/tp, key-value heads/tp
and intermediate/tp (head_dim kept, so the shard is one GPU's share of the full model). GPT-2:
`GPT2Block` with SDPA, at tp 1 only: its fused Conv1D projections tie the heads to the hidden size,
so a tp shard of it cannot be built without rewriting it (the plain-PyTorch block can). The
embedding and the head stay plain PyTorch (shapes.py): transformers' are one look-up and one
projection either way. Imported only for --hf, once torch is known to be installed.
"""

from __future__ import annotations

from amp_tui.core.base.errors import SpecError
from amp_tui.profiling.shapes import LayerShape


def _transformers():
    try:
        import transformers
    except ImportError:
        raise SpecError("--hf", "transformers", "not installed: pip install transformers (or leave out --hf "
                                                "to time the plain-PyTorch layers)") from None
    return transformers


def hf_supported(shape: LayerShape, tp: int) -> bool:
    return shape.family == "llama" or tp == 1


def hf_block(shape: LayerShape, tp: int):
    """transformers' block of the family at tp's shard shape, called as block(hidden) -> hidden."""
    import torch

    transformers = _transformers()
    if shape.experts:
        raise SpecError("--hf", shape.name, "mixture-of-experts blocks are timed in plain PyTorch only (leave out --hf)")
    if shape.family == "llama":
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

        heads, kv = max(shape.heads // tp, 1), max(shape.kv_heads // tp, 1)
        config = transformers.LlamaConfig(hidden_size=shape.hidden, num_attention_heads=heads, num_key_value_heads=kv,
                                          head_dim=shape.hidden // shape.heads,
                                          intermediate_size=max(shape.ffn // tp, 1), rope_theta=shape.theta,
                                          max_position_embeddings=shape.sequence, vocab_size=shape.vocab,
                                          attn_implementation="sdpa")
        layer, rotary = LlamaDecoderLayer(config, layer_idx=0), LlamaRotaryEmbedding(config)

        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.layer, self.rotary = layer, rotary

            def forward(self, x):
                positions = torch.arange(x.shape[1], device=x.device)[None]
                out = self.layer(x, position_ids=positions, position_embeddings=self.rotary(x, positions))
                return out[0] if isinstance(out, tuple) else out
        return Block()
    if tp != 1:
        raise SpecError("--hf", f"tp {tp}", "GPT-2's Hugging Face block is timed at tp 1 only")
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block

    config = transformers.GPT2Config(n_embd=shape.hidden, n_head=shape.heads, n_inner=shape.ffn,
                                     n_positions=shape.sequence, vocab_size=shape.vocab, bos_token_id=None,
                                     eos_token_id=None, attn_implementation="sdpa")

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = GPT2Block(config, layer_idx=0)

        def forward(self, x):
            out = self.layer(x)
            return out[0] if isinstance(out, tuple) else out
    return Block()
