"""Start a server: import and load the engine, warm it up, run uvicorn, print one ready line."""

from __future__ import annotations

import atexit
import errno
import shutil
import signal
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from metainfer.errors import MetainferError, check_checkpoint_folder
from metainfer.serve.state import ServeConfig, ServerState
from metainfer.serve.text import TextSide
from metainfer.tempdirs import mkdtemp


@dataclass
class LaunchArgs:
    """What ``metainfer serve`` was given (see its ``--help``)."""

    model: str
    quant: str
    gpu: str
    checkpoint: Path
    engine: Path | None
    host: str
    port: int
    api_key: str | None
    max_batch: int
    max_seq_len: int
    max_queue: int
    served_model_name: str | None
    add_tokenizer: bool = False
    warmup: bool = True


def engine_dir(args: LaunchArgs) -> Path:
    """``--engine``, else the engine ``metainfer build`` accepted last for the target (the head of its branch
    ``metainfer/<target>``: the worktree when it is clean, else exported from git into a temporary folder, see
    ``metainfer.serve.built``), else ``generated/<target>``, else the template rendered for the target into a
    temporary folder (removed when the process exits).

    Raises:
        MetainferError: unknown model/quant/gpu, or ``--engine`` is not a folder.
    """
    from metainfer.render import render_engine
    from metainfer.targets import make_target

    target = make_target(args.model, args.quant, args.gpu)
    if args.engine is not None:
        if not (args.engine / "engine" / "__init__.py").is_file():
            raise MetainferError(f"--engine {args.engine}: no engine/__init__.py there; pass a generated/<target> folder")
        return args.engine
    from metainfer.build.config import find_repo_root
    from metainfer.serve.built import branch_engine

    try:
        root = find_repo_root()
    except MetainferError:  # not inside a metainfer clone: no build to look for
        root = None
    built = branch_engine(root, target.name) if root is not None else None
    if built is not None:
        print(f"serving the engine `metainfer build` accepted last for {target.name}: {built.describe()}", file=sys.stderr)
        return built.path
    default = Path("generated") / target.name
    if (default / "engine" / "__init__.py").is_file():
        return default
    tmp = mkdtemp("serve", root)
    atexit.register(shutil.rmtree, tmp, True)  # Ctrl-C and normal exits alike leave nothing behind
    out = render_engine(target, tmp)
    print(f"no built engine and no {default}; serving the template rendered for {target.name} (not optimised) "
          f"at {out}", file=sys.stderr)
    return out


def build_state(args: LaunchArgs) -> ServerState:
    """Load tokenizer and engine, warm the engine up, and return the server state.

    Raises:
        MetainferError: no tokenizer in the checkpoint, an engine without the step API, or a
            load error (bad checkpoint, device not present).
    """
    from harness.engine_loader import import_engine
    from metainfer.targets import check_present

    check_checkpoint_folder(args.checkpoint)
    check_present(args.gpu)
    if args.add_tokenizer and not (args.checkpoint / "tokenizer_config.json").is_file():
        from metainfer.checkpoint.tokenizer import write_tokenizer
        from metainfer.targets import get_model

        write_tokenizer(get_model(args.model), args.checkpoint)
        print(f"wrote the synthetic tokenizer files of {args.model} into {args.checkpoint}", file=sys.stderr)
    text = TextSide.from_checkpoint(args.checkpoint)
    mod = import_engine(engine_dir(args))
    if not hasattr(mod, "Scheduler"):
        raise MetainferError("this engine has no step API (engine/scheduler.py); re-render it from the current template "
                             "(`metainfer render --force`) or pass --engine with a newer one")
    device = "cpu" if args.gpu == "cpu" else "cuda"
    try:
        engine = mod.load(args.checkpoint, device, max_batch=args.max_batch, max_seq_len=args.max_seq_len)
    except ValueError as err:
        raise MetainferError(f"loading the engine: {err}") from None
    if args.warmup and device == "cuda" and hasattr(engine, "warmup"):  # Triton compiles per batch-shape class: all of them now, not mid-stream
        rep = engine.warmup()
        print(f"warm-up: {rep.prefills} prefill shapes (+{rep.continued} continued), {rep.decodes} eager decodes, "
              f"{rep.seconds:.1f} s", file=sys.stderr)
    engine.generate([list(range(1, 17))], mod.SamplingParams(max_tokens=3, ignore_eos=True))  # one request end to end
    name = args.served_model_name or args.model
    cfg = ServeConfig(name, args.max_batch, args.max_seq_len, args.max_queue, args.api_key)
    return ServerState(mod, engine, text, cfg)


def check_port(host: str, port: int) -> None:
    """Raises MetainferError at once when ``host:port`` cannot be bound (in use, or not an address of this machine),
    before seconds of engine loading end in uvicorn's raw ``[Errno 98]``; a port outside 0-65535 likewise, not the
    socket's raw ``OverflowError``."""
    if not 0 <= port <= 65535:
        raise MetainferError(f"--port {port} is not a TCP port; give one of 1-65535 (or 0 for any free port)")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT leftovers do not count
        try:
            s.bind((host, port))
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                raise MetainferError(f"port {port} on {host} is already in use (another server?); stop it or pick "
                                     f"another port with --port") from None
            raise MetainferError(f"cannot listen on {host}:{port}: {err.strerror}; check --host and --port") from None


def _exit_on_sigterm(signum: int, frame) -> None:
    """SIGTERM outside uvicorn's handling (while loading, or re-raised by uvicorn after its graceful shutdown):
    exit through SystemExit, so atexit removes the temporary engine folders."""
    raise SystemExit(0)


def serve(args: LaunchArgs) -> None:
    """Run until interrupted; prints ``metainfer serve: ready at http://HOST:PORT/v1 ...`` once listening.

    SIGTERM and SIGINT both shut down gracefully and remove the temporary folders (exit status 0 for SIGTERM).
    """
    import uvicorn

    from metainfer.serve.app import create_app

    check_port(args.host, args.port)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    state = build_state(args)
    app = create_app(state)
    # the engine thread and the HTTP thread share the GIL: hand it over within 1 ms (default 5 ms),
    # so a step never waits long behind response writing
    sys.setswitchinterval(0.001)

    class _Server(uvicorn.Server):
        async def startup(self, sockets=None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                host = args.host if args.host not in ("0.0.0.0", "::") else "127.0.0.1"
                print(f"metainfer serve: ready at http://{host}:{args.port}/v1 (model {state.cfg.model_name!r}, "
                      f"{state.cfg.max_batch} slots x {state.cfg.max_seq_len} tokens)", flush=True)

    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=5)
    _Server(config).run()
