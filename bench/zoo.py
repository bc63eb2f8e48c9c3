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

Everything but the demo comes from libraries nobody here wrote (transformers, torchvision, diffusers) at small
configs, random weights.

Issue 39's seven families (``FAMILIES``, `--models families`): diffusers' UNet2DConditionModel (``unet``) and
AutoencoderKL's decode path (``vae``), transformers' Whisper (``whisper``), Mixtral (``mixtral``, a mixture of
experts), Mamba (``mamba``, the state-space model; transformers' slow path on CPU, a Python loop over the
sequence), DeBERTa-v2 (``deberta``) and ConvNeXt (``convnext``). diffusers and transformers are pinned in
pyproject.toml's ``bench`` extra. Each forward pass takes roughly 5-60 ms on one CPU thread (bench/ACCURACY.md
has the times measured).

``unet_planted``: the same UNet with a cost planted in one block: the module warmprof names
``UNet2DConditionModel.down_blocks.0.resnets.0`` (PLANTED_MODULE), on its FIRST call only, allocates a fresh
64 MiB float32 tensor and writes every page of it (torch.empty(PLANTED_FLOATS).fill_(1.0)), then runs the block
as ever. The tensor is kept alive (on the block, ``_planted``) so freeing it costs nothing inside the pass;
later calls do nothing extra. ``plant_cost()`` is that allocation alone, what `bench/acc_child.py planted`
times in a fresh process without warmprof: the ground truth for the allocator_growth warmprof books in that
block.
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
    # issue 39's families
    "whisper": {"shape": None, "needs": ("transformers",)},
    "mixtral": {"shape": f"1,{SEQ}", "needs": ("transformers",)},
    "mamba": {"shape": "1,64", "needs": ("transformers",)},
    "deberta": {"shape": f"1,{SEQ}", "needs": ("transformers",)},
    "convnext": {"shape": "1,3,160,160", "needs": ("transformers",)},
    "unet": {"shape": None, "needs": ("diffusers",)},
    "vae": {"shape": "1,4,16,16", "needs": ("diffusers",)},
    # the UNet with 64 MiB first written in one block on its first call (PLANTED_MODULE; see the docstring)
    "unet_planted": {"shape": None, "needs": ("diffusers",),
                     "planted": {"module": "UNet2DConditionModel.down_blocks.0.resnets.0",
                                 "cause": "allocator_growth"}},
}

# What the harness runs when --models is not given (gpt2 is a second decoder LM, on request).
DEFAULT_MODELS = ("demo", "llama", "bert", "t5", "mobilenet", "resnet18")

# Named groups --models takes beside model names: issue 39's seven families (unet_planted on request).
FAMILIES = ("unet", "vae", "whisper", "mixtral", "mamba", "deberta", "convnext")
GROUPS = {"default": DEFAULT_MODELS, "families": FAMILIES}

PLANTED_MODULE = ZOO["unet_planted"]["planted"]["module"]
PLANTED_FLOATS = 16 * 1024 * 1024  # 64 MiB of float32


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


# --- issue 39's families. Speech encoder-decoder on keyword inputs: transformers' Whisper ---

WHISPER_FRAMES = 400  # input_features frames: 2 x max_source_positions (the encoder's two convolutions halve it)


