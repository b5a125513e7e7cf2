"""The name tables of the static stage's AST rules (``harness.static_ast``): what an engine may not reach.

Each table refuses a capability, not a spelling: the visitor resolves import aliases
(``import os as o; o._exit`` is ``os._exit``) and checks references as well as calls, so
passing ``os._exit`` around or aliasing it is refused like calling it. Names an honest
engine uses for its own things (a method ``write``, a local ``open``) are not in here.

The engine runs in its own worker process (docs/CONTRACTS.md, "The gate"), so these rules are
a thin first line; they keep out what a worker should never do at all.

Threads stay refused (decision for issue 10): the candidate's and the baseline's workers are
alive at the same time and share the cores and the GPU, so a thread (or an asyncio loop) left
running between calls keeps working while the other engine is timed. An autotuner times its
configurations one after another on the calling thread (``time.perf_counter`` plus a device
synchronise) and needs none.
"""

from __future__ import annotations

#: Why an environment write is refused (rule ``env-write``; ``harness.static_env``).
ENV_WHY = ("changes the process environment: libraries read it and run what it names (CXX, CC, TORCHINDUCTOR_*, TRITON_*); "
           "an engine reads it only (os.environ.get, os.getenv, `in`)")
#: Module roots an engine may not import: the reference model and the judge, processes, network, pickle,
#: loaders of non-source code, native code, threads and after-exit hooks.
FORBIDDEN_ROOTS: dict[str, str] = {
    **dict.fromkeys(("transformers", "harness", "vllm", "sglang", "huggingface_hub"), "the reference model or the judge"),
    **dict.fromkeys(("subprocess", "multiprocessing", "pty", "_posixsubprocess", "posix", "nt", "_winapi"),
                    "starts processes or reaches os functions past their rules"),
    **dict.fromkeys(("socket", "ssl", "requests", "urllib", "urllib3", "http", "httpx", "aiohttp", "ftplib", "smtplib",
                     "telnetlib", "xmlrpc", "websocket", "websockets", "grpc"), "network"),
    **dict.fromkeys(("pickle", "_pickle", "cPickle", "dill", "cloudpickle", "shelve", "marshal", "joblib"),
                    "unpickling runs stored code"),
    **dict.fromkeys(("ctypes", "_ctypes", "cffi"), "native code outside the source rules"),
    **dict.fromkeys(("zipimport", "runpy", "imp", "pkgutil", "code", "codeop", "py_compile", "compileall", "site",
                     "timeit", "_io", "_imp", "tempfile", "cProfile", "profile", "_lsprof", "pdb", "bdb", "doctest", "trace",
                     "unittest", "idlelib", "lib2to3", "pydoc"),
                    "loads, compiles or runs code that is not the engine's .py source (from a string or a file), or writes files"),
    **dict.fromkeys(("sqlite3", "dbm", "zipfile", "tarfile"), "writes files"),
    **dict.fromkeys(("threading", "_thread", "concurrent", "asyncio", "sched", "atexit", "signal", "faulthandler"),
                    "threads and hooks keep running while the other engine is timed (see harness/static_rules.py)"),
}
#: Submodules refused although their root is allowed (importlib.import_module of the engine's own modules is fine).
FORBIDDEN_MODULES: dict[str, str] = {
    **dict.fromkeys(("importlib.machinery", "importlib.util", "importlib.abc", "importlib._bootstrap",
                     "importlib._bootstrap_external"), "module loaders run files that are not the engine's .py source"),
    "torch.utils.cpp_extension": "builds and loads native extension modules",
    "numpy.ctypeslib": "native code outside the source rules (it hands out ctypes)",
    **dict.fromkeys(("torch.multiprocessing", "torch.utils.data", "torch.distributed"),
                    "starts processes or threads that keep running while the other engine is timed"),
    **dict.fromkeys(("torch.serialization", "torch.package", "torch._weights_only_unpickler"),
                    "unpickling runs stored code; weights come only through metainfer.checkpoint"),
    "logging.handlers": "writes files", "torch.utils.tensorboard": "writes files",
}
ALLOWED_METAINFER = ("metainfer.checkpoint", "metainfer.formats")

