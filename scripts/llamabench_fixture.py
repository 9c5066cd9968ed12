"""Make tests/data/llamabench_tiny_llama.{json,jsonl}: real llama-bench output on a tiny GGUF of tiny-llama.

How it was made (CPU, once; nothing but the JSON output is committed):
  pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d .llama && tar xzf .llama/llama_cpp_python-*.tar.gz -C .llama
  L=.llama/llama_cpp_python-0.3.36/vendor/llama.cpp
  cmake -S $L -B $L/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF && ninja -C $L/build llama-bench llama-server          # ~15 min on 2 cores
  PYTHONPATH=src:$L/gguf-py python scripts/llamabench_fixture.py --out .llama/tiny-llama-q8_0.gguf
  $L/build/bin/llama-bench -m .llama/tiny-llama-q8_0.gguf -p 64 -n 16 -d 0,512 -r 5 -t 2 -o json  > tests/data/llamabench_tiny_llama.json
  $L/build/bin/llama-bench -m .llama/tiny-llama-q8_0.gguf -p 64 -n 16 -d 0,512 -r 5 -t 2 -o jsonl > tests/data/llamabench_tiny_llama.jsonl

The GGUF: floorline's tiny-llama (zoo.py) with seeded random weights, every matrix Q8_0 (gguf-py's quantiser), norms
f32, and the byte-level vocabulary of servedir.py (llama.cpp's "gpt2" tokenizer model, no merges).
"""

from __future__ import annotations

import argparse

import numpy as np


def main() -> None:
    import gguf
    import torch

    from floorline.bench import models
    from floorline.core import zoo
    from floorline.serve import servedir

    p = argparse.ArgumentParser()
    p.add_argument("--model", default="tiny-llama")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    a = zoo.ZOO[args.model]
    sd = {k: v.float().numpy() for k, v in models.build_random(a, torch.device("cpu"), "fp32", seed=0)
          .state_dict().items()}

    w = gguf.GGUFWriter(args.out, "llama")
    w.add_context_length(a.max_pos)
    w.add_embedding_length(a.hidden)
    w.add_block_count(a.layers)
    w.add_feed_forward_length(a.intermediate)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.kv_heads)
    w.add_key_length(a.head_dim)
    w.add_value_length(a.head_dim)
    w.add_rope_dimension_count(a.head_dim)
    w.add_rope_freq_base(a.rope_theta)
    w.add_layer_norm_rms_eps(a.rms_eps)
    w.add_vocab_size(a.vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(servedir.vocab_words(a.vocab))
    w.add_token_types([gguf.TokenType.NORMAL] * a.vocab)
    w.add_token_merges(["a b"])  # llama.cpp wants a merges array; one merge, never applied to a prompt of letters
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)

    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    per_layer = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                 "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                 "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
    for i in range(a.layers):
        for hf, gg in per_layer.items():
            names[f"model.layers.{i}.{hf}.weight"] = f"blk.{i}.{gg}.weight"
    for hf, gg in names.items():
        t = sd[hf]
        if t.ndim == 2:
            q = gguf.quants.quantize(t.astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(gg, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(gg, t.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(args.out)


if __name__ == "__main__":
    main()
