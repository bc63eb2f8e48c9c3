"""Factories for the generate tests (tests/integration/test_generate.py): transformers' Llama at a small
config, built in code (no download, no hub weights), seeded; and models that misbehave."""

from __future__ import annotations

import torch

VOCAB = 2000


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    return LlamaForCausalLM(cfg).eval()


class RaisesInGenerate(torch.nn.Module):
    """A model whose generate runs its forward once, then raises: the trace must refuse it cleanly."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, 8)

    def forward(self, ids):
        return self.emb(ids)

    def generate(self, ids, **kwargs):
        self(ids)
        raise RuntimeError("planted: the second step failed")