#: Dotted callables refused wherever they are referenced (called, aliased or passed), with the reason.
FORBIDDEN_CALLS: dict[str, str] = {
    **dict.fromkeys(("torch.load", "numpy.load", "numpy.fromfile", "numpy.memmap", "torch.hub.load"),
                    "weights come only through metainfer.checkpoint"),
    **dict.fromkeys(("io.open", "io.FileIO", "os.open", "os.fdopen", "builtins.open", "codecs.open", "os.openpty"),
                    "opens files past the mode check; read with open(path) (mode 'r' or 'rb')"),
    **dict.fromkeys(("torch.save", "numpy.save", "numpy.savez", "numpy.savez_compressed", "numpy.savetxt", "numpy.tofile",
                     "os.write", "os.pwrite", "os.writev",
                     "os.remove", "os.unlink", "os.rename", "os.renames", "os.replace", "os.makedirs", "os.mkdir",
                     "os.rmdir", "os.removedirs", "os.chmod", "os.chown", "os.symlink", "os.link", "os.truncate",
                     "os.utime", "os.mkfifo", "os.mknod", "pathlib.Path.write_text", "pathlib.Path.write_bytes",
                     "logging.FileHandler", "torch.jit.save", "torch.export.save", "torch.onnx.export",
                     "torch.cuda.memory._dump_snapshot"),
                    "an engine writes no files"),
    **dict.fromkeys(("os.system", "os.popen", "os.fork", "os.forkpty", "os.kill", "os.killpg", "os.startfile",
                     "os.getppid", "os.register_at_fork", "os.setsid", "os.setpgid", "os.setpgrp"),
                    "processes are off limits"),
    **dict.fromkeys(("os._exit", "os.abort", "sys.exit", "exit", "quit"),
                    "an engine never ends the process (the judge decides and writes the verdict)"),
    **dict.fromkeys(("os.putenv", "os.unsetenv"), ENV_WHY),
    **dict.fromkeys(("sys._getframe", "sys._current_frames", "sys.settrace", "sys.setprofile", "sys.addaudithook",
                     "inspect.stack", "inspect.currentframe", "inspect.getouterframes", "inspect.getinnerframes",
                     "inspect.trace", "inspect.getframeinfo", "traceback.walk_stack", "traceback.walk_tb",
                     "traceback.extract_stack", "traceback.StackSummary", "gc.get_objects", "gc.get_referrers",
                     "gc.get_referents", "gc.callbacks", "gc.garbage"),
                    "frame and heap walking reaches the caller's data"),
    **dict.fromkeys(("eval", "exec", "compile", "builtins.eval", "builtins.exec", "builtins.compile"),
                    "runs code that is not the engine's source; write the code out"),
    **dict.fromkeys(("torch.ops.load_library", "torch.classes.load_library"), "loads a native extension module"),
    "operator.methodcaller": "calls a method named by a string the rules cannot follow; call the method by name",
    **dict.fromkeys(("torch.set_num_threads", "torch.set_num_interop_threads", "os.sched_setaffinity", "os.setpriority",
                     "os.nice", "os.sched_setscheduler"),
                    "the judge gives both engines the same threads and CPUs (engine.load's threads); an engine keeps them"),
    "string.Formatter": "format fields walk attributes and items by name ('0.__globals__[...]'); format with str.format",
}
#: Dotted prefixes refused like FORBIDDEN_CALLS.
FORBIDDEN_PREFIXES: dict[str, str] = {
    "os.exec": "processes are off limits", "os.spawn": "processes are off limits", "os.posix_spawn": "processes are off limits",
    "shutil.": "an engine writes, moves or deletes no files",
    # global module hooks would see the reference model's inputs and outputs
    "torch.nn.modules.module.register_module_": "a process-wide module hook", "torch.nn.modules.module._global_": "a process-wide module hook",
}
#: Attributes the engine may not read: the judge's command line, the import system, the namespaces of modules.
FORBIDDEN_ATTRS: dict[str, str] = {
    **dict.fromkeys(("sys.argv", "sys.orig_argv"), "the judge's command line is off limits"),
    **dict.fromkeys(("sys.modules", "sys.path", "sys.meta_path", "sys.path_hooks", "sys.path_importer_cache",
                     "builtins.__dict__", "sys.__dict__", "os.__dict__", "io.__dict__", "importlib.__dict__"),
                    "the import system and module namespaces are off limits"),
    **dict.fromkeys(("sys.excepthook", "sys.unraisablehook", "sys.displayhook", "sys.breakpointhook", "sys.setswitchinterval"),
                    "process-wide hooks are off limits"),
}
#: Attribute names refused on any object: frames, code objects, function globals, the class tree.
INTROSPECTION_ATTRS = {"f_back", "f_locals", "f_globals", "f_builtins", "gi_frame", "cr_frame", "ag_frame", "tb_frame",
                       "__traceback__", "__globals__", "__code__", "__subclasses__", "__builtins__", "__loader__",
                       "__getattribute__", "__closure__", "__func__", "__self__", "__reduce__", "__reduce_ex__", "__spec__"}
