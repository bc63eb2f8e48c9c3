"""Models for the accuracy harness (bench/accuracy.py): built in code, no downloads, no hub weights.

Each model NAME has three functions here:
- ``NAME()``: the model, seeded (torch.manual_seed(0)), in eval mode;
- ``NAME_inputs()``: its inputs, seeded: a tensor (one positional argument) or a dict (keyword arguments),
  what `warmprof trace --inputs bench/zoo.py:NAME_inputs` takes;
- ``NAME_prerun()``: the same model, then run PRERUN_PASSES times under torch.no_grad() on NAME_inputs()
  inside the factory, so the pass warmprof traces is not the model's first: its true first-pass excess is ~0.

``ZOO`` says, per model, how the harness traces it: ``shape`` (given as `--shape`, warmprof makes the random
input itself: token ids below the first embedding's row count, or randn floats; NAME_inputs makes the same kind
of tensor for the bare child) or, where shape is None, `--inputs bench/zoo.py:NAME_inputs`; and the packages
the model needs (torchvision only in the torch 2.14 venv).

Everything but the demo comes from libraries nobody here wrote (transformers, torchvision) at small configs.
"""

from __future__ import annotations

PRERUN_PASSES = 20
VOCAB = 2000
SEQ = 128

ZOO = {
    "demo": {"shape": "1,128", "needs": ("warmprof",)},
    "llama": {"shape": f"1,{SEQ}", "needs": ("transformers",)},
    "gpt2": {"shape": f"1,{SEQ}", "needs": ("transformers",)},
    "bert": {"shape": f"1,{SEQ}", "needs": ("transformers",)},
    "t5": {"shape": None, "needs": ("transformers",)},
    "mobilenet": {"shape": "1,3,224,224", "needs": ("torchvision",)},
    "resnet18": {"shape": "1,3,224,224", "needs": ("torchvision",)},
}

# What the harness runs when --models is not given (gpt2 is a second decoder LM, on request).
DEFAULT_MODELS = ("demo", "llama", "bert", "t5", "mobilenet", "resnet18")


# torch is imported inside each function, so bench/accuracy.py can read ZOO without it.

def _ids(shape, vocab=VOCAB):
    import torch

    torch.manual_seed(0)
    return torch.randint(0, vocab, shape)


def _prerun(model, inputs):
    import torch

    with torch.no_grad():
        for _ in range(PRERUN_PASSES):
            if isinstance(inputs, dict):
                model(**inputs)
            else:
                model(inputs)
    return model


# --- the demo: warmprof's own small decoder LM (token ids 1x128) ---

def demo():
    import torch
    from warmprof.traces.demo import demo_model

    torch.manual_seed(0)
    return demo_model().eval()


def demo_inputs():
    return _ids((1, 128), vocab=4096)  # DemoLM's default vocab


def demo_prerun():
    return _prerun(demo(), demo_inputs())


# --- a decoder LM: transformers' Llama at a small config ---

def llama():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, intermediate_size=256, max_position_embeddings=512)
    return LlamaForCausalLM(cfg).eval()


def llama_inputs():
    return _ids((1, SEQ))


def llama_prerun():
    return _prerun(llama(), llama_inputs())


# --- another decoder LM: transformers' GPT-2 at a small config ---

def gpt2():
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=VOCAB, n_embd=128, n_layer=2, n_head=4, n_positions=512)
    return GPT2LMHeadModel(cfg).eval()


def gpt2_inputs():
    return _ids((1, SEQ))


def gpt2_prerun():
    return _prerun(gpt2(), gpt2_inputs())


# --- an encoder: transformers' BERT at a small config ---

def bert():
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=VOCAB, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=256, max_position_embeddings=512)
    return BertModel(cfg).eval()


def bert_inputs():
    return _ids((1, SEQ))


def bert_prerun():
    return _prerun(bert(), bert_inputs())


# --- an encoder-decoder on keyword inputs: transformers' T5 at a small config ---

def t5():
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    cfg = T5Config(vocab_size=VOCAB, d_model=128, d_kv=32, d_ff=256, num_layers=2, num_decoder_layers=2,
                   num_heads=4, decoder_start_token_id=0, pad_token_id=0)
    return T5ForConditionalGeneration(cfg).eval()


def t5_inputs():
    import torch

    torch.manual_seed(0)
    return {"input_ids": torch.randint(0, VOCAB, (1, 64)), "decoder_input_ids": torch.randint(0, VOCAB, (1, 16))}


def t5_prerun():
    return _prerun(t5(), t5_inputs())


# --- two torchvision CNNs, random weights (weights=None: nothing downloaded) ---

def mobilenet():
    import torch
    from torchvision.models import mobilenet_v3_small

    torch.manual_seed(0)
    return mobilenet_v3_small(weights=None).eval()


def mobilenet_inputs():
    import torch

    torch.manual_seed(0)
    return torch.randn(1, 3, 224, 224)


def mobilenet_prerun():
    return _prerun(mobilenet(), mobilenet_inputs())


def resnet18():
    import torch
    from torchvision.models import resnet18 as build

    torch.manual_seed(0)
    return build(weights=None).eval()


def resnet18_inputs():
    import torch

    torch.manual_seed(0)
    return torch.randn(1, 3, 224, 224)


def resnet18_prerun():
    return _prerun(resnet18(), resnet18_inputs())
