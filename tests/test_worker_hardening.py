"""Worker walls added after session 2's attempts (R): a fork chain cannot dodge the pause or the kill, a namespace
worker sees no other worker's folder, its files are capped in size and its work folder is a bounded tmpfs.

Real processes throughout (``sh``/``python`` children under ``harness.worker_isolation.wrap``), no mocks.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import worker_isolation, worker_procs

#: forks a successor and exits every ~2 ms, writing one byte to stdout each hop
#: (the first process stays: at namespace level it is the namespace's init, whose exit would end the chain)
HOPPER = ("import os, time\nif os.fork() != 0:\n    time.sleep(3600)\n"
          "while True:\n    t = time.perf_counter()\n    while time.perf_counter() - t < 0.002:\n        pass\n"
          "    os.write(1, b'x')\n    if os.fork() != 0:\n        os._exit(0)\n")
LEVELS = ["process"] + (["namespace"] if worker_isolation.detect() == "namespace" else [])


class _Proc:
    """What ``worker_procs.paused`` reads of a ``harness.worker.Worker``: ``proc`` and ``isolation``."""

    def __init__(self, proc: subprocess.Popen, isolation: str) -> None:
        self.proc, self.isolation = proc, isolation


#: the same, each hop leaving the process group first (setsid): only the namespace holds it
SETSID_HOPPER = HOPPER + "    os.setsid()\n"
CHAINS = [(level, HOPPER) for level in LEVELS] + [("namespace", SETSID_HOPPER)] * ("namespace" in LEVELS)


@pytest.mark.parametrize("level, hopper", CHAINS, ids=[f"{lv}-{'setsid' if h is SETSID_HOPPER else 'group'}" for lv, h in CHAINS])
def test_a_fork_chain_neither_runs_while_paused_nor_survives_the_kill(tmp_path, level, hopper):
    out = tmp_path / "hops.txt"
    work = tmp_path / "work"
    (work / "tmp").mkdir(parents=True)
    with open(out, "wb") as fh:
        proc = subprocess.Popen(worker_isolation.wrap([sys.executable, "-c", hopper], work, level), stdout=fh, cwd=work,
                                start_new_session=True)
    w = _Proc(proc, level)
    try:
        deadline = time.monotonic() + 60
        while out.stat().st_size < 50 and time.monotonic() < deadline:  # hopping
            time.sleep(0.05)
        assert out.stat().st_size >= 50
        grew = []
        for _ in range(8):
            with worker_procs.paused([w]):
                time.sleep(0.02)
                before = out.stat().st_size
                time.sleep(0.15)
                grew.append(out.stat().st_size - before)
            time.sleep(0.03)
        assert grew == [0] * 8, f"the chain ran while paused: {grew} bytes per pause"
        size = out.stat().st_size
        time.sleep(0.2)
        assert out.stat().st_size > size  # resumed after each pause
    finally:
        worker_procs.kill_all(proc.pid, level)
        proc.wait(timeout=30)
    time.sleep(0.3)
    size = out.stat().st_size
    time.sleep(0.3)
    assert out.stat().st_size == size, "a hop survived the kill"


@pytest.mark.skipif("namespace" not in LEVELS, reason="no mount/PID namespaces here")
def test_a_namespace_worker_sees_only_its_own_box_and_writes_within_limits(tmp_path):
    session = Path(f"/tmp/{worker_isolation.SESSION_PREFIX}{os.getpid()}-t")
    try:
        work = session / "mi-a" / "box" / "work"
        (work / "tmp").mkdir(parents=True)
        (session / "mi-a" / "box" / "engine").mkdir()
        (session / "mi-a" / "box" / "engine" / "mine.txt").write_text("own engine")
        (session / "mi-b" / "box" / "engine").mkdir(parents=True)
        (session / "mi-b" / "box" / "engine" / "theirs.txt").write_text("other engine")
        script = (
            "import os, resource, sys\n"
            "S = sys.argv[1]\n"
            "print('own', open(S + '/mi-a/box/engine/mine.txt').read())\n"
            "print('sessions', sorted(os.listdir(S)))\n"
            "print('other', os.path.exists(S + '/mi-b/box/engine/theirs.txt'))\n"
            "print('oom', open('/proc/self/oom_score_adj').read().strip())\n"
            "print('fsize', resource.getrlimit(resource.RLIMIT_FSIZE)[0])\n"
            "try:\n    open(S + '/mi-a/box/engine/new.txt', 'w')\nexcept OSError as e:\n    print('engine-ro', e.errno)\n"
            "fd, chunk, n = os.open('big', os.O_WRONLY | os.O_CREAT), b'0' * 2**24, 0\n"
            "try:\n    while n <= %d:\n        n += os.write(fd, chunk)\nexcept OSError as e:\n    print('efbig', e.errno)\n"
        ) % worker_isolation.FILE_LIMIT_BYTES
        proc = subprocess.run(worker_isolation.wrap([sys.executable, "-c", script, str(session)], work, "namespace"),
                              capture_output=True, text=True, cwd=work, timeout=120)
        lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
        assert proc.returncode == 0, proc.stderr
        assert lines["own"] == "own engine"  # the honest half: its own copy is there
        assert lines["sessions"] == "['mi-a']" and lines["other"] == "False", proc.stdout
        assert lines["oom"] == "1000" and int(lines["fsize"]) == worker_isolation.FILE_LIMIT_BYTES
        assert lines["engine-ro"] == "30" and lines["efbig"] == "27", proc.stdout  # EROFS, EFBIG
        assert sorted(os.listdir(work)) == ["tmp"]  # the work folder was a tmpfs: nothing reached the judge's disk
    finally:
        subprocess.run(["rm", "-rf", str(session)], check=False)


# --- the bench: every timed output checked, decode-bs1's t_1 floored ------------------------------

def test_decode_figure_is_floored_by_the_same_rounds_ttft_call():
    from harness.bench import floored_decode

    n = 8
    honest = [(1, 1, 0.10), (1, n, 0.45)]
    padded = [(1, 1, 0.30), (1, n, 0.45)]  # t_1 padded to 2/3 of t_N: (n-1)/0.15 instead of (n-1)/0.35
    assert floored_decode((n - 1) / 0.35, honest, 0.11, n) == pytest.approx((n - 1) / 0.35)  # honest: unchanged
    assert floored_decode((n - 1) / 0.35, honest, 0.09, n) == pytest.approx((n - 1) / 0.36)  # noise: both engines alike
    assert floored_decode((n - 1) / 0.15, padded, 0.10, n) == pytest.approx((n - 1) / 0.35)  # the padding is void
    assert floored_decode((n - 1) / 0.15, padded, None, n) == pytest.approx((n - 1) / 0.15)  # no ttft measured
    retry = [(1, 1, 0.5), (1, n, 0.4), (1, 1, 0.1), (1, n, 0.45)]  # decode-bs1 retried: the last pair counts
    assert floored_decode((n - 1) / 0.35, retry, 0.05, n) == pytest.approx((n - 1) / 0.40)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    from cheats import render_tiny

    return render_tiny(tmp_path_factory.mktemp("hardening-render"))


def test_candidate_outputs_without_a_baseline_twin_are_checked(rendered, tiny_checkpoint):
    from harness.bench_outputs import check_outputs
    from harness.worker import Worker
    from harness.workloads import BenchError, WorkerRunner, draw_prompts

    ckpt = tiny_checkpoint("bf16")
    with Worker("engine", engine_dir=rendered) as w:
        w.call("engine.load", engine_dir=str(w.engine_dir), checkpoint=str(ckpt), device="cpu", max_batch=4, max_seq_len=32)
        baseline = WorkerRunner("baseline", w, 1024)
        shared, alone = draw_prompts(5, 4, 16, 1024), draw_prompts(6, 4, 16, 1024)
        for p in shared:  # both engines timed on these
            baseline.generate([p], 8)
            baseline.outputs[(tuple(p), 8)] = baseline.generate([p], 8)[0]
        honest = WorkerRunner("candidate", w, 1024)
        honest.outputs = dict(baseline.outputs)
        for p in alone:  # prompts only the candidate was timed on (a decode-bs1 retry), honest outputs
            honest.outputs[(tuple(p), 8)] = baseline.generate([p], 8)[0]
        check = check_outputs(honest, baseline)
        assert check.unpaired == 4 and check.implausible == 0 and check.first_agree == check.first_compared == 8
        junk = WorkerRunner("candidate", w, 1024)
        junk.outputs = dict(baseline.outputs) | {(tuple(p), 8): [0] * 8 for p in alone}
        with pytest.raises(BenchError, match="computes something else when benchmarked"):
            check_outputs(junk, baseline)


def test_a_first_token_that_differs_at_a_near_tie_agrees_and_an_implausible_one_does_not(rendered, tiny_checkpoint):
    """An honest change of rounding (red team R3's fp32 engine against the bf16 baseline) flips near-tie first
    tokens; those agree, a first token far below the baseline's top-1 does not."""
    from harness.bench_outputs import MARGIN_STD, check_outputs
    from harness.worker import Worker
    from harness.workloads import BenchError, WorkerRunner, draw_prompts

    with Worker("engine", engine_dir=rendered) as w:
        w.call("engine.load", engine_dir=str(w.engine_dir), checkpoint=str(tiny_checkpoint("bf16")), device="cpu",
               max_batch=4, max_seq_len=32)
        baseline = WorkerRunner("baseline", w, 1024)
        near, far = {}, {}
        for p in draw_prompts(7, 24, 12, 1024):
            res = w.call("engine.prefill", prompts=[p])
            w.call("engine.release", slots=res["slots"])
            row = res["logits"][0][-1].double()  # [V]: the first generated token's logits
            top2 = row.topk(2)
            if (top2.values[0] - top2.values[1]) / row.std() <= MARGIN_STD / 2:
                key = (tuple(p), 1)
                baseline.outputs[key] = baseline.generate([p], 1)[0]
                near[key], far[key] = [int(top2.indices[1])], [int(row.argmin())]
            if len(near) == 4:
                break
        assert len(near) == 4, "fewer than 4 near-tie prompts among 24 drawn"
        assert all(baseline.outputs[k] != near[k] for k in near)  # the baseline took the top-1 each time
        honest = WorkerRunner("candidate", w, 1024)
        honest.outputs = dict(near)
        check = check_outputs(honest, baseline)
        assert check.first_compared == check.first_agree == 4 and check.identical == 0 and check.implausible == 0
        wrong = WorkerRunner("candidate", w, 1024)
        wrong.outputs = dict(far)
        with pytest.raises(BenchError, match="first greedy token of 4 of 4"):
            check_outputs(wrong, baseline)


# --- what comes back from a worker (session 3, R2's attempts) -------------------------------------------------


def _raw_message(body: bytes) -> bytes:
    from harness import worker_protocol

    return worker_protocol._HEAD.pack(len(body), 0) + body


@pytest.mark.parametrize("body, words", [
    (b'{"ok": true, "result": {"dtype": "' + b"x" * (64 * 1024 + 1) + b'"}}', "a string of 65537 characters"),
    (b'{"ok": true, "' + b"k" * (64 * 1024 + 1) + b'": 1}', "a string of 65537 characters"),
    (b"[" * 200_000 + b"]" * 200_000, "not JSON"),  # deeper than the JSON decoder goes: a ProtocolError, not a RecursionError
], ids=["long-value", "long-key", "deep"])
def test_a_reply_with_a_huge_string_or_deep_nesting_is_malformed(body, words):
    from harness import worker_protocol

    with pytest.raises(worker_protocol.ProtocolError, match=words):
        _receive(_raw_message(body))
    ok = worker_protocol.encode({"ok": True, "result": {"dtype": "y" * (64 * 1024)}})  # at the limit: fine
    assert len(_receive(ok)["result"]["dtype"]) == 64 * 1024


def _receive(data: bytes):
    """``worker_protocol.recv`` of ``data`` written by a thread (it is larger than a pipe holds)."""
    import threading

    from harness import worker_protocol

    r, w = os.pipe()

    def write() -> None:
        try:
            os.write(w, data)
        except OSError:
            pass
        finally:
            os.close(w)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        return worker_protocol.recv(r, time.monotonic() + 30)
    finally:
        os.close(r)
        writer.join(timeout=30)


def test_engine_dtype_and_device_come_back_as_short_names_or_a_short_error():
    import torch

    from harness.worker_main import _cut, _device_name, _dtype_name

    assert _dtype_name(torch.bfloat16) == "bfloat16" and _dtype_name("torch.float32") == "float32"
    assert _device_name(torch.device("cpu")) == "cpu" and _device_name("cuda:1") == "cuda:1"
    for bad in ("bfloat16" + "x" * 10_000_000, object(), "nonsense"):
        with pytest.raises(ValueError, match="not a torch dtype") as info:
            _dtype_name(bad)
        assert len(str(info.value)) < 300
    with pytest.raises(ValueError, match="not a torch device") as info:
        _device_name("gpu" * 1_000_000)
    assert len(str(info.value)) < 300
    assert _cut("E" * 1000, 200) == "E" * 200 + "... [800 more characters cut]" and _cut("short", 200) == "short"


def test_an_engine_folder_that_a_copy_would_blow_up_is_refused_before_copying(tmp_path):
    from harness.worker import Worker
    from harness.worker_copy import CopyError, CopyLimits, check_copyable

    eng = tmp_path / "eng"
    (eng / "engine").mkdir(parents=True)
    (eng / "engine" / "__init__.py").write_text("x = 1\n")
    check_copyable(eng, follow_links=False)
    with open(eng / "engine" / "notes.txt", "wb") as f:
        f.truncate(1 << 33)  # 8 GiB of hole: no block written here, 8 GiB of zeros in any copy
    parent = tmp_path / "boxes"
    parent.mkdir()
    with pytest.raises(CopyError, match="notes.txt: 8589934592 bytes.*refused before copying"):
        Worker("static", engine_dir=eng, parent=parent, keep_links=True)
    assert list(parent.iterdir()) == []  # nothing copied, nothing started, the box removed
    (eng / "engine" / "notes.txt").unlink()
    (eng / "engine" / "zero").symlink_to("/dev/zero")
    check_copyable(eng, follow_links=False)  # kept as a link (the static stage refuses it)
    with pytest.raises(CopyError, match="zero: a character device"):
        check_copyable(eng, follow_links=True)
    (eng / "engine" / "zero").unlink()
    os.mkfifo(eng / "engine" / "pipe")
    with pytest.raises(CopyError, match="pipe: a named pipe"):
        check_copyable(eng, follow_links=False)
    (eng / "engine" / "pipe").unlink()
    (eng / "engine" / "loop").symlink_to(eng / "engine")
    with pytest.raises(CopyError, match="deeper than 3"):
        check_copyable(eng, follow_links=True, limits=CopyLimits(max_depth=3))


def test_an_engine_that_changes_the_thread_count_is_refused_at_run_time(tmp_path):
    """The static rule refuses torch.set_num_threads by name; a name computed from data reaches it anyway, so the
    worker checks the count after every engine op (a real engine worker on a small engine of its own)."""
    from harness.worker import EngineError, Worker

    eng = tmp_path / "eng"
    (eng / "engine").mkdir(parents=True)
    (eng / "engine" / "__init__.py").write_text(
        "import torch\n\n\nclass SamplingParams:\n    pass\n\n\nclass _E:\n    device = torch.device('cpu')\n"
        "    dtype = torch.bfloat16\n\n    def release(self, slots):\n        torch.set_num_threads(3)\n\n\n"
        "def load(checkpoint, device='cpu', *, max_batch=1, max_seq_len=8):\n    return _E()\n")
    with Worker("engine", engine_dir=eng, parent=tmp_path) as w:
        info = w.call("engine.load", engine_dir=str(w.engine_dir), checkpoint=str(tmp_path), device="cpu", max_batch=1,
                      max_seq_len=8, threads=1)
        assert info == {"dtype": "bfloat16", "device": "cpu"}
        with pytest.raises(EngineError, match="changed torch's thread count from 1 to 3"):
            w.call("engine.release", slots=[0])
        with pytest.raises(EngineError, match="from 1 to 3"):  # put back to 1 by the check, changed again: refused again
            w.call("engine.release", slots=[])


def test_a_workers_copy_carries_the_bytes_and_none_of_the_metadata(tmp_path):
    """The build loop makes the baseline's folder (a git archive export: whole-second times) and the candidate's (a
    worktree) in different ways; an engine reading its own folder's times, modes or listing order must find nothing
    that tells them apart (red team R3's role_from_archive_mtime slept as the baseline and was accepted at 2.07x)."""
    from harness.worker import Worker
    from harness.worker_copy import COPY_TIME, DIR_MODE, FILE_MODE

    def make(root: Path, order: list[str], stamp: float, mode: int) -> Path:
        eng = root / "eng"
        (eng / "engine" / "ops").mkdir(parents=True)
        for name in order:
            (eng / "engine" / name).write_text(f"# {name}\n")
            os.chmod(eng / "engine" / name, mode)
            os.utime(eng / "engine" / name, (stamp, stamp))
        return eng

    names = ["__init__.py", "ops/a.py", "b.py", "z.txt"]
    a = make(tmp_path / "a", names, 1_700_000_000.0, 0o644)  # an export's whole seconds, in archive order
    b = make(tmp_path / "b", names[::-1], 1_700_000_000.123456, 0o755)  # a worktree's fractions, another order

    def seen(w: Worker) -> list[tuple]:
        out = []
        for dirpath, dirs, files in os.walk(w.engine_dir):
            for n in dirs + files:
                st = os.stat(os.path.join(dirpath, n))
                out.append((os.path.relpath(os.path.join(dirpath, n), w.engine_dir), st.st_mode & 0o7777, st.st_mtime_ns,
                            os.listdir(dirpath)))
        return out

    with Worker("static", engine_dir=a, parent=tmp_path) as wa, Worker("static", engine_dir=b, parent=tmp_path) as wb:
        got_a, got_b = seen(wa), seen(wb)
        assert got_a == got_b and len(got_a) == 6  # engine/, engine/ops/ and four files
        assert {m for _, m, _, _ in got_a} == {FILE_MODE, DIR_MODE} and {t for _, _, t, _ in got_a} == {COPY_TIME * 10**9}
        assert (wa.engine_dir / "engine" / "ops" / "a.py").read_text() == "# ops/a.py\n"


def test_the_replay_check_holds_timed_tokens_to_the_engines_own_teacher_forced_rows(rendered, tiny_checkpoint):
    """A timed call's tokens, replayed with the same batch in the engine's worker, are its own top-1s (the CPU engine
    is batch-invariant: exactly, at path noise 0); one token moved off its row's top-1 is caught, and at a path
    noise as large as the move it is excused (the bound scales with the engine's parity-measured noise)."""
    from harness.bench_replay import check_replay
    from harness.worker import Worker
    from harness.workloads import BenchError, WorkerRunner, draw_prompts

    with Worker("engine", engine_dir=rendered) as w:
        w.call("engine.load", engine_dir=str(w.engine_dir), checkpoint=str(tiny_checkpoint("bf16")), device="cpu",
               max_batch=4, max_seq_len=48)
        runner = WorkerRunner("candidate", w, 1024)
        prompts = draw_prompts(3, 4, [14, 16, 17, 18], 1024)
        calls = [(prompts, runner.generate(prompts, 6)), ([prompts[0]], runner.generate([prompts[0]], 1))]
        check = check_replay(runner, calls, 0.0)
        assert (check.calls, check.tokens, check.over, check.worst) == (2, 4 * 6 + 1, 0, 0.0)
        # the third sequence's last token replaced by its row's runner-up
        res = w.call("engine.prefill", prompts=[prompts[2] + calls[0][1][2][:5]])
        w.call("engine.release", slots=res["slots"])
        row = res["logits"][0][-1].double()
        runner_up = int(row.topk(2).indices[1])
        moved = [list(o) for o in calls[0][1]]
        moved[2][5] = runner_up
        calls[0] = (prompts, moved)
        with pytest.raises(BenchError, match=r"1 of 24 tokens.*sequence 2, token 5.*computes otherwise when benchmarked"):
            check_replay(runner, calls, 0.0)
        # a call may hold one token over the bound per flip_tokens of its tokens (a router near-tie): the moved token
        # passes where the call's 24 tokens allow one, and a second moved token does not
        flip = check_replay(runner, calls, 0.0, flip_tokens=24)
        assert (flip.over, flip.allowed) == (1, 1) and flip.worst > 1.0
        twice = [list(o) for o in moved]
        res = w.call("engine.prefill", prompts=[prompts[1] + calls[0][1][1][:5]])
        w.call("engine.release", slots=res["slots"])
        twice[1][5] = int(res["logits"][0][-1].double().topk(2).indices[1])
        with pytest.raises(BenchError, match=r"2 of 24 tokens.*may hold 1 runners-up, one per 24 tokens, and 0 are not"):
            check_replay(runner, [(prompts, twice)], 0.0, flip_tokens=24)
        # a token deeper in its row than the runner-up never uses the allowance
        third = [list(o) for o in calls[0][1]]
        third[2][5] = int(row.topk(3).indices[2])
        with pytest.raises(BenchError, match=r"1 of 24 tokens.*may hold 1 runners-up, one per 24 tokens, and 1 are not"):
            check_replay(runner, [(prompts, third)], 0.0, flip_tokens=24)
        gap = float(row.max() - row[runner_up])
        assert check_replay(runner, calls, gap / (6 * float(row.square().mean().sqrt())) * 1.01).over == 0
        assert check_replay(runner, calls, None).skipped