#: Attribute names that are modules the rules refuse or watch: reached through another module (``os.sys.modules``,
#: ``numpy.ctypeslib.ctypes``, ``torch.multiprocessing``), they would dodge the import and dotted-name rules.
MODULE_ATTRS = {"os", "sys", "io", "builtins", "importlib", "shutil", "ctypes", "_ctypes", "pickle", "_pickle", "marshal",
                "subprocess", "_posixsubprocess", "multiprocessing", "threading", "_thread", "socket", "signal", "posix",
                "gc", "inspect", "traceback", "runpy", "zipimport", "cProfile", "pdb", "doctest"}
#: Keyword arguments that turn a loader into an unpickler (``torch.load(..., weights_only=False)``,
#: ``numpy.load(..., allow_pickle=True)``): refused on any call.
UNPICKLING_KEYWORDS = {"weights_only": False, "allow_pickle": True}
#: Bare names refused (they reach builtins or the module's loader).
FORBIDDEN_NAMES = {"__builtins__", "__loader__"}
#: Path methods that change the file system (pathlib only; names with other common meanings are not here).
WRITE_METHODS = {"write_text", "write_bytes", "unlink", "rmdir", "touch", "mkdir", "symlink_to", "hardlink_to", "chmod",
                 "lchmod", "tofile", "link_to", "export_chrome_trace", "export_stacks"}
