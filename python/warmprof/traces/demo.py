"""The built-in demo: a small decoder-only transformer LM built in code (no downloads).

Input: token ids of shape (batch, seq). Output: logits (batch, seq, vocab). generate(ids, max_new_tokens)
decodes greedily (no KV cache), for `warmprof trace --demo --generate N`.
"""

from __future__ import annotations

import math

DEFAULT_SHAPE = (1, 128)


def _build_classes():
    import torch
    from torch import nn

    class Attention(nn.Module):
        def __init__(self, d_model: int, n_heads: int) -> None:
            super().__init__()
            self.n_heads = n_heads
            self.qkv = nn.Linear(d_model, 3 * d_model)
            self.proj = nn.Linear(d_model, d_model)

        def forward(self, x: "torch.Tensor") -> "torch.Tensor":
            b, t, d = x.shape
            q, k, v = self.qkv(x).split(d, dim=-1)
            h = self.n_heads
            q = q.view(b, t, h, d // h).transpose(1, 2)
            k = k.view(b, t, h, d // h).transpose(1, 2)
            v = v.view(b, t, h, d // h).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) / math.sqrt(d // h)
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).reshape(b, t, d)
            return self.proj(y)

    class MLP(nn.Module):
        def __init__(self, d_model: int) -> None:
            super().__init__()
            self.up = nn.Linear(d_model, 4 * d_model)
            self.act = nn.GELU()
            self.down = nn.Linear(4 * d_model, d_model)

        def forward(self, x: "torch.Tensor") -> "torch.Tensor":
            return self.down(self.act(self.up(x)))

    class Block(nn.Module):
        def __init__(self, d_model: int, n_heads: int) -> None:
            super().__init__()
            self.ln1 = nn.LayerNorm(d_model)
            self.attn = Attention(d_model, n_heads)
            self.ln2 = nn.LayerNorm(d_model)
            self.mlp = MLP(d_model)

        def forward(self, x: "torch.Tensor") -> "torch.Tensor":
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class DemoLM(nn.Module):
        """Embedding -> n_layers x (attention + MLP) -> final norm -> LM head."""

        def __init__(self, vocab: int = 4096, d_model: int = 256, n_heads: int = 4, n_layers: int = 4,
                     max_seq: int = 1024) -> None:
            super().__init__()
            self.vocab = vocab
            self.tok = nn.Embedding(vocab, d_model)
            self.pos = nn.Embedding(max_seq, d_model)
            self.blocks = nn.ModuleList([Block(d_model, n_heads) for _ in range(n_layers)])
            self.ln_f = nn.LayerNorm(d_model)
            self.head = nn.Linear(d_model, vocab, bias=False)

        def forward(self, ids: "torch.Tensor") -> "torch.Tensor":
            t = ids.shape[1]
            pos = torch.arange(t, device=ids.device)
            x = self.tok(ids) + self.pos(pos)
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln_f(x))

        @torch.no_grad()
        def generate(self, ids: "torch.Tensor", max_new_tokens: int = 16, **options: object) -> "torch.Tensor":
            """Greedy decoding of exactly max_new_tokens tokens, for `warmprof trace --demo --generate N`.
            No KV cache: each step is a forward over the whole sequence so far (a new length every step,
            which a compiled forward recompiles for). transformers-style options that mean nothing else
            for greedy decoding (min_new_tokens, do_sample=False, attention_mask, pad_token_id) are
            accepted; a KV cache or sampling is refused."""
            if options.get("cache_implementation") is not None:
                raise ValueError("the demo LM has no KV cache: drop --kv-cache")
            if options.get("do_sample"):
                raise ValueError("the demo LM decodes greedily only (do_sample=False)")
            for _ in range(max_new_tokens):
                nxt = self(ids)[:, -1].argmax(dim=-1, keepdim=True)
                ids = torch.cat([ids, nxt], dim=1)
            return ids

    return DemoLM


def demo_model(**kwargs):
    """A fresh DemoLM in eval mode with a fixed seed (same weights every time)."""
    import torch

    DemoLM = _build_classes()
    g = torch.random.fork_rng()
    with g:
        torch.manual_seed(0)
        model = DemoLM(**kwargs)
    return model.eval()


def build():
    """Factory for `warmprof trace warmprof.traces.demo:build`."""
    return demo_model()
