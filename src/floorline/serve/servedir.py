"""A model directory any server can load: config.json + safetensors (seeded random weights) + a tokenizer.

Owns: writing such a directory for an `Arch`, so a real server (`transformers serve`, in the tests and in
scripts/gpu_check.sh) serves exactly the model whose floor floorline counts, and `floorline run --model DIR` runs
the same weights in-process. The tokenizer is built with the `tokenizers` library: a word-level vocabulary of the
architecture's size whose first 52 tokens are the ASCII letters, so a prompt of N letters is N tokens. The model has no
end-of-sequence token, so a server cannot stop early. May not time anything.

    python -m floorline.serve.servedir --model tiny-qwen2 --out DIR [--device cuda] [--dtype bf16] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from floorline.core.arch import Arch
from floorline.core.errors import UserError

LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
# Qwen2's pre-tokenizer (transformers builds Qwen2Tokenizer for model_type qwen2 whatever tokenizer_config.json
# says, from tokenizer.json's vocab and merges with this pipeline; other families load tokenizer.json as it is)
PRETOKENIZE_REGEX = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""


def vocab_words(vocab_size: int) -> list[str]:
    """Token strings: ids 0-51 the single ASCII letters (a prompt of N letters is N tokens: there are no merges);
    the rest four-letter strings (base 52), which a model may generate and which decode to plain ASCII, so a
    streaming server never holds a partial character back."""
    words = list(LETTERS[:vocab_size])
    for i in range(len(words), vocab_size):
        digits = []
        for _ in range(4):
            i, r = divmod(i, len(LETTERS))
            digits.append(LETTERS[r])
        words.append("".join(reversed(digits)))
    return words


def write_tokenizer(vocab_size: int, out: Path) -> None:
    """tokenizer.json (byte-level BPE without merges, Qwen2's pipeline) and tokenizer_config.json."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    words = vocab_words(vocab_size)
    tok = Tokenizer(models.BPE(vocab={w: i for i, w in enumerate(words)}, merges=[], continuing_subword_prefix="",
                               end_of_word_suffix="", fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1 << 30, "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
    }, indent=1))


def random_prompt(n_tokens: int, rng) -> str:
    """A prompt of exactly n tokens for this tokenizer: n random letters, no spaces."""
    return "".join(rng.choice(list(LETTERS), size=n_tokens))


def write_model_dir(a: Arch, out: str | Path, device: str = "cpu", dtype: str = "bf16", seed: int = 0) -> Path:
    """Random weights (models.build_random) saved with save_pretrained, plus the tokenizer; returns the directory."""
    import torch

    from floorline.bench import models

    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    model = models.build_random(a, torch.device(device), dtype, seed)
    model.generation_config.eos_token_id = None  # nothing to stop on: every request runs to max_tokens
    model.generation_config.pad_token_id = None
    model.save_pretrained(d, safe_serialization=True)
    del model
    write_tokenizer(a.vocab, d)
    return d


def main(argv: list[str] | None = None) -> int:
    from floorline.core import zoo

    p = argparse.ArgumentParser(prog="python -m floorline.serve.servedir", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="a zoo name (floorline models)")
    p.add_argument("--out", required=True, help="directory to write")
    p.add_argument("--device", default="cpu", help="where the random weights are made (cuda is faster for 7B)")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    try:
        d = write_model_dir(zoo.resolve(args.model), args.out, args.device, args.dtype, args.seed)
    except UserError as e:
        print(f"floorline.servedir: error: {e}", file=sys.stderr)
        return 2
    print(d)
    return 0


if __name__ == "__main__":
    sys.exit(main())
