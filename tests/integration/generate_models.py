"""Factories for the generate tests (tests/integration/test_generate.py): transformers' Llama at a small
config, built in code (no download, no hub weights), seeded; and models that misbehave."""

from __future__ import annotations

import time

import torch

VOCAB = 2000
PLANTED_SLEEP_S = 0.05  # llama_cold's first forward in a process sleeps this long, once
_slept = False


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    return LlamaForCausalLM(cfg).eval()


def llama_cold():
    """llama() whose first forward in each process sleeps PLANTED_SLEEP_S: a one-time cost that load
    cannot shorten, paid only by a call that really is the process's first (a control that ran the model
    before its timed first call would lose it)."""
    model = llama()

    def once(module, args):
        global _slept
        if not _slept:
            _slept = True
            time.sleep(PLANTED_SLEEP_S)

    model.register_forward_pre_hook(once)
    return model


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
