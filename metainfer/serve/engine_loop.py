"""The one thread that drives the engine: ``Scheduler.step()`` in a loop, fed by a thread-safe inbox.

HTTP handlers (asyncio) never touch the engine: they ``submit`` a request with a sink and
``abort`` it; both are queued and applied between steps, so an abort frees its slot before the
next step runs. After each step the loop hands all ``(sink, item)`` pairs of that step to
``post`` in one call (the server posts them to its event loop once per step, not once per
request); an item is a ``StepOutput``, a ``ValueError`` if the scheduler refused the request, or
a ``RuntimeError`` if a step failed. The default ``post`` calls each sink with its item.

A step's outputs are posted once the *next* step's forward is queued on the device (the
scheduler's ``on_forward`` hook), or at once when nothing else is live: the server's per-token
work (detokenising, SSE) then runs while the GPU computes, instead of holding the GIL when the
engine thread needs it to launch the next step (on the H200 a 32-stream decode step took 14.1 ms
behind the server against about 11 ms offline). Engines without the hook post after each step.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Hashable

from metainfer.serve.metrics import Metrics

Sink = Any
Post = Callable[[list[tuple[Sink, Any]]], None]


@dataclass
class _Add:
    request_id: Hashable
    prompt: list[int]
    params: Any
    sink: Sink


@dataclass
class _Abort:
    request_id: Hashable


class EngineLoop:
    """Owns the scheduler on a daemon thread.

    Attributes:
        scheduler: the engine's ``Scheduler`` (touched only by the loop thread once started).
        steps: steps run so far.
    """

    def __init__(self, scheduler: Any, metrics: Metrics, max_batch: int, max_seq_len: int):
        self.scheduler = scheduler
        self.metrics = metrics
        self.max_batch, self.max_seq_len = max_batch, max_seq_len
        self.steps = 0
        self._inbox: queue.Queue = queue.Queue()
        self._sinks: dict[Hashable, Sink] = {}
        self._pending: list[tuple[Sink, Any]] = []  # the last step's outputs, not yet posted
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="metainfer-engine", daemon=True)
        self.post: Post = lambda pairs: [sink(item) for sink, item in pairs]
        self.on_start: Callable[[], None] = lambda: None  # run first on the loop thread (e.g. select the CUDA device)
        # METAINFER_SERVE_TRACE=FILE: one JSON line per step (perf_counter seconds; what the step held, how long it took)
        trace = os.environ.get("METAINFER_SERVE_TRACE")
        self._trace = open(trace, "a", buffering=1) if trace else None

    def start(self) -> None:
        """Start the loop thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop the loop after the current step and wait for it."""
        self._stop.set()
        self._inbox.put(None)
        self._thread.join(timeout=30)

    @property
    def alive(self) -> bool:
        """True while the loop thread runs."""
        return self._thread.is_alive()

    def submit(self, request_id: Hashable, prompt: list[int], params: Any, sink: Sink) -> None:
        """Queue a request (thread-safe)."""
        self._inbox.put(_Add(request_id, prompt, params, sink))

    def abort(self, request_id: Hashable) -> None:
        """Queue an abort (thread-safe); a request already finished is left alone."""
        self._inbox.put(_Abort(request_id))

    # ---- loop thread ------------------------------------------------------------------
    def _run(self) -> None:
        import torch

        self.on_start()
        with torch.inference_mode():
            self._loop()

    def _loop(self) -> None:
        sched = self.scheduler
        hooked = hasattr(sched, "on_forward")
        if hooked:
            sched.on_forward = self._flush
        while not self._stop.is_set():
            self._drain(block=not sched.has_unfinished())
            if not sched.has_unfinished():
                continue
            t0 = time.perf_counter()
            held = (len(sched.waiting), len(sched.prefilling), len(sched.running)) if self._trace else None
            try:
                outs = sched.step()
            except Exception as err:  # a failing step must not kill the server: fail its requests, free their slots
                self._flush()
                self._fail_all(err)
                continue
            self._flush()  # a step that queued no forward (aborts only) posts its predecessor's outputs here
            self.steps += 1
            dt = time.perf_counter() - t0
            self.metrics.step_seconds.observe(dt)
            if self._trace:
                self._trace.write(json.dumps({"t": round(t0, 5), "s": round(dt, 5), "waiting": held[0], "prefilling": held[1],
                                              "running": held[2], "outs": len(outs)}) + "\n")
            for out in outs:
                sink = self._sinks.pop(out.request_id, None) if out.finished else self._sinks.get(out.request_id)
                if sink is not None:
                    self._pending.append((sink, out))
            if not hooked or not sched.has_unfinished():
                self._flush()
            self._gauges()
        self._flush()

    def _flush(self) -> None:
        """Post the outputs held back from the last step (no-op when none)."""
        if self._pending:
            pairs, self._pending = self._pending, []
            self.post(pairs)

    def _drain(self, block: bool) -> None:
        items = []
        try:
            items.append(self._inbox.get(timeout=0.5) if block else self._inbox.get_nowait())
            while True:
                items.append(self._inbox.get_nowait())
        except queue.Empty:
            pass
        if self._trace and items:
            self._trace.write(json.dumps({"t": round(time.perf_counter(), 5), "drained": len(items), "blocked": block}) + "\n")
        for item in items:
            if isinstance(item, _Add):
                try:
                    self.scheduler.add_request(item.request_id, item.prompt, item.params)
                except ValueError as err:
                    self.post([(item.sink, err)])
                    continue
                self._sinks[item.request_id] = item.sink
            elif isinstance(item, _Abort) and self.scheduler.abort(item.request_id):
                self.metrics.aborted.inc()
        if items:
            self._gauges()

    def _fail_all(self, err: Exception) -> None:
        self.scheduler.abort_all()
        self.scheduler.step()  # reports the aborts; nothing else is live
        sinks, self._sinks = self._sinks, {}
        failure = RuntimeError(f"the engine failed during a step: {type(err).__name__}: {err}")
        self.post([(sink, failure) for sink in sinks.values()])
        self._gauges()

    def _gauges(self) -> None:
        s, m = self.scheduler, self.metrics
        m.running.set(s.num_running)
        m.waiting.set(s.num_waiting)
        m.kv_slots_used.set(s.num_running)
        held = s.tokens_held()
        m.kv_tokens_used.set(held)
        m.kv_usage.set(held / (self.max_batch * self.max_seq_len))
