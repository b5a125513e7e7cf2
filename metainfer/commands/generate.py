"""``metainfer generate``: run prompts through a built engine and print the tokens and the timings.

Prompts are token ids (``--ids 1,2,3``, repeatable) or, when the checkpoint folder holds a tokenizer
(``tokenizer.json`` / ``tokenizer_config.json``), text (``--text "..."``, repeatable). The engine is a
folder (``--engine generated/<target>``) or the head of a target's branch ``metainfer/<target>``
(``--model/--quant/--gpu``: the last accepted iteration, from the clean worktree or else exported from
git, see ``metainfer.serve.built``; without ``--checkpoint``, the cached synthetic checkpoint the build
used).
"""

from __future__ import annotations

import time
from pathlib import Path

import typer

from metainfer.errors import MetainferError, check_checkpoint_folder


class GenerateError(MetainferError):
    """Bad input to ``metainfer generate`` (no prompt, ids out of range, text without a tokenizer, no engine)."""


def _parse_ids(text: str, vocab: int) -> list[int]:
    try:
        ids = [int(t) for t in text.replace(" ", "").split(",") if t]
    except ValueError:
        raise GenerateError(f"--ids {text!r}: give comma-separated token ids, e.g. --ids 1,2,3") from None
    bad = [i for i in ids if not 0 <= i < vocab]
    if not ids or bad:
        raise GenerateError(f"--ids {text!r}: ids must be in [0, {vocab}) and at least one; out of range: {bad[:5]}")
    return ids


