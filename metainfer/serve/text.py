"""The text side of the server: the checkpoint's tokenizer and chat template, stop ids, and an
incremental detokenizer that applies stop strings.

The tokenizer is whatever ``transformers.AutoTokenizer`` loads from the checkpoint folder, so a
real Qwen3.6 checkpoint and a synthetic one (``metainfer.checkpoint.tokenizer``) work alike.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metainfer.errors import MetainferError

STOP_TOKENS = ("<|im_end|>", "<|endoftext|>")


@dataclass
class TextSide:
    """Tokenizer, default stop ids and chat rendering of one checkpoint.

    Attributes:
        tokenizer: the transformers tokenizer.
        stop_ids: EOS ids that end a turn unless ``ignore_eos``: the tokenizer's EOS, <|im_end|>,
            <|endoftext|>, generation_config.json's and config.json's eos ids.
    """

    tokenizer: Any
    stop_ids: tuple[int, ...]

    @classmethod
    def from_checkpoint(cls, checkpoint: Path) -> TextSide:
        """Load the tokenizer of ``checkpoint``.

        Raises:
            MetainferError: no tokenizer files there (the fix is named).
        """
        from transformers import AutoTokenizer

        checkpoint = Path(checkpoint)
        if not (checkpoint / "tokenizer.json").is_file() and not (checkpoint / "tokenizer_config.json").is_file():
            raise MetainferError(
                f"{checkpoint} has no tokenizer (tokenizer.json / tokenizer_config.json). A real checkpoint ships them; "
                "for a synthetic one written before they were added, pass --add-tokenizer (writes them into the folder)"
            )
        tok = AutoTokenizer.from_pretrained(checkpoint)
        ids = {tok.eos_token_id} | {tok.convert_tokens_to_ids(t) for t in STOP_TOKENS if t in tok.get_vocab()}
        for name in ("generation_config.json", "config.json"):
            f = checkpoint / name
            if f.is_file():
                cfg = json.loads(f.read_text())
                eos = cfg.get("eos_token_id", cfg.get("text_config", {}).get("eos_token_id"))
                ids |= set(eos if isinstance(eos, list) else [eos])
        return cls(tok, tuple(sorted(i for i in ids if isinstance(i, int))))

    def encode(self, text: str) -> list[int]:
        """Token ids of plain text (no special tokens added: Qwen has no BOS)."""
        return self.tokenizer.encode(text, add_special_tokens=False)

    def render_chat(self, messages: list[dict], tools: list[dict] | None, kwargs: dict | None) -> tuple[list[int], bool]:
        """Render messages (and tools) with the chat template plus the generation prompt.

        Returns:
            (prompt token ids, whether the prompt leaves a ``<think>`` block open).
        Raises:
            ValueError: the template rejects the messages (message text says why).
        """
        msgs = [_parse_tool_arguments(m) for m in messages]
        try:
            text = self.tokenizer.apply_chat_template(msgs, tools=tools, tokenize=False, add_generation_prompt=True, **(kwargs or {}))
        except Exception as err:  # jinja2 errors of every kind: the client's messages do not fit the template
            raise ValueError(f"messages could not be rendered with the chat template: {err}") from None
        tail = text.rstrip()
        return self.encode(text), tail.endswith("<think>")

    def decode(self, ids: list[int]) -> str:
        """Text of ids without special tokens (<think> and <tool_call> are not special: they stay)."""
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def token_text(self, tid: int) -> str:
        """The text of one token (for logprobs)."""
        return self.tokenizer.decode([tid])


def _parse_tool_arguments(m: dict) -> dict:
    """An assistant message whose tool-call arguments are JSON strings, with them as objects (the
    template renders each argument as an XML parameter)."""
    calls = m.get("tool_calls")
    if not calls:
        return m
    fixed = []
    for c in calls:
        fn = dict(c.get("function", {}))
        if isinstance(fn.get("arguments"), str):
            try:
                fn["arguments"] = json.loads(fn["arguments"])
            except json.JSONDecodeError:
                pass
        fixed.append({**c, "function": fn})
    return {**m, "tool_calls": fixed}


@dataclass
class Detokenizer:
    """Output text of one request, grown token by token, cut at the first stop string.

    Incremental (vLLM's scheme): each push decodes only the ids from ``prefix_offset`` on and
    keeps what the new ids added beyond the text of ``ids[prefix_offset:read_offset]``, so a
    step costs a few tokens' decode, not the whole reply's; a half-decoded character (U+FFFD at
    the end) waits for the next token. ``push(ids)`` returns the text that became final (a stop
    string's possible beginning is held back until known); ``stopped`` is True once a stop string
    appeared (``text`` ends before it).
    """

    text_side: TextSide
    stops: list[str]
    ids: list[int] = field(default_factory=list)
    text: str = ""
    sent: int = 0
    stopped: bool = False
    prefix_offset: int = 0
    read_offset: int = 0

    def push(self, ids: list[int], *, final: bool = False) -> str:
        """Add ``ids``; returns newly final text (all the rest when ``final``)."""
        if self.stopped:
            return ""
        self.ids += ids
        decode = self.text_side.decode
        prefix = decode(self.ids[self.prefix_offset : self.read_offset])
        window = decode(self.ids[self.prefix_offset :])
        if len(window) > len(prefix) and (final or not window.endswith("\ufffd")):
            self.text += window[len(prefix) :]
            self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
        full, hold = self.text, 0
        for s in self.stops:
            at = full.find(s, max(0, self.sent - len(s)))
            if at != -1:
                full, self.stopped = full[:at], True
        if not self.stopped and not final and self.stops:
            hold = max(_overlap(full, s) for s in self.stops)
        self.text = full
        end = max(self.sent, len(full) - hold)
        new, self.sent = full[self.sent : end], end
        return new


def _overlap(text: str, stop: str) -> int:
    """Length of the longest proper prefix of ``stop`` that ``text`` ends with."""
    for n in range(min(len(stop) - 1, len(text)), 0, -1):
        if text.endswith(stop[:n]):
            return n
    return 0
