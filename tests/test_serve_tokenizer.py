"""Tokenizer files of synthetic checkpoints: the real format, special tokens at the real ids, text
round-trips, and the chat template renders system/user/assistant/tool turns and tools."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from metainfer.checkpoint.tokenizer import special_tokens, write_tokenizer
from metainfer.targets import get_model

REAL_IDS = {"<|endoftext|>": 248044, "<|im_start|>": 248045, "<|im_end|>": 248046, "<tool_call>": 248058,
            "</tool_call>": 248059, "<tool_response>": 248066, "</tool_response>": 248067, "<think>": 248068, "</think>": 248069}
TEXT = "Hello, wörld! 日本語 🙂\n  def f(x):\treturn x  <think>plan</think> 42"


@pytest.fixture(scope="module")
def tok(tiny_checkpoint):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_checkpoint("bf16"))


def test_full_model_ids_are_the_real_ones():
    ids = {c: i for c, (i, _) in special_tokens(get_model("qwen3.6-35b-a3b")).items()}
    assert {c: ids[c] for c in REAL_IDS} == REAL_IDS
    assert ids["<|image_pad|>"] == 248056 and ids["<|vision_start|>"] == 248053  # as config.json's image/vision ids


@pytest.mark.slow
def test_full_model_tokenizer_loads_with_transformers(tmp_path):
    from transformers import AutoTokenizer

    write_tokenizer(get_model("qwen3.6-35b-a3b"), tmp_path)
    t = AutoTokenizer.from_pretrained(tmp_path)
    assert {c: t.convert_tokens_to_ids(c) for c in REAL_IDS} == REAL_IDS
    assert t.eos_token_id == 248046 and t.pad_token_id == 248044 and t.bos_token is None
    assert len(t) <= 248320 and t.decode(t.encode(TEXT)) == TEXT
    assert json.loads((tmp_path / "generation_config.json").read_text())["eos_token_id"] == [248046, 248044]


def test_tiny_checkpoint_ships_a_tokenizer_that_round_trips(tok, tiny_checkpoint):
    config = json.loads((tiny_checkpoint("bf16") / "config.json").read_text())["text_config"]
    assert tok.convert_tokens_to_ids("<|endoftext|>") == config["eos_token_id"] == 1000
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 1002
    assert max(tok.get_vocab().values()) < config["vocab_size"]
    ids = tok.encode(TEXT)
    assert tok.decode(ids) == TEXT and len(ids) < len(TEXT.encode())  # merges learnt, not bytes only
    assert tok.convert_tokens_to_ids("<think>") in ids
    assert tok.decode(ids + [tok.eos_token_id], skip_special_tokens=True) == TEXT


def test_chat_template_renders_turns_tools_and_thinking(tok):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert text == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n"
                    "<|im_start|>assistant\n<think>\n")
    off = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    turn = msgs + [
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
        {"role": "tool", "content": "sunny"},
    ]
    text = tok.apply_chat_template(turn, tools=tools, tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n")
    assert '<tools>\n{"name": "get_weather"' in text
    assert ("<|im_start|>assistant\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
            "<parameter=days>\n2\n</parameter>\n</function>\n</tool_call><|im_end|>\n") in text
    assert "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n<|im_start|>assistant\n" in text


def test_serve_refuses_a_checkpoint_without_tokenizer_unless_asked_to_add_it(tiny_checkpoint, tmp_path):
    import shutil
    import subprocess
    import sys

    from metainfer.serve.launch import LaunchArgs, build_state

    ckpt = tmp_path / "old"
    shutil.copytree(tiny_checkpoint("bf16"), ckpt)
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        (ckpt / name).unlink()
    cmd = [sys.executable, "-m", "metainfer.cli", "serve", "--model", "qwen3.6-35b-a3b-tiny", "--quant", "bf16", "--gpu", "cpu",
           "--checkpoint", str(ckpt), "--port", "1"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "has no tokenizer" in r.stderr and "--add-tokenizer" in r.stderr
    args = LaunchArgs("qwen3.6-35b-a3b-tiny", "bf16", "cpu", ckpt, None, "127.0.0.1", 1, None, 2, 64, 4, None, add_tokenizer=True)
    state = build_state(args)
    assert (ckpt / "tokenizer.json").is_file() and state.text.stop_ids == (1000, 1002)
    assert state.text.tokenizer.decode(state.text.encode(TEXT)) == TEXT


def test_serve_takes_the_engine_the_build_made_else_a_render_it_removes(tmp_path, monkeypatch):
    """Without --engine: the head of the target's branch, from its worktree while that is clean (a worktree folder
    without the branch is not a build); else the template rendered into a temporary folder that is gone after the
    process exits."""
    import subprocess
    import sys

    from metainfer.serve.launch import LaunchArgs, engine_dir

    repo = tmp_path / "clone"
    for d in ("harness", "templates", "metainfer"):
        (repo / d).mkdir(parents=True)
    name = "qwen3.6-35b-a3b-tiny-bf16-cpu"
    git = lambda *a: subprocess.run(["git", *a], cwd=repo, check=True, capture_output=True)
    (repo / "generated" / name / "engine").mkdir(parents=True)
    (repo / "generated" / name / "engine" / "__init__.py").write_text("")
    (repo / ".gitignore").write_text(".metainfer/\n")
    git("init", "-q")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "engine")
    built = repo / ".metainfer" / "worktrees" / name / "generated" / name
    git("worktree", "add", "-q", "-b", f"metainfer/{name}", str(repo / ".metainfer" / "worktrees" / name))
    monkeypatch.chdir(repo)
    args = LaunchArgs("qwen3.6-35b-a3b-tiny", "bf16", "cpu", tmp_path, None, "127.0.0.1", 1, None, 2, 64, 4, None)
    assert engine_dir(args).resolve() == built.resolve()
    code = ("import sys, pathlib; from metainfer.serve.launch import LaunchArgs, engine_dir; "
            "a = LaunchArgs('qwen3.6-35b-a3b-tiny', 'bf16', 'cpu', pathlib.Path('.'), None, '127.0.0.1', 1, None, 2, 64, 4, None); "
            "print(engine_dir(a))")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    out = Path(r.stdout.strip())
    assert r.returncode == 0 and out.name == name and "not optimised" in r.stderr, r.stderr
    assert not out.exists()  # the temporary render went with the process
