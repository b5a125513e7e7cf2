"""Reasoning (``<think> ... </think>``) and Qwen's XML tool calls, parsed out of a chat reply.

Reasoning: when the prompt leaves a ``<think>`` block open (the template's default), the reply up
to ``</think>`` is ``reasoning_content`` and the rest ``content``; a reply that never closes the
block is all reasoning (cut by max_tokens while thinking). A reply that itself starts with
``<think>`` opens the block too. With ``enable_thinking: false`` the template closes the block in
the prompt and the whole reply is content.

Tool calls (Qwen3.5/3.6, Qwen3-Coder format)::

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

Each parameter value is parsed as JSON when it is valid JSON, else kept as a string.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CALL_OPEN = "<tool_call>"
_CALL = re.compile(r"<tool_call>\s*<function=([^>\n]+)>(.*?)</function>\s*</tool_call>", re.S)
_PARAM = re.compile(r"<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>", re.S)


@dataclass
class ToolCall:
    """One parsed call: ``arguments`` is a JSON object string, as OpenAI returns it."""

    id: str
    name: str
    arguments: str

    def to_openai(self, index: int | None = None) -> dict:
        """The OpenAI ``tool_calls`` entry (with ``index`` in stream deltas)."""
        d = {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}
        return d if index is None else {"index": index, **d}


def split_reasoning(text: str, think_open: bool) -> tuple[str | None, str, bool]:
    """(reasoning or None, content, whether the think block is still open) of a reply so far."""
    if not think_open and text.lstrip().startswith(THINK_OPEN):
        text, think_open = text.lstrip()[len(THINK_OPEN) :], True
    if not think_open:
        return None, text, False
    if THINK_CLOSE in text:
        reasoning, content = text.split(THINK_CLOSE, 1)
        return reasoning, content.lstrip("\n"), False
    return text, "", True


def parse_tool_calls(content: str) -> tuple[str | None, list[ToolCall]]:
    """(content outside the calls, stripped, or None if empty; the calls in order)."""
    calls = []
    for m in _CALL.finditer(content):
        args = {}
        for p in _PARAM.finditer(m.group(2)):
            raw = p.group(2)
            try:
                args[p.group(1).strip()] = json.loads(raw)
            except json.JSONDecodeError:
                args[p.group(1).strip()] = raw
        calls.append(ToolCall(f"call_{uuid.uuid4().hex[:24]}", m.group(1).strip(), json.dumps(args, ensure_ascii=False)))
    rest = _CALL.sub("", content).strip() if calls else content
    return (rest or None) if calls else content, calls


def held_prefix(text: str, marker: str) -> int:
    """Where ``text`` must stop being streamed as plain content: the start of ``marker`` in it, or
    of a trailing partial ``marker``; ``len(text)`` when neither."""
    at = text.find(marker)
    if at != -1:
        return at
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:n]):
            return len(text) - n
    return len(text)
