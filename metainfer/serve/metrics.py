"""Prometheus metrics of one server (its own registry, served at ``/metrics``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48)


class Metrics:
    """Gauges (set by the engine thread after each step), histograms and counters (set by handlers).

    Names: ``metainfer_requests_running`` / ``_waiting`` (holding a slot / queued for one),
    ``metainfer_kv_slots_used`` (of ``metainfer_kv_slots_total``), ``metainfer_kv_tokens_used``
    (positions held), ``metainfer_kv_usage_ratio`` (tokens held / slots x max_seq_len),
    ``metainfer_time_to_first_token_seconds``, ``metainfer_time_per_output_token_seconds``,
    ``metainfer_step_seconds``, ``metainfer_prompt_tokens_total``, ``metainfer_generation_tokens_total``,
    ``metainfer_requests_total{finish_reason}``, ``metainfer_requests_rejected_total{reason}``.
    """

    def __init__(self, max_batch: int):
        r = self.registry = CollectorRegistry()
        self.running = Gauge("metainfer_requests_running", "requests holding a slot (prefilling or decoding)", registry=r)
        self.waiting = Gauge("metainfer_requests_waiting", "requests queued for a slot", registry=r)
        self.kv_slots_used = Gauge("metainfer_kv_slots_used", "state slots in use", registry=r)
        Gauge("metainfer_kv_slots_total", "state slots", registry=r).set(max_batch)
        self.kv_tokens_used = Gauge("metainfer_kv_tokens_used", "KV positions held by live sequences", registry=r)
        self.kv_usage = Gauge("metainfer_kv_usage_ratio", "KV positions held / (slots x max_seq_len)", registry=r)
        self.ttft = Histogram("metainfer_time_to_first_token_seconds", "request arrival to first token", buckets=_LATENCY, registry=r)
        self.tpot = Histogram("metainfer_time_per_output_token_seconds", "time between output tokens", buckets=_LATENCY, registry=r)
        self.step_seconds = Histogram("metainfer_step_seconds", "one scheduler step", buckets=_LATENCY, registry=r)
        self.prompt_tokens = Counter("metainfer_prompt_tokens", "prompt tokens admitted", registry=r)
        self.generation_tokens = Counter("metainfer_generation_tokens", "tokens generated", registry=r)
        self.finished = Counter("metainfer_requests", "finished requests", ["finish_reason"], registry=r)
        self.rejected = Counter("metainfer_requests_rejected", "requests refused", ["reason"], registry=r)
        self.aborted = Counter("metainfer_requests_aborted", "requests aborted (client gone or stop string)", registry=r)
