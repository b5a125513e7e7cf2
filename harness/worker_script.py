"""The worker side of parity's serving script (``harness.serving_script``): drive the engine's ``Scheduler`` step by
step, adding and aborting requests at their drawn steps, and send back what each request got, as plain data.

Runs in the engine's worker process (``harness.worker_main``'s ``engine.script`` op); the judge checks the result.
"""

from __future__ import annotations

from collections import defaultdict

#: steps in a row without any output, arrival or abort after which a script with live requests counts as stalled
STALL_STEPS = 64


def _top(pairs) -> list[list]:
    return [[int(i), float(v)] for i, v in pairs]


def run_script(module, engine, prompts: list[list[int]], requests: list[dict], max_steps: int) -> dict:
    """Run ``requests`` (``ScriptRequest.to_wire``; ``ref`` indexes ``prompts``) through ``module.Scheduler(engine)``.

    Returns:
        ``{"outputs": {str(rid): {"tokens", "finish_reason", "logprobs", "steps", "finished_step"}}, "steps": int}``.
    Raises:
        RuntimeError: the scheduler still had live requests after ``max_steps`` steps, or made no progress for
            ``STALL_STEPS`` steps with nothing left to arrive (a leaked slot or KV block keeps requests queued);
            its live requests are aborted first, so the engine's slots are free again.
        ValueError: a request the engine's ``SamplingParams`` or ``add_request`` refused (the engine's message).
    """
    sched = module.Scheduler(engine)
    arrive, abort = defaultdict(list), defaultdict(list)
    after = {str(r["rid"]): int(r["abort_after"]) for r in requests if r.get("abort_after") is not None}
    for r in requests:
        arrive[int(r["arrive"])].append(r)
        if r.get("abort_at") is not None:
            abort[int(r["abort_at"])].append(int(r["rid"]))
    last_event = max(list(arrive) + list(abort))
    outs = {str(r["rid"]): {"tokens": [], "finish_reason": None, "logprobs": [], "steps": [], "finished_step": None}
            for r in requests}
    idle = 0
    try:
        for step in range(int(max_steps)):
            for r in arrive.get(step, []):
                p = dict(r["params"], stop_token_ids=tuple(int(t) for t in r["params"]["stop_token_ids"]))
                sched.add_request(int(r["rid"]), [int(t) for t in prompts[int(r["ref"])]], module.SamplingParams(**p))
            for rid in abort.get(step, []):
                sched.abort(rid)
            if step >= last_event and not sched.has_unfinished():
                return {"outputs": outs, "steps": step}
            produced = False
            for o in sched.step():
                d = outs[str(o.request_id)]
                toks = [int(t) for t in o.new_tokens]
                d["tokens"] += toks
                d["steps"] += [step] * len(toks)
                produced = produced or bool(toks) or bool(o.finished)
                for lp in o.logprobs or []:
                    d["logprobs"].append([int(lp.token), float(lp.logprob), _top(lp.top)])
                if o.finished:
                    d["finish_reason"], d["finished_step"] = o.finish_reason, step
            for rid, k in after.items():
                if outs[rid]["finish_reason"] is None and len(outs[rid]["tokens"]) >= k:
                    sched.abort(int(rid))  # reported by the next step
                    produced = True
            after = {rid: k for rid, k in after.items() if outs[rid]["finish_reason"] is None and len(outs[rid]["tokens"]) < k}
            idle = 0 if produced or step <= last_event else idle + 1
            if idle >= STALL_STEPS:
                raise RuntimeError(
                    f"the scheduler made no progress for {STALL_STEPS} steps after the last arrival with "
                    f"{sched.num_waiting} requests waiting and {sched.num_running} running (a slot or KV blocks not freed "
                    "when a request finished or was aborted?)")
        raise RuntimeError(f"the scheduler still had {sched.num_waiting} waiting and {sched.num_running} running requests "
                           f"after {max_steps} steps, more than running every request one after the other takes")
    finally:
        if sched.has_unfinished():
            sched.abort_all()
