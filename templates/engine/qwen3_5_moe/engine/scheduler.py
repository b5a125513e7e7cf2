"""Continuous batching over an ``Engine``: requests arrive and leave at any step (nano-vllm's
scheduler + ``LLMEngine.step`` in one small class).

``step()`` is schedule -> run -> postprocess:

1. admit waiting requests while slots are free (FIFO; the rest stay queued: admission control);
2. prefill: one packed forward over the next prompt pieces of the prefilling sequences, at most
   ``prefill_chunk_tokens`` tokens in all (at least one piece). A prompt is cut at multiples of
   ``prefill_chunk_tokens`` from its own start, whatever else the step holds, so its state does
   not depend on its neighbours; a sequence whose prompt completes samples its first token;
3. decode: one token for each sequence that was running before the step (at most
   ``max_decode_batch``; more take turns);
4. postprocess: stop ids / max_tokens end a sequence and free its slot at once.

``abort(request_id)`` frees the slot immediately (call it between steps, from the thread that
steps). Each sequence samples with its own generator; greedy tokens are those of the same request
run alone whenever the forward is batch-invariant (it is on CPU with the split-K decode
attention reference, ``attention_decode_splits > 0``; the padded SDPA decode path is not).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Callable, Hashable

import torch

from .sampling import SamplingParams, make_generator, sample_batch
from .sequence import Sequence, Status, StepOutput, TokenLogprob

if TYPE_CHECKING:
    from .runtime import Engine


class Scheduler:
    """Requests in, ``StepOutput`` s out, one ``step()`` at a time, over one engine's slots.

    Attributes:
        engine: the loaded engine (its slots are this scheduler's; do not prefill on it meanwhile).
        waiting: admitted-later requests in arrival order; prefilling, running: those holding slots.
        on_forward: None, or called (on the stepping thread) each time a forward of ``step`` is queued on
            the device, before the host waits for it. A server hands out the previous step's outputs
            there, so that its per-token work runs while the device computes, not between steps.
    """

    def __init__(self, engine: Engine):
        self.engine = engine
        self.chunk = max(1, engine.tunables.prefill_chunk_tokens)
        self.max_decode = max(1, engine.tunables.max_decode_batch)
        self.waiting: deque[Sequence] = deque()
        self.prefilling: list[Sequence] = []
        self.running: list[Sequence] = []
        self._live: dict[Hashable, Sequence] = {}
        self._aborted: list[StepOutput] = []
        self.on_forward: Callable[[], None] | None = None

    # ---- requests -----------------------------------------------------------------------
    def add_request(self, request_id: Hashable, prompt: list[int], params: SamplingParams) -> None:
        """Queue a request; it is admitted by a later ``step`` when a slot is free and the KV pool
        has blocks for its whole ``len(prompt) + max_tokens - 1`` tokens (taken at admission, so a
        running sequence never runs out of blocks).

        Raises:
            ValueError: ``request_id`` is already live; an empty prompt or ids outside [0, V);
                ``len(prompt) + max_tokens - 1`` above the engine's max_seq_len, or more KV blocks
                than the whole pool holds. Nothing is queued then.
        """
        eng = self.engine
        if request_id in self._live:
            raise ValueError(f"request {request_id!r} is already live; use a new request id")
        eng._check_tokens([prompt], "add_request")
        eng._check_room([len(prompt) + params.max_tokens - 1], "add_request")
        kv = eng.cache.kv
        if kv.blocks_new(len(prompt) + params.max_tokens - 1) > kv.capacity_blocks:
            raise ValueError(
                f"add_request: prompt + max_tokens need {kv.blocks_new(len(prompt) + params.max_tokens - 1)} KV blocks of "
                f"{kv.block_size} tokens, more than the whole pool ({kv.capacity_blocks}); shorten the request or load "
                "the engine with more free memory (a lower kv_pool_headroom_pct)"
            )
        stop = set(params.stop_token_ids)
        if not params.ignore_eos:
            stop.add(eng.dims.eos_token_id)
        seq = Sequence(request_id, list(prompt), params, frozenset(stop), make_generator(params, eng.device))
        self._live[request_id] = seq
        self.waiting.append(seq)

    def abort(self, request_id: Hashable) -> bool:
        """End a live request now and free its slot; the next ``step`` reports it with
        finish_reason "abort". Returns False if no such request is live (already finished)."""
        seq = self._live.pop(request_id, None)
        if seq is None:
            return False
        if seq.status is Status.WAITING:
            self.waiting.remove(seq)
        else:
            (self.prefilling if seq.status is Status.PREFILLING else self.running).remove(seq)
            self.engine.cache.release([seq.slot])
            seq.slot = -1
        seq.status, seq.finish_reason = Status.FINISHED, "abort"
        self._aborted.append(self._output(seq, [], None))
        return True

    def abort_all(self) -> None:
        """Abort every live request (frees every slot this scheduler holds)."""
        for rid in list(self._live):
            self.abort(rid)

    def has_unfinished(self) -> bool:
        """True while a request is live or an abort is still to be reported."""
        return bool(self._live or self._aborted)

    @property
    def num_waiting(self) -> int:
        """Requests queued for a slot."""
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        """Requests holding a slot (prefilling or decoding)."""
        return len(self.prefilling) + len(self.running)

    def tokens_held(self) -> int:
        """Tokens in the state of the live slots (KV positions in use per attention layer)."""
        return sum(self.engine.cache.lengths[s.slot] for s in self.prefilling + self.running)

    # ---- the step -----------------------------------------------------------------------
    def step(self) -> list[StepOutput]:
        """Admit, prefill the next pieces, decode the running sequences, finish the ended ones.

        Returns one ``StepOutput`` per request that produced a token, finished or was aborted
        since the last step. An exception from the model leaves the requests live (call
        ``abort_all`` to free their slots).
        """
        outs, self._aborted = self._aborted, []
        self._admit()
        decoding = self.running[: self.max_decode]
        if self.prefilling:
            outs += self._prefill()
        if decoding:
            outs += self._decode(decoding)
        return outs

    def _admit(self) -> None:
        """Admit waiting requests in arrival order while a slot and the KV blocks of the next one are free."""
        cache = self.engine.cache
        while self.waiting and cache.free_slots:
            total = len(self.waiting[0].prompt) + self.waiting[0].params.max_tokens - 1
            if cache.kv.blocks_new(total) > cache.kv.free_blocks:
                break  # first come, first served: later (shorter) requests wait behind it
            seq = self.waiting.popleft()
            seq.slot = cache.allocate(1)[0]
            cache.reserve([(seq.slot, total)])
            seq.status = Status.PREFILLING
            self.prefilling.append(seq)

    def _prefill(self) -> list[StepOutput]:
        budget, chosen, pieces = self.chunk, [], []
        for seq in self.prefilling:
            piece = seq.next_piece(self.chunk)
            if chosen and len(piece) > budget:
                break
            chosen.append(seq)
            pieces.append(piece)
            budget -= len(piece)
        out = self.engine._run(pieces, [s.slot for s in chosen], decode=False, last_only=True, return_hidden=False)
        rows, complete = [], []
        for row, (seq, piece) in enumerate(zip(chosen, pieces)):
            seq.done_prompt += len(piece)
            if seq.done_prompt == len(seq.prompt):
                rows.append(row)
                complete.append(seq)
        if not complete:
            return []
        for seq in complete:
            self.prefilling.remove(seq)
            seq.status = Status.RUNNING
            self.running.append(seq)
        outs = self._postprocess(complete, out.logits[rows])
        self.running = [s for s in self.running if s.status is not Status.FINISHED]
        return outs

    def _decode(self, seqs: list[Sequence]) -> list[StepOutput]:
        out = self.engine._run([[s.out[-1]] for s in seqs], [s.slot for s in seqs], decode=True, last_only=True, return_hidden=False)
        outs = self._postprocess(seqs, out.logits)
        # rotate, so that more live sequences than max_decode_batch take turns
        n = len(seqs)  # seqs is running[:n]: sequences that completed a prefill this step sit behind them
        self.running = [s for s in self.running[n:] + self.running[:n] if s.status is not Status.FINISHED]
        return outs

    def _postprocess(self, seqs: list[Sequence], logits: torch.Tensor) -> list[StepOutput]:
        """Sample one token per sequence from fp32 logits [B, V]; finish those that end."""
        if self.on_forward is not None:
            self.on_forward()
        if logits.is_cuda:  # wait for the forward with the GIL released (a server's HTTP thread runs meanwhile)
            torch.cuda.current_stream(logits.device).synchronize()
        toks = sample_batch(logits, [s.params for s in seqs], [s.gen for s in seqs])
        outs = []
        for row, (seq, tok) in enumerate(zip(seqs, toks)):
            seq.out.append(tok)
            lps = None if seq.params.logprobs is None else [_logprob(logits[row], tok, seq.params.logprobs)]
            if seq.check_stop():
                self._finish(seq)
            outs.append(self._output(seq, [tok], lps))
        return outs

    def _finish(self, seq: Sequence) -> None:
        self.engine.cache.release([seq.slot])
        seq.slot, seq.status = -1, Status.FINISHED
        self._live.pop(seq.request_id, None)

    @staticmethod
    def _output(seq: Sequence, toks: list[int], lps: list[TokenLogprob] | None) -> StepOutput:
        return StepOutput(
            seq.request_id, toks, lps, seq.status is Status.FINISHED, seq.finish_reason, len(seq.prompt), len(seq.out)
        )


def _logprob(logits: torch.Tensor, token: int, top: int) -> TokenLogprob:
    """Natural-log probabilities from fp32 logits [V] (raw, before temperature and filters)."""
    lp = torch.log_softmax(logits.float(), dim=-1)
    best = torch.topk(lp, top) if top else None
    pairs = list(zip(best.indices.tolist(), best.values.tolist())) if best is not None else []
    return TokenLogprob(token, float(lp[token]), pairs)
