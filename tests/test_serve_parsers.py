"""Reply parsing of ``metainfer serve`` (no server): reasoning split, Qwen XML tool calls, the
incremental detokenizer's stop strings, and the streamed chat deltas adding up to the whole reply."""

from __future__ import annotations

import json

import pytest

from metainfer.serve.chat import _message, _Reply
from metainfer.serve.parsers import held_prefix, parse_tool_calls, split_reasoning
from metainfer.serve.text import Detokenizer, TextSide

CALL = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
        "<parameter=opts>\n{\"unit\": \"c\"}\n</parameter>\n</function>\n</tool_call>")


def test_reasoning_split():
    assert split_reasoning("plan A\n</think>\n\nThe answer.", True) == ("plan A\n", "The answer.", False)
    assert split_reasoning("still thinking", True) == ("still thinking", "", True)
    assert split_reasoning("<think>x</think>y", False) == ("x", "y", False)
    assert split_reasoning("plain </think> text", False) == (None, "plain </think> text", False)


def test_tool_calls_are_parsed_with_json_values():
    content, calls = parse_tool_calls("Let me check.\n" + CALL + "\n" + CALL.replace("Paris", "Oslo"))
    assert content == "Let me check."
    assert [c.name for c in calls] == ["get_weather", "get_weather"]
    assert json.loads(calls[0].arguments) == {"city": "Paris", "days": 3, "opts": {"unit": "c"}}
    assert json.loads(calls[1].arguments)["city"] == "Oslo" and calls[0].id != calls[1].id
    assert parse_tool_calls("no call here") == ("no call here", [])
    assert parse_tool_calls("<tool_call>\n<function=broken>") == ("<tool_call>\n<function=broken>", [])
    msg, called = _message("thinking\n</think>\n\n" + CALL, True, True)
    assert called and msg["content"] is None and msg["reasoning_content"] == "thinking\n"
    assert msg["tool_calls"][0]["function"]["name"] == "get_weather" and msg["tool_calls"][0]["type"] == "function"


def test_held_prefix():
    assert held_prefix("abc <tool_call> x", "<tool_call>") == 4
    assert held_prefix("abc <tool", "<tool_call>") == 4
    assert held_prefix("abc", "<tool_call>") == 3


@pytest.mark.parametrize("think_open,tools", [(True, False), (True, True), (False, True)])
def test_streamed_deltas_add_up_to_the_reply(think_open, tools):
    reply_text = "a plan</think>\n\nSunny in " + ("" if think_open else "<think>x</think>") + "Paris. " + CALL
    reply = _Reply(think_open, tools)
    r_all = c_all = ""
    for end in range(1, len(reply_text) + 1):  # one character at a time: every split point
        r, c = reply.deltas(reply_text[:end], end == len(reply_text))
        r_all, c_all = r_all + r, c_all + c
    whole_r, whole_c, _ = split_reasoning(reply_text, think_open)
    assert r_all == (whole_r or "")
    assert c_all == (whole_c[: whole_c.index("<tool_call>")] if tools else whole_c)


class _ByteTok:
    """A stand-in tokenizer: one token per UTF-8 byte (exercises half-decoded characters)."""

    def decode(self, ids, skip_special_tokens=True):
        return bytes(ids).decode("utf-8", errors="replace")


def test_detokenizer_holds_partial_characters_and_stops():
    side = TextSide(_ByteTok(), ())
    d = Detokenizer(side, ["STOP", "\n\n"])
    text = "héllo wörld ST"
    got = "".join(d.push([b]) for b in text.encode())
    assert got == "héllo wörld " and not d.stopped  # "ST" held: it may begin "STOP"
    assert d.push(list(b"OP and more")) == "" and d.stopped and d.text == "héllo wörld "
    d2 = Detokenizer(side, ["STOP"])
    assert "".join(d2.push([b]) for b in "ST is not it".encode()) + d2.push([], final=True) == "ST is not it"


def test_incremental_detokenizer_gives_the_whole_decode(tiny_checkpoint):
    """Token by token (random ids: byte tokens that split characters, merges, specials, fillers)
    the streamed text is exactly the decode of all ids at once."""
    import torch
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_checkpoint("bf16"))
    side = TextSide(tok, ())
    utf8 = list(tok.encode("é日本🙂 wörld"))  # multi-byte characters split across byte tokens
    for seed in range(20):
        ids = torch.randint(0, len(tok), (60,), generator=torch.Generator().manual_seed(seed)).tolist()
        ids[10:10] = utf8
        d = Detokenizer(side, [])
        out = "".join(d.push([t]) for t in ids) + d.push([], final=True)
        assert out == tok.decode(ids, skip_special_tokens=True), seed
