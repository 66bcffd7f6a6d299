"""The character-level tokenizer of the local backend, built offline with `tokenizers` and shipped in assets/.

One token per character (digits, lower-case letters, punctuation, space) plus <pad>, <s>, </s>: 64 tokens,
so a random-init model gives every answer character a 1/64 chance, enough for GRPO to find a signal.
`python -m executor.backends.local.tokenizer` rewrites the shipped files (the test checks they match).
"""

from __future__ import annotations

import json
from pathlib import Path

ASSETS_DIR = Path(__file__).parent / "assets" / "tokenizer"
SPECIAL_TOKENS = ("<pad>", "<s>", "</s>")
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
CHARACTERS = "0123456789abcdefghijklmnopqrstuvwxyz +-*/=<>?!.,:;()[]{}#@&%'"
VOCAB_SIZE = len(SPECIAL_TOKENS) + len(CHARACTERS)
assert VOCAB_SIZE == 64, VOCAB_SIZE


def vocabulary() -> dict[str, int]:
    tokens = [*SPECIAL_TOKENS, *CHARACTERS]
    return {tok: i for i, tok in enumerate(tokens)}


def build_tokenizer_json() -> str:
    """The tokenizer.json text: a BPE model without merges (= one token per character), fused decoding."""
    from tokenizers import AddedToken, Tokenizer, decoders, models

    tok = Tokenizer(models.BPE(vocab=vocabulary(), merges=[], unk_token=None, fuse_unk=False))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.decoder = decoders.Fuse()
    return tok.to_str(pretty=True)


def tokenizer_config() -> dict[str, object]:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "pad_token": "<pad>",
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 512,
    }


def write_tokenizer(directory: Path) -> None:
    """Write tokenizer.json + tokenizer_config.json + special_tokens_map.json (what HF and SGLang load)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (directory / name).write_bytes((ASSETS_DIR / name).read_bytes())


def _regenerate_assets() -> None:
    ASSETS_DIR.mkdir(parents=True, exist_ok=True)
    (ASSETS_DIR / "tokenizer.json").write_text(build_tokenizer_json() + "\n", encoding="utf-8")
    (ASSETS_DIR / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(), indent=2) + "\n", encoding="utf-8")
    specials = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"}
    (ASSETS_DIR / "special_tokens_map.json").write_text(json.dumps(specials, indent=2) + "\n", encoding="utf-8")


def encode(text: str) -> list[int]:
    """Character ids without the tokenizers library (the task and the tests use this)."""
    vocab = vocabulary()
    return [vocab[c] for c in text]


def decode(ids: list[int]) -> str:
    inverse = {i: t for t, i in vocabulary().items()}
    return "".join(inverse[i] for i in ids if i not in (PAD_ID, BOS_ID, EOS_ID))


if __name__ == "__main__":
    _regenerate_assets()
    print(f"wrote {ASSETS_DIR}")
