"""``metainfer serve`` end to end: a real uvicorn server (subprocess, free port, tiny bf16 model on
CPU) driven by the official ``openai`` client. Greedy outputs are checked against the same engine
run in this process; the engine is rendered with the batch-invariant decode attention, so they
must be equal token for token, alone and under 32 concurrent clients."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request

import openai
import pytest
import torch

from harness.engine_loader import import_engine
from test_serve_support import KEY, TINY, im_end_checkpoint, render_batch_invariant, start_server

IM_END = 1002
CTX = 512
STOP_PROMPT = torch.randint(0, 1000, (30,), generator=torch.Generator().manual_seed(4242)).tolist()


@pytest.fixture(scope="module")
def setup(tiny_checkpoint, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve")
    engine_dir = render_batch_invariant(tmp / "engine")
    mod = import_engine(engine_dir)
    first = mod.load(tiny_checkpoint("bf16"), "cpu", max_batch=1, max_seq_len=CTX).generate([STOP_PROMPT], mod.SamplingParams(max_tokens=1))
    ckpt = im_end_checkpoint(tiny_checkpoint("bf16"), tmp / "ckpt", first[0][0])  # STOP_PROMPT now leads to <|im_end|>
    server = start_server(engine_dir, ckpt, max_batch=8, max_seq_len=CTX, max_queue=24)
    eng = mod.load(ckpt, "cpu", max_batch=8, max_seq_len=CTX)
    from transformers import AutoTokenizer

    yield server, mod, eng, AutoTokenizer.from_pretrained(ckpt)
    server.stop()


@pytest.fixture(scope="module")
def client(setup):
    return openai.OpenAI(base_url=setup[0].url, api_key=KEY, max_retries=0, timeout=120)


def _ids(n: int, seed: int) -> list[int]:
    return torch.randint(0, 1000, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _greedy(setup, ids: list[int], n: int) -> list[int]:
    _, mod, eng, _ = setup
    return eng.generate([ids], mod.SamplingParams(max_tokens=n, ignore_eos=True))[0]


def test_models_usage_and_greedy_tokens_of_the_engine(setup, client):
    server, _, _, tok = setup
    assert any("ready at http://127.0.0.1:" in line for line in server.lines)
    assert [m.id for m in client.models.list().data] == [TINY]
    ids = _ids(20, 1)
    r = client.completions.create(model=TINY, prompt=ids, max_tokens=6, temperature=0, extra_body={"ignore_eos": True})
    want = _greedy(setup, ids, 6)
    assert r.choices[0].text == tok.decode(want, skip_special_tokens=True)
    assert r.choices[0].finish_reason == "length"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (20, 6, 26)
    text = client.completions.create(model=TINY, prompt="Hello, world", max_tokens=3, temperature=0, logprobs=2)
    assert text.usage.prompt_tokens == len(tok.encode("Hello, world")) and text.usage.completion_tokens <= 3
    lp = text.choices[0].logprobs
    assert len(lp.token_logprobs) == text.usage.completion_tokens and all(v < 0 for v in lp.token_logprobs)
    assert all(abs(max(top.values()) - v) < 1e-4 for top, v in zip(lp.top_logprobs, lp.token_logprobs))  # greedy: the best


def test_stops_at_im_end(setup, client):
    """The checkpoint's greedy token after STOP_PROMPT is <|im_end|> (id 1002); config.json's EOS is 1000."""
    prompt = STOP_PROMPT
    assert _greedy(setup, prompt, 1) == [IM_END]
    r = client.completions.create(model=TINY, prompt=prompt, max_tokens=8, temperature=0)
    assert (r.choices[0].finish_reason, r.choices[0].text, r.usage.completion_tokens) == ("stop", "", 1)
    r = client.completions.create(model=TINY, prompt=prompt, max_tokens=8, temperature=0, extra_body={"ignore_eos": True})
    assert (r.choices[0].finish_reason, r.usage.completion_tokens) == ("length", 8)
    assert r.choices[0].text == setup[3].decode(_greedy(setup, prompt, 8), skip_special_tokens=True)


def test_chat_stream_equals_plain_reply(client):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name three colours."}]
    kw = dict(model=TINY, messages=msgs, max_completion_tokens=8, temperature=0)
    no_think = {"ignore_eos": True, "chat_template_kwargs": {"enable_thinking": False}}
    plain = client.chat.completions.create(**kw, extra_body=no_think)
    assert plain.usage.completion_tokens == 8 and plain.choices[0].finish_reason == "length"
    assert plain.choices[0].message.content and plain.choices[0].message.model_extra.get("reasoning_content") is None
    chunks = list(client.chat.completions.create(**kw, extra_body=no_think, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[-2].choices[0].finish_reason == "length"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == 8 and chunks[-1].usage.prompt_tokens == plain.usage.prompt_tokens
    # thinking on (the template's default): the reply never closes <think>, so it is all reasoning
    think = client.chat.completions.create(**kw, extra_body={"ignore_eos": True})
    assert think.choices[0].message.model_extra["reasoning_content"] and not think.choices[0].message.content
    streamed = list(client.chat.completions.create(**kw, extra_body={"ignore_eos": True}, stream=True))
    reasoning = "".join((c.choices[0].delta.model_extra or {}).get("reasoning_content") or "" for c in streamed)
    assert reasoning == think.choices[0].message.model_extra["reasoning_content"]


def test_stop_string_cuts_the_text_and_ends_the_request(setup, client):
    ids = _ids(12, 5)
    toks = _greedy(setup, ids, 12)
    tok = setup[3]
    full = tok.decode(toks, skip_special_tokens=True)
    k = next(k for k in range(3, 10) if (w := tok.decode([toks[k]])).strip() and "\ufffd" not in w
             and w not in tok.decode(toks[:k]))
    stop = tok.decode([toks[k]])
    r = client.completions.create(model=TINY, prompt=ids, max_tokens=12, temperature=0, stop=[stop], extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "stop" and r.choices[0].text == full[: full.index(stop)]
    assert r.usage.completion_tokens == k + 1
    t0 = time.monotonic()  # the stop string aborted the request on the engine thread (a step later)
    while setup[0].metric("metainfer_requests_running") != 0:
        assert time.monotonic() - t0 < 5
        time.sleep(0.05)


def test_chat_renders_tools_and_tool_turns(client):
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    msgs = [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]
    kw = dict(model=TINY, messages=msgs, max_tokens=3, temperature=0, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    bare = client.chat.completions.create(**kw)
    with_tools = client.chat.completions.create(**kw, tools=tools)
    assert with_tools.usage.prompt_tokens > bare.usage.prompt_tokens + 40  # the tool schema and format were rendered
    assert with_tools.choices[0].finish_reason in ("length", "stop")


def test_seeded_sampling_is_reproducible(client):
    kw = dict(model=TINY, prompt="Once upon a time", max_tokens=12, temperature=1.0, top_p=0.95, extra_body={"ignore_eos": True, "top_k": 200})
    a = client.completions.create(seed=7, **kw).choices[0].text
    assert a == client.completions.create(seed=7, **kw).choices[0].text
    assert a != client.completions.create(seed=8, **kw).choices[0].text


@pytest.mark.parametrize("kwargs,param", [
    ({"prompt": ""}, "prompt"),
    ({"prompt": list(range(CTX + 5))}, "prompt"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": CTX}, "max_tokens"),
    ({"temperature": 3.0}, "temperature"),
    ({"top_p": 0.0}, "top_p"),
    ({"n": 2}, "n"),
    ({"logit_bias": {"5": 100}}, "logit_bias"),  # accepted and ignored before: refused, naming it
    ({"best_of": 3}, "best_of"),
    ({"suffix": " end"}, "suffix"),
])
def test_bad_requests_get_400_and_the_server_still_serves(client, kwargs, param):
    req = {"model": TINY, "prompt": "hi", "max_tokens": 2, **kwargs}
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(**req)
    assert err.value.status_code == 400 and err.value.body["param"] == param and err.value.body["message"]
    assert client.completions.create(model=TINY, prompt="hi", max_tokens=2).usage.completion_tokens >= 1


def test_api_key_is_required(setup):
    bad = openai.OpenAI(base_url=setup[0].url, api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as err:
        bad.models.list()
    assert err.value.status_code == 401
    with urllib.request.urlopen(setup[0].url.replace("/v1", "/health"), timeout=10) as r:  # open without a key
        assert r.status == 200


def test_disconnect_mid_stream_frees_the_sequence(setup, client):
    server = setup[0]
    aborted = server.metric("metainfer_requests_aborted_total")
    stream = client.completions.create(model=TINY, prompt=_ids(10, 3), max_tokens=100, temperature=0, stream=True,
                                       extra_body={"ignore_eos": True})
    got = [next(stream) for _ in range(3)]
    assert server.metric("metainfer_requests_running") == 1 and all(c.choices[0].text is not None for c in got)
    stream.close()
    t0 = time.monotonic()
    while server.metric("metainfer_requests_running") != 0:
        assert time.monotonic() - t0 < 10, "the disconnected request still holds its slot"
        time.sleep(0.05)
    assert server.metric("metainfer_requests_aborted_total") == aborted + 1
    assert server.metric("metainfer_kv_slots_used") == 0


def test_client_gone_before_a_json_answer_aborts_it(setup):
    server = setup[0]
    impatient = openai.OpenAI(base_url=server.url, api_key=KEY, max_retries=0, timeout=1.5)
    with pytest.raises(openai.APITimeoutError):
        impatient.completions.create(model=TINY, prompt=_ids(6, 77), max_tokens=400, temperature=0, extra_body={"ignore_eos": True})
    t0 = time.monotonic()
    while server.metric("metainfer_requests_running") != 0:
        assert time.monotonic() - t0 < 5, "the request of a client that timed out still runs"
        time.sleep(0.05)


def test_32_concurrent_streams_complete_with_their_own_tokens(setup):
    server = setup[0]
    prompts = [_ids(5 + i % 11, 100 + i) for i in range(32)]
    lengths = [3 + i % 6 for i in range(32)]

    async def one(c: openai.AsyncOpenAI, p: list[int], n: int) -> tuple[str, int]:
        stream = await c.completions.create(model=TINY, prompt=p, max_tokens=n, temperature=0, stream=True,
                                            stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
        text, usage = "", None
        async for ch in stream:
            if ch.choices:
                text += ch.choices[0].text
            if ch.usage:
                usage = ch.usage.completion_tokens
        return text, usage

    async def all_() -> list[tuple[str, int]]:
        async with openai.AsyncOpenAI(base_url=server.url, api_key=KEY, max_retries=0, timeout=300) as c:
            return await asyncio.gather(*(one(c, p, n) for p, n in zip(prompts, lengths)))

    t0 = time.monotonic()
    results = asyncio.run(all_())
    took = time.monotonic() - t0
    tok = setup[3]
    want = setup[2].generate(prompts, setup[1].SamplingParams(max_tokens=8, ignore_eos=True))
    for i, ((text, n), w) in enumerate(zip(results, want)):
        assert n == lengths[i], f"client {i}: {n} tokens, asked for {lengths[i]}"
        assert text == tok.decode(w[: lengths[i]], skip_special_tokens=True), f"client {i}: tokens differ from the engine's"
    assert server.metric("metainfer_requests_running") == 0 and took < 120


def test_full_queue_answers_503_and_clients_gone_while_queued_free_everything(setup):
    server = setup[0]  # 8 slots + 24 queued: a 33rd request in flight is refused

    async def hold(c: openai.AsyncOpenAI, i: int) -> None:
        stream = await c.completions.create(model=TINY, prompt=_ids(4, i), max_tokens=400, temperature=0, stream=True,
                                            extra_body={"ignore_eos": True})
        async for _ in stream:
            pass

    async def main() -> openai.APIStatusError:
        async with openai.AsyncOpenAI(base_url=server.url, api_key=KEY, max_retries=0, timeout=300) as c:
            tasks = [asyncio.create_task(hold(c, i)) for i in range(32)]
            t0 = time.monotonic()
            while (server.metric("metainfer_requests_running"), server.metric("metainfer_requests_waiting")) != (8, 24):
                assert time.monotonic() - t0 < 60 and not any(t.done() for t in tasks)
                await asyncio.sleep(0.1)
            try:
                await c.completions.create(model=TINY, prompt="hi", max_tokens=2)
                raise AssertionError("the 33rd request was accepted")
            except openai.APIStatusError as err:
                refused = err
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return refused

    refused = asyncio.run(main())
    assert refused.status_code == 503 and refused.response.headers.get("retry-after") == "1"
    assert refused.body["code"] == "queue_full"
    t0 = time.monotonic()  # the clients are gone: running and queued requests are all aborted
    while server.metric("metainfer_requests_running") + server.metric("metainfer_requests_waiting") > 0:
        assert time.monotonic() - t0 < 15, "requests of clients that went away still hold slots or queue places"
        time.sleep(0.1)
    assert server.metric("metainfer_kv_slots_used") == 0
    assert openai.OpenAI(base_url=server.url, api_key=KEY, max_retries=0).completions.create(
        model=TINY, prompt="hi", max_tokens=2, extra_body={"ignore_eos": True}).usage.completion_tokens == 2


def _raw(setup, method: str, path: str, body: bytes | None = None) -> tuple[int, dict]:
    """(status, JSON body) of a raw HTTP request with the API key."""
    req = urllib.request.Request(setup[0].url.replace("/v1", "") + path, data=body, method=method,
                                 headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_unknown_model_is_404_model_not_found(client):
    """OpenAI and vLLM answer an unknown model with 404 and code model_not_found, on both endpoints."""
    with pytest.raises(openai.NotFoundError) as err:
        client.completions.create(model="gpt-4", prompt="hi", max_tokens=2)
    assert err.value.status_code == 404 and err.value.body["code"] == "model_not_found" and err.value.body["param"] == "model"
    with pytest.raises(openai.NotFoundError) as err:
        client.chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert err.value.body["code"] == "model_not_found"


def test_unknown_routes_methods_and_bad_json_answer_in_the_openai_shape(setup):
    for method, path, status in (("GET", "/v1/nope", 404), ("POST", "/v1/embeddings", 404), ("GET", "/v1/completions", 405),
                                 ("DELETE", "/v1/models", 405)):
        code, body = _raw(setup, method, path, b"{}" if method == "POST" else None)
        assert code == status and set(body) == {"error"}, (method, path, code, body)
        assert set(body["error"]) == {"message", "type", "param", "code"} and path in body["error"]["message"]
    code, body = _raw(setup, "POST", "/v1/completions", b'{"model": "' + TINY.encode() + b'", "prompt": "hi", "max_tokens": }')
    err = body["error"]
    assert code == 400 and err["param"] is None and err["type"] == "invalid_request_error", body
    assert "not valid JSON" in err["message"] and "JSON decode error" not in err["message"] and not err["message"][:1].isdigit()


def test_a_chat_message_with_an_unknown_role_is_a_400(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=TINY, messages=[{"role": "wizard", "content": "hi"}], max_tokens=2)
    assert err.value.body["param"] == "messages.0.role" and "wizard" in err.value.body["message"]
    ok = client.chat.completions.create(model=TINY, messages=[{"role": "developer", "content": "Be brief."},
                                                                {"role": "user", "content": "hi"}], max_tokens=2)
    assert ok.usage.completion_tokens >= 1


def test_prompt_plus_max_tokens_may_reach_the_context_and_not_pass_it(client):
    """vLLM's rule: prompt + max_tokens <= max_model_len; without max_tokens a request runs to the end of the context."""
    kw = dict(model=TINY, temperature=0, extra_body={"ignore_eos": True})
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(prompt=_ids(CTX - 6, 9), max_tokens=7, **kw)
    assert err.value.body["param"] == "max_tokens" and err.value.body["code"] == "context_length_exceeded"
    r = client.completions.create(prompt=_ids(CTX - 6, 9), max_tokens=6, **kw)
    assert r.usage.total_tokens == CTX
    r = client.completions.create(prompt=_ids(CTX - 1, 10), **kw)  # no max_tokens: what is left of the context
    assert (r.usage.completion_tokens, r.usage.total_tokens, r.choices[0].finish_reason) == (1, CTX, "length")
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(prompt=_ids(CTX, 11), **kw)
    assert err.value.body["param"] == "prompt"