def whisper():
    import torch
    from transformers import WhisperConfig, WhisperModel

    torch.manual_seed(0)
    cfg = WhisperConfig(vocab_size=VOCAB, num_mel_bins=80, d_model=128, encoder_layers=2, decoder_layers=2,
                        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=256,
                        decoder_ffn_dim=256, max_source_positions=WHISPER_FRAMES // 2, max_target_positions=64,
                        pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    return WhisperModel(cfg).eval()


def whisper_inputs():
    import torch

    torch.manual_seed(0)
    return {"input_features": torch.randn(1, 80, WHISPER_FRAMES),
            "decoder_input_ids": torch.randint(0, VOCAB, (1, 16))}


def whisper_prerun():
    return _prerun(whisper(), whisper_inputs())


# --- a mixture of experts: transformers' Mixtral (4 experts, 2 per token) ---

def mixtral():
    import torch
    from transformers import MixtralConfig, MixtralForCausalLM

    torch.manual_seed(0)
    cfg = MixtralConfig(vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
                        max_position_embeddings=512)
    return MixtralForCausalLM(cfg).eval()


def mixtral_inputs():
    return _ids((1, SEQ))


def mixtral_prerun():
    return _prerun(mixtral(), mixtral_inputs())


# --- a state-space model: transformers' Mamba (no mamba_ssm / causal_conv1d kernels: the slow path) ---

def mamba():
    import torch
    from transformers import MambaConfig, MambaForCausalLM

    torch.manual_seed(0)
    cfg = MambaConfig(vocab_size=VOCAB, hidden_size=64, state_size=16, num_hidden_layers=2, expand=2,
                      conv_kernel=4, use_mambapy=False)
    return MambaForCausalLM(cfg).eval()


def mamba_inputs():
    return _ids((1, 64))


def mamba_prerun():
    return _prerun(mamba(), mamba_inputs())


# --- an encoder with disentangled (relative position) attention: transformers' DeBERTa-v2, v3-style ---

def deberta():
    import torch
    from transformers import DebertaV2Config, DebertaV2Model

    torch.manual_seed(0)
    cfg = DebertaV2Config(vocab_size=VOCAB, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                          intermediate_size=256, max_position_embeddings=512, relative_attention=True,
                          position_buckets=64, max_relative_positions=-1, norm_rel_ebd="layer_norm",
                          share_att_key=True, pos_att_type=["p2c", "c2p"], position_biased_input=False)
    return DebertaV2Model(cfg).eval()


def deberta_inputs():
    return _ids((1, SEQ))


def deberta_prerun():
    return _prerun(deberta(), deberta_inputs())


# --- a modern CNN: transformers' ConvNeXt (7x7 depthwise convolutions, LayerNorm), 1x3x160x160 ---

def convnext():
    import torch
    from transformers import ConvNextConfig, ConvNextForImageClassification

    torch.manual_seed(0)
    cfg = ConvNextConfig(num_channels=3, hidden_sizes=[32, 64, 128, 256], depths=[2, 2, 2, 2], image_size=160,
                         num_labels=10)
    return ConvNextForImageClassification(cfg).eval()


def convnext_inputs():
    import torch

    torch.manual_seed(0)
    return torch.randn(1, 3, 160, 160)


def convnext_prerun():
    return _prerun(convnext(), convnext_inputs())


# --- diffusers' UNet2DConditionModel (the denoiser of a latent diffusion model) on keyword inputs ---

def unet():
    import torch
    from diffusers import UNet2DConditionModel

    torch.manual_seed(0)
    return UNet2DConditionModel(
        sample_size=16, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(32, 64),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32, attention_head_dim=8, norm_num_groups=32).eval()


def unet_inputs():
    import torch

    torch.manual_seed(0)
    return {"sample": torch.randn(1, 4, 16, 16), "timestep": torch.tensor([10]),
            "encoder_hidden_states": torch.randn(1, 8, 32)}


def unet_prerun():
    return _prerun(unet(), unet_inputs())


# --- the same UNet with 64 MiB first written in PLANTED_MODULE on its first call (see the docstring) ---

def plant_cost():
    """The planted cost alone: a fresh 64 MiB float32 tensor, every page written. Returns it (kept alive)."""
    import torch

    return torch.empty(PLANTED_FLOATS).fill_(1.0)


def _planted(block):
    """`block` (a module) with its class swapped for a subclass whose forward first runs plant_cost() on the
    first call only (the tensor kept on the block), so the module keeps its name and path."""
    base = type(block)

    def forward(self, *args, **kwargs):
        if getattr(self, "_planted", None) is None:
            self._planted = plant_cost()
        return base.forward(self, *args, **kwargs)

    block.__class__ = type("Planted" + base.__name__, (base,), {"forward": forward})
    block._planted = None
    return block


def unet_planted():
    model = unet()
    _planted(model.down_blocks[0].resnets[0])  # PLANTED_MODULE
    return model


def unet_planted_inputs():
    return unet_inputs()


def unet_planted_prerun():
    return _prerun(unet_planted(), unet_planted_inputs())


# --- diffusers' AutoencoderKL, the decode path only (latents 1x4x16x16 -> an image 1x3x32x32) ---

def vae():
    import torch
    from diffusers import AutoencoderKL

    class VAEDecode(torch.nn.Module):
        """AutoencoderKL's decoder: forward(latents) is vae.decode(latents).sample (the encoder never runs)."""

        def __init__(self, vae):
            super().__init__()
            self.vae = vae

        def forward(self, latents):
            return self.vae.decode(latents).sample

    torch.manual_seed(0)
    ae = AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
                       up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(32, 64), layers_per_block=1,
                       latent_channels=4, norm_num_groups=32, sample_size=32)
    return VAEDecode(ae).eval()


def vae_inputs():
    import torch

    torch.manual_seed(0)
    return torch.randn(1, 4, 16, 16)


def vae_prerun():
    return _prerun(vae(), vae_inputs())
