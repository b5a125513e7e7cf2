"""The source of a fake ``vllm`` package for the vLLM runner's tests (written as ``vllm/__init__.py`` into a
temporary folder on PYTHONPATH); shared by tests/test_vllm_peer.py and tests/test_workloads_vllm.py."""

FAKE_VLLM = '''
"""Stand-in for the third-party vllm package: the offline API surface run_vllm.py uses, timed by sleeping
(4 ms a call, 1 us per prompt token, 0.2 ms per output step)."""
import json, os, time
__version__ = "0.25.1-fake"
class SamplingParams:
    def __init__(self, *, max_tokens, ignore_eos, temperature, detokenize):
        assert ignore_eos is True and temperature == 0.0 and detokenize is False
        self.max_tokens = max_tokens
class _Out:
    def __init__(self, ids): self.token_ids = ids
class _Req:
    def __init__(self, ids): self.outputs = [_Out(ids)]
class LLM:
    def __init__(self, **kw):
        assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0" and os.environ["VLLM_USE_FLASHINFER_SAMPLER"] == "0"
        json.dump(kw, open(os.environ["FAKE_VLLM_KWARGS"], "w"))
    def generate(self, reqs, sp, use_tqdm=True):
        time.sleep(0.004 + 1e-6 * sum(len(r["prompt_token_ids"]) for r in reqs) + 0.0002 * sp.max_tokens)
        return [_Req([(sum(r["prompt_token_ids"]) + i) % 997 for i in range(sp.max_tokens)]) for r in reqs]
'''