def test_chat_logprobs_in_the_chat_shape_plain_and_streamed(client):
    kw = dict(model=TINY, messages=[{"role": "user", "content": "Name a colour."}], max_completion_tokens=5, temperature=0,
              logprobs=True, top_logprobs=3, extra_body={"ignore_eos": True, "chat_template_kwargs": {"enable_thinking": False}})
    r = client.chat.completions.create(**kw)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens == 5
    for e in content:
        assert e.logprob <= 0 and e.bytes == list(e.token.encode()) and len(e.top_logprobs) == 3
        assert abs(e.top_logprobs[0].logprob - e.logprob) < 1e-4 and e.top_logprobs[0].token == e.token  # greedy: the best
    streamed = [e for c in client.chat.completions.create(**kw, stream=True) if c.choices and c.choices[0].logprobs
                for e in c.choices[0].logprobs.content]
    assert [(e.token, round(e.logprob, 4)) for e in streamed] == [(e.token, round(e.logprob, 4)) for e in content]
    bare = client.chat.completions.create(**{**kw, "top_logprobs": None})
    assert len(bare.choices[0].logprobs.content) == 5 and all(e.top_logprobs == [] for e in bare.choices[0].logprobs.content)
    assert client.chat.completions.create(**{**kw, "logprobs": None, "top_logprobs": None}).choices[0].logprobs is None
    for bad in ({"top_logprobs": 21}, {"logprobs": False}):
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(**{**kw, **bad})
        assert err.value.body["param"] == "top_logprobs"
