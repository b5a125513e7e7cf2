"""Tokenizer files for synthetic checkpoints, in the real Qwen3.5/3.6 checkpoint's format.

``tokenizer.json`` (a byte-level BPE: Qwen2's split regex, 256 byte tokens, merges learnt from a
small fixed text, then unreachable ``<|reserved_N|>`` fillers up to the first special id),
``tokenizer_config.json`` (``Qwen2Tokenizer``, ``added_tokens_decoder``, eos ``<|im_end|>``,
pad ``<|endoftext|>``, no BOS, the chat template) and ``generation_config.json`` (eos ids
``[<|im_end|>, <|endoftext|>]``). Any text round-trips (byte-level, no normaliser).

Special tokens sit at the real ids: ``<|endoftext|>`` 248044, ``<|im_start|>`` 248045,
``<|im_end|>`` 248046, ..., ``<tool_call>`` 248058, ``</tool_call>`` 248059, ``<think>`` 248068,
``</think>`` 248069 (26 tokens, Qwen3's list and order moved up by 96,401). The tiny twin's
vocab (1024) has room for 24 above its EOS id 1000: it keeps the same list without the six
FIM/repo tokens, from id 1000 on. transformers' ``AutoTokenizer`` loads the folder.
"""

from __future__ import annotations

import json
from pathlib import Path

from metainfer.targets.models import ModelSpec

SPECIAL_TOKENS: list[tuple[str, bool]] = [  # (content, special) in id order from <|endoftext|>
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True), ("<|box_end|>", True),
    ("<|quad_start|>", True), ("<|quad_end|>", True), ("<|vision_start|>", True), ("<|vision_end|>", True),
    ("<|vision_pad|>", True), ("<|image_pad|>", True), ("<|video_pad|>", True),
    ("<tool_call>", False), ("</tool_call>", False),
    ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False), ("<|fim_pad|>", False),
    ("<|repo_name|>", False), ("<|file_sep|>", False),
    ("<tool_response>", False), ("</tool_response>", False), ("<think>", False), ("</think>", False),
]
TINY_DROPPED = {"<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"}
SPLIT_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
MERGES = 1000  # BPE vocab learnt from the text below (bytes included), capped by the room below the specials
CHAT_TEMPLATE = Path(__file__).with_name("data") / "chat_template.jinja"
_TEXT = """The quick brown fox jumps over the lazy dog. An inference engine serves one model on one GPU:
it reads the weights once per decode step, so the time per token is the bytes moved over the bandwidth.
def main():\n    return [i * i for i in range(10)]  # 0, 1, 4, 9
User: What is the capital of France? Assistant: The capital of France is Paris.
{"name": "get_weather", "arguments": {"city": "Tokyo", "unit": "celsius"}} 1234567890 <think> </think>
Sequences arrive, are prefilled in chunks, decode one token per step, and leave when they stop."""


def special_tokens(model: ModelSpec) -> dict[str, tuple[int, bool]]:
    """``content -> (id, special)`` for ``model``: from its config's EOS id (``<|endoftext|>``) on.

    Raises:
        ValueError: the list does not fit below the model's vocab_size.
    """
    base = model.text["eos_token_id"]
    names = [(c, s) for c, s in SPECIAL_TOKENS if not (model.tiny and c in TINY_DROPPED)]
    if base + len(names) > model.text["vocab_size"]:
        raise ValueError(f"{model.name}: {len(names)} special tokens from id {base} do not fit in vocab_size {model.text['vocab_size']}")
    return {c: (base + i, s) for i, (c, s) in enumerate(names)}


def build_tokenizer(model: ModelSpec):
    """The ``tokenizers.Tokenizer`` of ``model`` (see the module docstring)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    specials = special_tokens(model)
    base = model.text["eos_token_id"]

    def fresh(bpe) -> Tokenizer:
        tok = Tokenizer(bpe)
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(SPLIT_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
        tok.decoder = decoders.ByteLevel()
        return tok

    learner = fresh(models.BPE())
    trainer = trainers.BpeTrainer(
        vocab_size=min(MERGES, base), initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    learner.train_from_iterator([_TEXT] * 4, trainer)
    learnt = json.loads(learner.to_str())["model"]
    vocab: dict[str, int] = dict(learnt["vocab"])
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in learnt["merges"]]
    for i in range(len(vocab), base):  # never produced by a merge: decodes as its own text
        vocab[f"<|reserved_{i}|>"] = i
    tok = fresh(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    for content, (tid, special) in sorted(specials.items(), key=lambda kv: kv[1][0]):
        added = AddedToken(content, special=special, normalized=False, lstrip=False, rstrip=False, single_word=False)
        n = tok.add_special_tokens([added]) if special else tok.add_tokens([added])
        assert n == 1 and tok.token_to_id(content) == tid, (content, tid, tok.token_to_id(content))
    return tok


def tokenizer_config(model: ModelSpec) -> dict:
    """``tokenizer_config.json`` as the real checkpoint writes it (with the chat template)."""
    specials = special_tokens(model)
    decoder = {
        str(tid): {"content": c, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": s}
        for c, (tid, s) in specials.items()
    }
    return {
        "add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": decoder,
        "additional_special_tokens": [c for c, (_, s) in specials.items() if s and c not in ("<|endoftext|>", "<|im_end|>")],
        "bos_token": None, "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>", "errors": "replace",
        "model_max_length": model.text.get("max_position_embeddings", 262144), "pad_token": "<|endoftext|>",
        "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer", "unk_token": None,
        "chat_template": CHAT_TEMPLATE.read_text(),
    }


def write_tokenizer(model: ModelSpec, out: Path) -> None:
    """Write tokenizer.json, tokenizer_config.json and generation_config.json for ``model`` into ``out``.

    Raises:
        ValueError: the special tokens do not fit the model's vocab (see ``special_tokens``).
    """
    out = Path(out)
    build_tokenizer(model).save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(model), indent=2, ensure_ascii=False) + "\n")
    ids = special_tokens(model)
    gen = {"bos_token_id": ids["<|endoftext|>"][0], "eos_token_id": [ids["<|im_end|>"][0], ids["<|endoftext|>"][0]],
           "pad_token_id": ids["<|endoftext|>"][0]}
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