#: Configuration namespaces of torch whose flags an engine may set to a plain constant (TF32, cuDNN autotuning,
#: Dynamo/Inductor knobs): they change how the engine's own worker computes, which parity and the bench then judge,
#: and no code the judge runs there (harness.worker_main) reads them. Any other assignment to a module is a patch.
CONFIG_PREFIXES = ("torch.backends.", "torch._dynamo.config.", "torch._inductor.config.", "torch._functorch.config.")
#: String values allowed for a few configuration flags (beside the plain constants of every flag): the TF32 API of
#: torch >= 2.9 (``fp32_precision``) and Inductor's autotuning backend lists. A flag maps to its choices and the
#: separator of a list (None: one choice); a string for any other flag is refused, since strings are how a flag names
#: a program, a path or a command (``torch._inductor.config.cpp.cxx``, ``cuda.cutlass_dir``).
_FP32 = (frozenset({"ieee", "tf32", "bf16", "none"}), None)
_GEMM = (frozenset({"ATEN", "TRITON", "CPP", "CUTLASS", "CK", "CKTILE", "CUTEDSL", "NVGEMM"}), ",")
STRING_FLAGS: dict[str, tuple[frozenset[str], str | None]] = {
    **dict.fromkeys(("torch.backends.fp32_precision", "torch.backends.cuda.matmul.fp32_precision",
                     "torch.backends.cudnn.fp32_precision", "torch.backends.cudnn.conv.fp32_precision",
                     "torch.backends.cudnn.rnn.fp32_precision", "torch.backends.mkldnn.fp32_precision",
                     "torch.backends.mkldnn.matmul.fp32_precision", "torch.backends.mkldnn.conv.fp32_precision",
                     "torch.backends.mkldnn.rnn.fp32_precision"), _FP32),
    "torch._inductor.config.max_autotune_gemm_backends": _GEMM,
    "torch._inductor.config.max_autotune_conv_backends": (frozenset({"ATEN", "TRITON"}), ","),
}
#: Members of torch's configuration modules (``torch.utils._config_module``) that set flags past the constant rule
#: (``load_config`` also unpickles bytes); ``patch`` is checked like an assignment (``harness.static_patches``).
CONFIG_SETTERS = frozenset({"load_config", "_make_closure_patcher", "__setattr__", "__delattr__", "_set_alias_val", "_config",
                            "__dict__"})
#: The process environment (``harness.static_env``): libraries read it and run what it names (``CXX``, ``CC``,
#: ``TORCHINDUCTOR_*``, ``TRITON_*``), so an engine reads it and never writes it.
ENV_OBJECTS = ("os.environ", "os.environb")
#: Attribute names of the environment objects that only read (every other one, ``update``, ``_data``, ..., is refused).
ENV_READERS = frozenset({"get", "copy"})
#: Attribute names that change the environment on any object (``__import__('os').putenv``).
ENV_SETTERS = frozenset({"putenv", "unsetenv"})
#: setattr on objects under these roots patches what the judge computes with
PATCH_ROOTS = {"torch", "numpy", "builtins", "math", "time", "sys", "os", "io"}
#: Modules whose attributes, looked up by a computed name or through their namespace, reach any import, file or process.
DYNAMIC_TARGETS = {"importlib", "builtins", "__builtins__", "sys", "os", "io", "pathlib", "posixpath", "shutil"}
#: Modules an engine may name only as the object of an attribute access (``os.path.join``, ``sys.version_info``), never
#: as a value (an argument, an assignment, a return, an item, a default, a comprehension's element): handed on, the
#: module reaches code the dotted-name rules cannot follow (``def f(m): return m.system(...)``, ``f(os)``). These are
#: the modules whose members the rules refuse or watch: those reached as attributes (``MODULE_ATTRS``), those read by a
#: computed name (``DYNAMIC_TARGETS``), the roots of the refused callables and attributes (``codecs.open``,
#: ``logging.FileHandler``, ``operator.methodcaller``, ``string.Formatter``, ``inspect.stack``, ...), and ``os.path``
#: (a module, posixpath, whose ``dirname`` nesting is the path-escape rule; ``from os import path`` binds it).
#: torch and numpy stay out: passing them around is everyday array code (``xp = np``), and their refused members
#: (``torch.load``, ``numpy.load``) refuse unpickling by default (``weights_only``, ``allow_pickle``), a switch refused
#: on any call; the worker's isolation is the wall behind them.
WATCHED_MODULES = frozenset(
    MODULE_ATTRS | DYNAMIC_TARGETS | {"os.path"}
    | {k.split(".")[0] for table in (FORBIDDEN_CALLS, FORBIDDEN_PREFIXES, FORBIDDEN_ATTRS) for k in table if "." in k}
) - {"torch", "numpy", "__builtins__"}
#: String literals that name the judge's process state (``os.path.join(os.sep, "proc", ppid, "cmdline")``).
PROC_WORDS = {"proc", "/proc", "cmdline", "environ"}