def _tokenizer(checkpoint: Path):
    """The checkpoint's tokenizer (transformers ``AutoTokenizer``), or None when the folder has none."""
    if not any((checkpoint / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(checkpoint))


def _resolve(engine: Path | None, checkpoint: Path | None, model: str | None, quant: str | None, gpu: str | None,
             seed: int) -> tuple[Path, Path]:
    if engine is not None:
        if not (engine / "engine" / "__init__.py").is_file():
            from metainfer.build.config import built_engine_hint

            what = "no such folder" if not engine.exists() else "no engine/__init__.py there"
            raise GenerateError(f"--engine {engine}: {what}; pass a generated/<target> folder (`metainfer render` makes "
                                f"one), or --model/--quant/--gpu for a built target{built_engine_hint(engine)}")
        if checkpoint is None:
            raise GenerateError("--engine needs --checkpoint (the folder the engine loads)")
        check_checkpoint_folder(checkpoint)
        return engine, checkpoint
    if None in (model, quant, gpu):
        raise GenerateError("give --engine DIR --checkpoint DIR, or --model M --quant Q --gpu G for a built target")
    from metainfer.build.config import find_repo_root
    from metainfer.build.plan import cached_checkpoint_path
    from metainfer.serve.built import branch_engine
    from metainfer.targets import make_target

    target = make_target(model, quant, gpu)
    if checkpoint is not None:  # before the engine is looked up (and exported): nothing to clean up on a bad folder
        check_checkpoint_folder(checkpoint)
    root = find_repo_root()
    built = branch_engine(root, target.name, kind="generate")
    if built is None:
        raise GenerateError(f"no built engine for {target.name} (no branch metainfer/{target.name} holding one); run "
                            f"`metainfer build --model {model} --quant {quant} --gpu {gpu}` first, or pass --engine")
    typer.echo(built.describe(), err=True)
    eng = built.path
    if checkpoint is not None:
        return eng, checkpoint
    ck = cached_checkpoint_path(root, target.model.name, target.quant.name, seed)
    if not (ck / "config.json").is_file():
        raise GenerateError(f"no cached synthetic checkpoint of {target.name} with --seed {seed} at {ck} (`metainfer clean` "
                            f"removes them; a build writes it again); pass --checkpoint DIR")
    return eng, ck


def generate(
    engine: Path = typer.Option(None, "--engine", help="engine folder (generated/<target>), e.g. from `metainfer render`"),
    checkpoint: Path = typer.Option(None, "--checkpoint", help="checkpoint folder the engine loads"),
    model: str = typer.Option(None, "--model", help="instead of --engine: the built target's model (its branch head)"),
    quant: str = typer.Option(None, "--quant", help="with --model: weight format"),
    gpu: str = typer.Option(None, "--gpu", help="with --model: GPU profile of the target"),
    seed: int = typer.Option(0, "--seed", help="with --model and no --checkpoint: seed of the cached synthetic checkpoint"),
    ids: list[str] = typer.Option(None, "--ids", help="a prompt as comma-separated token ids (repeat for a batch)"),
    text: list[str] = typer.Option(None, "--text", help="a prompt as text (needs a tokenizer in the checkpoint; repeatable)"),
    max_tokens: int = typer.Option(16, "--max-tokens", help="output tokens per prompt"),
    temperature: float = typer.Option(0.0, "--temperature", help="0 = greedy"),
    device: str = typer.Option(None, "--device", help="cpu or cuda (default: cuda when present)"),
) -> None:
    """Generate with a built engine: print each prompt's output tokens (and text with a tokenizer), load time,
    time to first token and decode rate."""
    import torch

    from harness.engine_loader import import_engine
    from metainfer.checkpoint import CheckpointReader

    eng_dir, ck = _resolve(engine, checkpoint, model, quant, gpu, seed)
    if not ids and not text:
        raise GenerateError("give a prompt: --ids 1,2,3 or --text '...' (text needs a tokenizer in the checkpoint)")
    if max_tokens < 1:
        raise GenerateError(f"--max-tokens must be >= 1, got {max_tokens}")
    vocab = int(CheckpointReader(ck).text_config["vocab_size"])
    tok = _tokenizer(ck) if text else None
    if text and tok is None:
        raise GenerateError(f"{ck} has no tokenizer (tokenizer.json); give token ids with --ids instead")
    prompts = [_parse_ids(s, vocab) for s in ids or []] + [tok.encode(t) for t in text or []]
    dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
    from harness.gate import cpu_threads

    cpu_threads(dev)  # the timings it prints: one intra-op thread on the CPU, as the gate measures
    t0 = time.perf_counter()
    mod = import_engine(eng_dir)
    try:
        e = mod.load(str(ck), device=dev, max_batch=max(4, len(prompts)), max_seq_len=max(len(p) for p in prompts) + max_tokens + 8)
    except ValueError as err:  # the engine contract's error for a checkpoint it cannot load (docs/CONTRACTS.md)
        raise GenerateError(f"the engine {eng_dir} cannot load {ck}: {err}") from None
    load_s = time.perf_counter() - t0

    def timed(n: int) -> tuple[list[list[int]], float]:
        params = mod.SamplingParams(max_tokens=n, temperature=temperature, seed=0, ignore_eos=True)
        if dev == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        out = e.generate(prompts, params)
        if dev == "cuda":
            torch.cuda.synchronize()
        return out, time.perf_counter() - t

    _, warm_s = timed(1)  # one-time costs (compilation, caches) land here, untimed below
    _, first_s = timed(1)
    outs, total_s = timed(max_tokens)
    for k, (p, out) in enumerate(zip(prompts, outs)):
        typer.echo(f"prompt {k}: {len(p)} tokens -> {out}")
        if tok is not None:
            typer.echo(f"  text: {tok.decode(out)!r}")
    # decode = the run minus a separately timed first token: with one output token there is no decode step, and a
    # run of a few tokens can take less than that other call (timing noise), so the rate is then not measurable
    if max_tokens == 1:
        rate = "n/a (no decode step)"
    elif total_s > first_s:
        rate = f"{len(prompts) * (max_tokens - 1) / (total_s - first_s):.1f} tok/s"
    else:
        rate = "not measurable (the run took less than the first-token call; give more --max-tokens)"
    typer.echo(f"engine {eng_dir} on {dev}: load {load_s:.2f} s, warm-up call {warm_s:.2f} s, first token {first_s * 1e3:.1f} ms, "
               f"{max_tokens} tokens in {total_s * 1e3:.1f} ms ({len(prompts) * max_tokens / total_s:.1f} tok/s overall), "
               f"decode {rate} ({len(prompts)} prompt(s))")


def register(app: typer.Typer) -> None:
    """Add ``generate`` to the app."""
    app.command("generate")(generate)
