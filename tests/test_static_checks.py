"""The static stage: layout, AST anti-cheat rules with file and line, size, tunables, audited import, harness digest."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cheats import render_tiny
from harness.hashing import HARNESS_DIR, harness_digest
from harness.static_ast import check_source
from harness.static_checks import StaticLimits, run_static

MINIMAL_INIT = '''"""A minimal engine."""
from pathlib import Path


class SamplingParams:
    max_tokens = 16


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    return (Path(__file__).with_name("tunables.json"), checkpoint)
'''


def make_engine(root: Path, extra: str = "", tunables: dict | None = None) -> Path:
    """A minimal engine folder: engine/__init__.py (+ ``extra`` appended) and tunables.json."""
    (root / "engine").mkdir(parents=True)
    (root / "engine" / "__init__.py").write_text(MINIMAL_INIT + extra)
    tun = tunables if tunables is not None else {"values": {"block": 64}, "space": {"block": [32, 64]}}
    (root / "engine" / "tunables.json").write_text(json.dumps(tun))
    return root


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    return render_tiny(tmp_path_factory.mktemp("static-render"))


def test_rendered_tiny_engine_is_clean(rendered):
    res = run_static(rendered)
    assert res.ok, res.error
    assert res.imported and res.files > 5 and res.total_bytes > 10_000


def test_minimal_engine_is_clean(tmp_path):
    res = run_static(make_engine(tmp_path))
    assert res.ok, res.error


BAD = [
    ("import transformers", "forbidden-import", "transformers"),
    ("from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe", "forbidden-import", "transformers"),
    ("from metainfer.build import loop", "forbidden-import", "metainfer.build"),
    ("import harness.parity", "forbidden-import", "harness"),
    ("import subprocess", "forbidden-import", "subprocess"),
    ("import socket", "forbidden-import", "socket"),
    ("import pickle", "forbidden-import", "pickle"),
    ("import torch\nW = torch.load('w.pt')", "forbidden-call", "torch.load"),
    ("import numpy as np\nX = np.load('x.npy')", "forbidden-call", "numpy.load"),
    ("import os\nos.system('ls')", "forbidden-call", "os.system"),
    ("import sys\nF = sys._getframe(1)", "forbidden-call", "sys._getframe"),
    ("import sys\nR = sys.modules['harness.reference']", "forbidden-call", "sys.modules"),
    ("import importlib\nM = importlib.import_module('trans' + 'formers')", "forbidden-call", "computed name"),
    ("M = __import__('transformers')", "forbidden-import", "transformers"),
    ("f = open('x.txt', 'w')", "file-write", "writing"),
    ("import io\nio.open('x.txt')", "forbidden-call", "io.open"),
    ("import sys\nout = sys.argv[-1]", "forbidden-call", "sys.argv"),
    ("import threading", "forbidden-import", "threading"),
    ("import torch\nsetattr(torch.Tensor, 'norm', len)", "monkeypatch", "setattr"),
    ("Path('x.txt').write_text('x')", "file-write", "write_text"),
    ("P = Path(__file__).resolve().parents[2] / 'x'", "path-escape", "parents"),
    ("P = Path(__file__).parent.parent.parent / 'x'", "path-escape", ".parent"),
    ("P = '/tmp/cache/logits.pt'", "path-escape", "/tmp/cache/logits.pt"),
    ("import torch\ntorch.allclose = lambda *a, **k: True", "monkeypatch", "torch.allclose"),
    ("def f(:\n  pass", "syntax", "does not compile"),
    # file writes: the capability, however it is reached
    ("P = Path('x.txt').open('w')", "file-write", ".open()"),
    ("kw = {'mode': 'w'}\nf = open('x.txt', **kw)", "file-write", "computed mode"),
    ("import functools\nW = functools.partial(open, mode='w')", "file-write", "passes the builtin open"),
    ("import os as o\nd = o.open('x', 1)", "forbidden-call", "os.open"),
    ("import builtins\nf = builtins.open('x')", "forbidden-call", "builtins.open"),
    # ending the process
    ("from os import _exit as bye\ndef f():\n    bye(0)", "forbidden-call", "os._exit"),
    ("import os as o\ndef f():\n    o._exit(0)", "forbidden-call", "os._exit"),
    ("import sys\ndef f():\n    sys.exit(0)", "forbidden-call", "never ends the process"),
    ("def f():\n    raise SystemExit(0)", "forbidden-call", "SystemExit"),
    ("def f():\n    exit()", "forbidden-call", "never ends the process"),
    # namespaces, frames, code objects
    ("import sys\nA = vars(sys)['ar' + 'gv']", "forbidden-call", "namespace"),
    ("import sys\nA = sys.__dict__['argv']", "forbidden-call", "sys.__dict__"),
    ("B = __builtins__", "forbidden-call", "__builtins__"),
    ("def f():\n    return f.__globals__", "forbidden-call", "__globals__"),
    ("def f(g):\n    return getattr(g, '__globals__')", "forbidden-call", "__globals__"),
    ("C = object.__subclasses__()", "forbidden-call", "__subclasses__"),
    ("import traceback\nS = traceback.walk_stack(None)", "forbidden-call", "traceback.walk_stack"),
    ("import sys\nsys.path.insert(0, 'x')", "forbidden-call", "sys.path"),
    ("import os\nP = os.path.join(os.sep, 'proc', str(os.getpid()), 'cmdline')", "forbidden-call", "'proc'"),
    ("import os\nQ = os.getppid()", "forbidden-call", "os.getppid"),
    # code that is not the engine's .py source
    ("import importlib.machinery as m\nL = m.SourceFileLoader('x', 'engine/x.txt')", "forbidden-import", "loaders"),
    ("from importlib.util import spec_from_file_location", "forbidden-import", "loaders"),
    ("import zipimport", "forbidden-import", "zipimport"),
    ("import runpy", "forbidden-import", "runpy"),
    ("def f(p):\n    exec(open(p).read())", "forbidden-call", "exec"),
    ("def f(p):\n    return compile(open(p).read(), p, 'exec')", "forbidden-call", "compile"),
    ("X = eval('1 + 1')", "forbidden-call", "eval"),
    ("from torch.utils.cpp_extension import load_inline", "forbidden-import", "native extension"),
    ("import torch\ntorch.ops.load_library('x.so')", "forbidden-call", "load_library"),
    ("import tempfile", "forbidden-import", "tempfile"),
    ("import timeit", "forbidden-import", "timeit"),
    ("import posix", "forbidden-import", "posix"),
    ("import logging\nH = logging.FileHandler('x.log')", "file-write", "logging.FileHandler"),
    ("import zipfile", "forbidden-import", "zipfile"),
    ("import sqlite3", "forbidden-import", "sqlite3"),
    ("def f(prof):\n    prof.export_chrome_trace('t.json')", "file-write", "export_chrome_trace"),
    ("import sys\nsys.setswitchinterval(10.0)", "forbidden-call", "setswitchinterval"),
    # attempts of session 2 (R): capabilities reached through string-built names, other modules' attributes,
    # library functions that run code, unpicklers and process starters inside torch
    ("def f(g):\n    return getattr(g, '__glo' + 'bals__')", "forbidden-call", "'__globals__' from pieces"),
    ("S = {}\nB = S['_' * 2 + 'builtins' + '_' * 2]", "forbidden-call", "'__builtins__' from pieces"),
    ("N = ''.join(['__imp', 'ort__'])", "forbidden-call", "'__import__' from pieces"),
    ("N = '%s%s' % ('__cl', 'osure__')", "forbidden-call", "'__closure__' from pieces"),
    ("import importlib, operator\nT = operator.methodcaller('import_module', 'thr' + 'eading')(importlib)",
     "forbidden-call", "operator.methodcaller"),
    ("import operator\nG = operator.attrgetter('__globals__')", "forbidden-call", "attrgetter"),
    ("import functools\nM = functools.reduce(getattr, ['modules'], object)", "forbidden-call", "passes getattr around"),
    ("import os\nF = os.__getattribute__('fo' + 'rk')", "forbidden-call", "__getattribute__"),
    ("F = print.__self__", "forbidden-call", "__self__"),
    ("import os\nM = os.sys.modules", "forbidden-call", "module sys as an attribute"),
    ("import pathlib\nO = pathlib.io.open", "forbidden-call", "module io as an attribute"),
    ("import torch.multiprocessing as mp", "forbidden-import", "torch.multiprocessing"),
    ("import torch\nP = torch.multiprocessing.Process", "forbidden-import", "torch.multiprocessing"),
    ("from torch.utils.data import DataLoader", "forbidden-import", "torch.utils.data"),
    ("import torch.serialization as ser", "forbidden-import", "unpickling"),
    ("import torch\nW = torch.serialization.load('w.txt')", "forbidden-import", "unpickling"),
    ("def f(x):\n    return x(weights_only=False)",
     "forbidden-call", "weights_only=False"),
    ("import numpy\ndef f(p):\n    return numpy.lib.format.read_array(p, allow_pickle=True)", "forbidden-call", "allow_pickle"),
    ("import numpy.ctypeslib as nc\nL = nc.ctypes.CDLL(None)", "forbidden-import", "ctypes"),
    ("import cProfile\ndef f(src):\n    cProfile.Profile().runctx(src, {}, {})", "forbidden-import", "cProfile"),
    ("import pdb", "forbidden-import", "pdb"),
    ("import doctest", "forbidden-import", "doctest"),
    ("import trace", "forbidden-import", "trace"),
    ("import string\ndef f(g):\n    return string.Formatter().get_field('0.x', (g,), {})", "forbidden-call", "string.Formatter"),
    ("F = '0.__globals__[__builtins__][__import__]'", "forbidden-call", "'__globals__' inside the string"),
    ("import torch\no = getattr(torch, 'os')\no.fork()", "forbidden-call", "module os as an attribute"),
    # session 3 (R2, tuple_target_patch): every statement that binds an attribute of a module is a patch
    ("import torch\ntorch.set_num_threads, _x = abs, 0", "monkeypatch", "assigns torch.set_num_threads"),
    ("import torch\n[torch.softmax] = [abs]", "monkeypatch", "assigns torch.softmax"),
    ("import torch\n*torch.softmax, = [abs]", "monkeypatch", "assigns torch.softmax"),
    ("import torch\nfor torch.softmax in [abs]:\n    pass", "monkeypatch", "assigns torch.softmax"),
    ("import torch, contextlib\nwith contextlib.nullcontext(abs) as torch.softmax:\n    pass", "monkeypatch", "assigns torch.softmax"),
    ("import torch\nX = [0 for torch.softmax in [abs]]", "monkeypatch", "assigns torch.softmax"),
    ("import torch\ntorch.softmax: object = abs", "monkeypatch", "assigns torch.softmax"),
    ("import math\nmath.pi += 1", "monkeypatch", "assigns math.pi"),
    ("import torch\ndel torch.softmax", "monkeypatch", "deletes torch.softmax"),
    ("import torch, os\ntorch.set_num_threads(os.cpu_count())", "forbidden-call", "same threads"),
    ("import os\nos.sched_setaffinity(0, {0, 1})", "forbidden-call", "same threads and CPUs"),
    # a configuration flag takes a constant, not code, and only alone
    ("import torch\ntorch.backends.cuda.matmul.allow_tf32 = abs", "monkeypatch", "may be set to a constant"),
    ("import torch\ntorch.backends.cudnn.benchmark, _x = True, 0", "monkeypatch", "may be set to a constant"),
    ("import torch._inductor.config as ic\nic.cpp.cxx = 'sh'", "monkeypatch", "may be set to a constant"),
    # session 4 (string_backend_flags): strings only on the precision/backend-choice flags, and only their choices;
    # a flag naming a program, path or command takes no string
    ("import torch._inductor.config as ic\nic.cpp.cxx = 'g++'", "monkeypatch", "a string only on the precision"),
    ("import torch._inductor.config as ic\nic.cuda.cutlass_dir = 'cutlass'", "monkeypatch", "a string only on the precision"),
    ("import torch._inductor.config as ic\nic.max_autotune_gemm_backends = 'ATEN,engine/cc.txt'", "monkeypatch",
     "max_autotune_gemm_backends"),
    ("import torch\ntorch.backends.cuda.matmul.fp32_precision = 'sh cc.txt'", "monkeypatch", "one of their choices"),
    ("import torch\ntorch.backends.cuda.matmul.allow_tf32 = 'tf32'", "monkeypatch", "a string only on the precision"),
    # ... and a flag set through the configuration module's own setters takes no more than an assignment
    ("import torch._inductor.config as ic\nP = ic.patch({'cpp.cxx': 'cc.txt'})", "monkeypatch", "sets torch._inductor.config.cpp.cxx"),
    ("import torch._inductor.config as ic\nP = ic.patch('cpp.cxx', 'g++')", "monkeypatch", "sets torch._inductor.config.cpp.cxx"),
    ("import torch._inductor.config as ic\nP = ic.patch(cpp={'cxx': 'g++'})", "monkeypatch", "sets torch._inductor.config.cpp"),
    ("import torch._inductor.config as ic\nD = {}\nP = ic.patch(**D)", "monkeypatch", "computed mapping"),
    ("import torch._inductor.config as ic\nP = ic.patch", "monkeypatch", "uncalled"),
    ("import torch._inductor.config as ic\nic.cpp.__setattr__('cxx', 'g++')", "monkeypatch", "config.cpp.__setattr__"),
    ("import torch._inductor.config as ic\nic.load_config(b'')", "monkeypatch", "config.load_config"),
    ("import torch._inductor.config as ic\nC = vars(ic)", "monkeypatch", "vars(torch._inductor.config)"),
    # session 4 (inductor_cxx_env): the process environment is read, never written, under any alias or form
    ("import os\nos.environ['CXX'] = 'engine/cc.txt'", "env-write", "sets an item of os.environ"),
    ("from os import environ\nenviron['CC'] = 'cc.txt'", "env-write", "sets an item of os.environ"),
    ("import os as o\ndel o.environ['CXX']", "env-write", "deletes an item of os.environ"),
    ("import os\nos.environ['PATH'] += ':engine'", "env-write", "sets an item of os.environ"),
    ("from os import environ as E\nE |= {'CXX': 'cc.txt'}", "env-write", "augments os.environ in place"),
    ("import os\ne = os.environ\ndef f():\n    e['CXX'] = 'cc.txt'", "env-write", "sets an item of os.environ"),
    ("import os\nos.environ.update(CXX='cc.txt')", "env-write", "os.environ.update"),
    ("import os\nos.environ.setdefault('CXX', 'cc.txt')", "env-write", "os.environ.setdefault"),
    ("import os\nos.environ.pop('CXX', None)", "env-write", "os.environ.pop"),
    ("import os\nos.environ.popitem()", "env-write", "os.environ.popitem"),
    ("import os\nos.environ.clear()", "env-write", "os.environ.clear"),
    ("import os\nos.environ.__setitem__('CXX', 'cc.txt')", "env-write", "os.environ.__setitem__"),
    ("import os\nos.environ.__delitem__('CXX')", "env-write", "os.environ.__delitem__"),
    ("import os\nS = os.environ.setdefault\nS('CXX', 'cc.txt')", "env-write", "os.environ.setdefault"),
    ("import os\nos.environ._data[b'CXX'] = b'cc.txt'", "env-write", "os.environ._data"),
    ("import os\nos.environb[b'CXX'] = b'cc.txt'", "env-write", "sets an item of os.environb"),
    ("from os import environb\nenvironb.update({b'CXX': b'cc.txt'})", "env-write", "os.environb.update"),
    ("import os\nos.putenv('CXX', 'cc.txt')", "env-write", "os.putenv"),
    ("import os as o\no.unsetenv('CXX')", "env-write", "os.unsetenv"),
    ("from os import putenv", "env-write", "os.putenv"),
    ("import os, collections.abc as c\nc.MutableMapping.update(os.environ, CXX='cc.txt')", "env-write", "as a value"),
    ("import os\ndef f(env=os.environ):\n    env['CXX'] = 'cc.txt'", "env-write", "as a value"),
    ("__import__('os').environ['CXX'] = 'cc.txt'", "env-write", "sets an item of <...>.environ"),
    ("import importlib\nimportlib.import_module('os').putenv('CXX', 'cc.txt')", "env-write", ".putenv"),
    ("import os\nB = getattr(os, 'environb')", "env-write", "'environb'"),
    # session 5 (import_module_absolute): importlib.import_module loads only the engine's own modules, by a relative
    # name against __name__ / __package__; __import__ nothing; neither is passed around
    ("import importlib\nimportlib.import_module('os').system('true')", "forbidden-call", "importlib.import_module('os') loads"),
    ("from importlib import import_module as im\nM = im('os')", "forbidden-call", "absolute name"),
    ("import importlib as il\nM = il.import_module('shutil')", "forbidden-call", "absolute name"),
    ("import importlib\nHAS = importlib.import_module('triton') is not None", "forbidden-call", "use an import statement"),
    ("M = __import__('os')", "forbidden-call", "__import__('os') loads"),
    ("import builtins\nM = builtins.__import__('sys')", "forbidden-call", "absolute name"),
    ("import importlib\nM = importlib.import_module('.', 'os')", "forbidden-call", "against a package other"),
    ("import importlib\nM = importlib.import_module('.path', package='os')", "forbidden-call", "against a package other"),
    ("from os import name as __name__\nimport importlib\nM = importlib.import_module('.', __name__)", "forbidden-call",
     "against a package other"),
    ("import importlib\nF = importlib.import_module\nM = F('os')", "forbidden-call", "passes importlib.import_module around"),
    ("import importlib, functools\nF = functools.partial(importlib.import_module, 'os')", "forbidden-call", "passes importlib"),
    ("import importlib\nM = getattr(importlib, 'import_module')('os')", "forbidden-call", "passes importlib.import_module"),
    ("F = __import__\nM = F('os')", "forbidden-call", "passes __import__ around"),
    ("globals()['__name__'] = 'os'", "forbidden-call", "globals() written"),
    ("from . import kernels\nkernels.__name__ = 'posix'", "forbidden-call", "rebinds .__name__"),
    # session 5 (module_as_value): a watched module appears only as the object of an attribute access
    ("import os\ndef f(m):\n    return m.system('true')\nf(os)", "forbidden-call", "module os as a value"),
    ("import os as o\nL = [o]", "forbidden-call", "module os as a value"),
    ("import os\no = os\ndef f():\n    o._exit(0)", "forbidden-call", "module os as a value"),
    ("from os import path\nP = path", "forbidden-call", "module os.path as a value"),
    ("import os\nP = {'p': os.path}", "forbidden-call", "module os.path as a value"),
    ("import sys\ndef g():\n    return sys", "forbidden-call", "module sys as a value"),
    ("import shutil\ndef g(m=shutil):\n    return m", "forbidden-call", "module shutil as a value"),
    ("import os, sys\nL = [m.getcwd() for m in (os, sys)]", "forbidden-call", "as a value"),
    ("import gc\nR = getattr(gc, 'get_' + 'referrers')", "forbidden-call", "module gc as a value"),
    ("import codecs\nclass C:\n    m = codecs", "forbidden-call", "module codecs as a value"),
    ("import importlib\nX = (lambda m: m)(importlib)", "forbidden-call", "module importlib as a value"),
    ("from .util import os", "forbidden-call", "imports os from the engine's own module"),
    # session 16: logging.basicConfig is allowed to stderr only
    ("import logging\nlogging.basicConfig(filename='x.log')", "file-write", "logging.basicConfig with a filename"),
    ("import logging\nkw = {'filename': 'x.log'}\nlogging.basicConfig(**kw)", "file-write", "arguments out of sight"),
    ("import logging\nF = logging.basicConfig", "file-write", "passes logging.basicConfig around"),
]


@pytest.mark.parametrize("code, rule, words", BAD, ids=[b[1] + ":" + b[0].splitlines()[-1][:30] for b in BAD])
def test_each_rule_names_file_line_and_reason(tmp_path, code, rule, words):
    engine = make_engine(tmp_path, "\n" + code + "\n")
    res = run_static(engine, import_check=False)
    assert not res.ok
    hits = [f for f in res.findings if f.rule == rule]
    assert hits, [str(f) for f in res.findings]
    line = MINIMAL_INIT.count("\n") + 1 + code.count("\n") + 1  # last line of the appended code
    assert hits[0].file == "engine/__init__.py"
    assert hits[0].line is not None and MINIMAL_INIT.count("\n") < hits[0].line <= line
    assert words in hits[0].message
    assert f"engine/__init__.py:{hits[0].line}" in res.error


ALLOWED = [
    "from metainfer.checkpoint import CheckpointReader",
    "from metainfer.formats.nvfp4 import dequantize",
    "import importlib\ndef k(m):\n    return importlib.import_module(f'.{m}', __name__)",
    "P = Path(__file__).parent.parent / 'engine' / 'tunables.json'",
    "S = 'a/b'.replace('/', '.')",
    "import torch\nclass C:\n    def f(self):\n        self.x = torch.zeros(2)",
    # honest look-alikes of the rules above: names, not capabilities
    "import logging\nlogging.basicConfig(level=logging.WARNING, format='%(message)s')",  # to stderr (red team 4)
    "from logging import basicConfig\nbasicConfig(level=20)",
    "class KV:\n    def write(self, slot, k):\n        self.k = k\n    def flush(self):\n        self.write(0, 1)",
    "def f(cache, rows):\n    cache.write(rows)\n    cache.writelines(rows)",
    "def f(open):\n    return open('x', 'w')",
    "def open(path, mode='w'):\n    return (path, mode)\nX = open('a', 'w')",
    "def f(p):\n    with open(p) as fh:\n        return fh.read()",
    "def f(p):\n    with open(p, 'rb') as fh:\n        return fh.read()",
    "def f(p):\n    return Path(p).open().read() + Path(p).read_text()",
    "def f(store):\n    return store.open('r')",
    "def f():\n    exit = 3\n    return exit",
    "def f():\n    raise ValueError('max_seq_len too small: raise it')",
    "class Tunables:\n    def __init__(self):\n        self.d = vars(self)",
    "import re\nimport torch\nR = re.compile('a+')\nF = torch.compile",
    "import traceback\ndef f():\n    return traceback.format_exc()",
    "import time\nimport torch\ndef tune(fns):\n    best = None\n    for fn in fns:\n        t0 = time.perf_counter()\n        fn()\n        dt = time.perf_counter() - t0\n        best = min(best or (dt, fn), (dt, fn), key=lambda x: x[0])\n    return best[1]",
    "import os\nV = os.environ.get('TRITON_INTERPRET', '0')",
    "P = 'processed'\nQ = {'proc_count': 1}",
    "import logging\nLOG = logging.getLogger(__name__)\ndef f():\n    LOG.info('loaded')",
    # honest look-alikes of session 2's rules: computed names that are not dunders, a reduce, attrgetter of a field,
    # weights_only=True, a class's own __getattr__
    "KEYS = {f'moe_ops_{b}_{f}': b for b in 'sml' for f in ('block_m', 'split_k')}",
    "def f(self, name):\n    return getattr(self, name)",
    "def f(mod, op):\n    return getattr(mod, f'{op}_kernel')",
    "import functools, operator\nN = functools.reduce(operator.mul, (2, 3), 1)",
    "import operator\nK = operator.attrgetter('weight')",
    "N = 'layers.' + str(3) + '.mlp.__dunder_free'.strip('_')",
    "def f(load, p):\n    return load(p, weights_only=True)",
    "class W:\n    def __getattr__(self, name):\n        raise AttributeError(name)",
    "import torch\nC = torch.utils.checkpoint.checkpoint",
    "MSG = 'engine/__init__.py defines no load(): see its __init__ docstring'",
    "S = '{0.weight} of {1}'.format",
    # session 3 (R2, backend_flags): torch's configuration flags set to constants, and the engine's own objects bound freely
    "import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\ntorch.backends.cudnn.benchmark = True",
    "import torch._dynamo\ntorch._dynamo.config.cache_size_limit = 64\ntorch._dynamo.config.recompile_limit: int = -1",
    "import torch._inductor.config as ic\nic.coordinate_descent_tuning = True\nic.triton.cudagraphs = False",
    # session 4: the string-valued precision and backend-choice flags (string_backend_flags), and reading the
    # environment (inductor_cxx_env refused only its writes)
    "import torch\ntorch.backends.cuda.matmul.fp32_precision = 'tf32'\ntorch.backends.cudnn.conv.fp32_precision = 'tf32'",
    "import torch\ntorch.backends.fp32_precision = 'ieee'\ntorch.backends.mkldnn.matmul.fp32_precision = 'bf16'",
    "import torch._inductor.config as ic\nic.max_autotune_gemm_backends = 'ATEN,TRITON'\nic.max_autotune_conv_backends = 'aten'",
    "import torch._inductor.config as ic\n@ic.patch(max_autotune=True, max_autotune_gemm_backends='ATEN,TRITON')\ndef f():\n    pass",
    "import torch\nwith torch._dynamo.config.patch('cache_size_limit', 64), torch._inductor.config.patch({'triton.cudagraphs': False}):\n    C = torch._inductor.config.get_config_copy()",
    "import os\nV = os.getenv('TRITON_INTERPRET') or os.environ.get('TRITON_INTERPRET', '0')",
    "import os\nfrom os import environ\nX = 'HOME' in os.environ and 'CXX' not in environ\nY = os.environ['HOME']",
    "import os\nE = os.environ.copy()\nE['CXX'] = 'g++'\nD = dict(os.environ)\nN = len(os.environ)",
    "import os\nK = [k for k in os.environ if k.startswith('TRITON_')]\nfor k in os.environ:\n    pass",
    "import os\ndef f():\n    env = os.environ\n    return env.get('A'), 'B' in env",
    "class C:\n    def __init__(self):\n        self.env = {}\n        self.env['CXX'] = 'g++'\n        self.env.update(A='1')",
    "class S:\n    pass\ns = S()\ns.a, s.b = 1, 2\nfor s.c in range(2):\n    pass\ndel s.a",
    # session 5: the engine's own modules by a relative name; watched modules as the object of an attribute access,
    # getattr/hasattr by a literal name; modules the rules do not watch (math, numpy, torch) passed freely
    "import importlib\nK = importlib.import_module('.kernels', __package__)\ndef k(m):\n    return importlib.import_module(f'.{m}', __name__)",
    "import os\ndef f(a, b):\n    return os.path.join(a, b), os.environ.get('X'), os.path.basename(a)",
    "import sys\nNEW = sys.version_info >= (3, 11)\nsys.stderr.write('x')",
    "import os\ndef f(x):\n    return isinstance(x, os.PathLike)",
    "from os import path\ndef f(a):\n    return path.join(a, 'x')",
    "import os, sys\nS = getattr(os, 'sep'), hasattr(sys, 'frozen')",
    "import math\ndef f(m):\n    return m.sqrt(2)\nX = f(math)\nL = [math]",
    "import numpy as np\nimport torch\nxp = np\ndef f(lib=torch):\n    return lib.zeros(2)",
    "def f(path, os):\n    return path.join('x'), os",
    "X = globals().get('Y'), 'Z' in globals(), globals()['__name__']",
    "import functools\ndef deco(fn):\n    @functools.wraps(fn)\n    def w(*a):\n        return fn(*a)\n    return w\nN = deco.__name__",
]


@pytest.mark.parametrize("code", ALLOWED, ids=[f"allowed{i}" for i in range(len(ALLOWED))])
def test_legitimate_code_passes(code):
    assert check_source(MINIMAL_INIT + "\n" + code + "\n", "engine/__init__.py", 2) == []


def test_docstring_paths_are_not_flagged():
    assert check_source('"""Reads /tmp/cache/x.bin? No: see /usr/share/doc."""\nX = 1\n', "engine/a.py", 2) == []


def test_layout_needs_load_and_sampling_params(tmp_path):
    engine = make_engine(tmp_path)
    (engine / "engine" / "__init__.py").write_text("def load(checkpoint):\n    return checkpoint\n")
    res = run_static(engine)
    assert not res.ok and any(f.rule == "layout" and "SamplingParams" in f.message for f in res.findings)


def test_missing_folder_is_a_usage_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        run_static(tmp_path / "nope")


@pytest.mark.parametrize("tunables, words", [
    ({"values": {"block": 48}, "space": {"block": [32, 64]}}, "not one of its choices"),
    ({"values": {"block": 32, "extra": 1}, "space": {"block": [32, 64]}}, "no declared space"),
    ({"values": {"block": "32"}, "space": {"block": [32, 64]}}, "not one of its choices"),
    ({"values": {}}, '"space"'),
])
def test_tunables_out_of_space(tmp_path, tunables, words):
    res = run_static(make_engine(tmp_path, tunables=tunables))
    assert not res.ok and any(f.rule == "tunables" and words in f.message for f in res.findings), res.error


def test_tunables_bad_json_names_line(tmp_path):
    engine = make_engine(tmp_path)
    (engine / "engine" / "tunables.json").write_text('{"values": {\n  "block": 64,\n}, "space": {}}')
    res = run_static(engine)
    assert not res.ok and res.findings[0].rule == "tunables" and res.findings[0].line == 3


def test_size_limits_and_data_files(tmp_path):
    engine = make_engine(tmp_path)
    (engine / "engine" / "logits.npy").write_bytes(b"\x93NUMPY" + bytes(100))
    (engine / "engine" / "big.py").write_text("X = 1\n" * 20_000)
    res = run_static(engine, limits=StaticLimits(max_file_bytes=64 * 1024))
    rules = {(f.file, f.rule) for f in res.findings}
    assert ("engine/logits.npy", "size") in rules and ("engine/big.py", "size") in rules


def test_audited_import_catches_computed_read_and_write(tmp_path):
    target = tmp_path / "outside.txt"
    target.write_text("planted")
    engine = make_engine(tmp_path / "e", "\nimport os\n_P = os.environ.get('MI_TEST_PLANTED', '')\n"
                         "_D = open(_P).read() if _P else ''\n")
    import os

    os.environ["MI_TEST_PLANTED"] = str(target)
    try:
        res = run_static(engine)
    finally:
        del os.environ["MI_TEST_PLANTED"]
    assert res.imported and not res.ok
    f = next(f for f in res.findings if f.rule == "import-read")
    assert f.file == "engine/__init__.py" and f.line == MINIMAL_INIT.count("\n") + 4 and str(target) in f.message


def test_audited_import_allows_the_checkpoint(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{}")
    engine = make_engine(tmp_path / "e", f"\nimport os\n_C = open(os.path.join({str(ckpt)[1:]!r}.join(['/', '']), 'config.json')).read()\n")
    res = run_static(engine, ckpt)
    assert res.ok, res.error
    assert not run_static(engine).ok  # the same read without --checkpoint is outside


def test_harness_digest_tracks_content_not_caches(tmp_path):
    copy = tmp_path / "harness"
    shutil.copytree(HARNESS_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    d0 = harness_digest(copy)
    assert d0 == harness_digest(HARNESS_DIR) and len(d0) == 64
    (copy / "__pycache__").mkdir(exist_ok=True)
    (copy / "__pycache__" / "x.pyc").write_bytes(b"junk")
    assert harness_digest(copy) == d0
    gate = copy / "gate.py"
    gate.write_text(gate.read_text() + "\n# tampered\n")
    assert harness_digest(copy) != d0


def _pyc_of(source: str) -> bytes:
    import importlib.util
    import marshal

    return importlib.util.MAGIC_NUMBER + bytes(12) + marshal.dumps(compile(source, "x.py", "exec"))


PLANTED = [  # (relative path, bytes, rule): what Python could load that is not UTF-8 .py source
    ("engine/__pycache__/__init__.cpython-311.pyc", _pyc_of("X = 1"), "bytecode"),
    ("engine/helpers.pyc", _pyc_of("X = 1"), "bytecode"),
    ("engine/notes.txt", _pyc_of("X = 1"), "bytecode"),  # bytecode under another name
    ("engine/fast.cpython-311-x86_64-linux-gnu.so", b"\x7fELF\x02\x01\x01" + bytes(64), "extension-module"),
    ("engine/fast.pyd", b"MZ" + bytes(64), "extension-module"),
    ("engine/blob.md", b"\x7fELF\x02\x01\x01" + bytes(64), "extension-module"),
    ("engine/evil.pth", b"import os\n", "pth"),
    ("engine/u7.py", b"# coding: utf-7\nX = 1 #+AAo-import os\n", "encoding"),
    ("engine/l1.py", b"#!/usr/bin/env python\n# -*- coding: latin-1 -*-\nX = '\xe9'\n", "encoding"),
    ("engine/bad.py", b"X = '\xff\xfe'\n", "encoding"),
    ("engine/cc.txt", b"#!/bin/sh\nexec g++ \"$@\"\n", "script"),  # inductor_cxx_env: CXX pointed at it
    ("engine/run.py", b"#!/usr/bin/env python\nX = 1\n", "script"),
    ("engine/kernels/k.cu", b"#!/bin/bash\n", "script"),
    ("engine/.gitignore", b"*.py\n", "gitignore"),  # the build's commit would lack what the gate judged
    ("engine/.gitignore", b"/tunables.json\n", "gitignore"),
    (".gitignore", b"engine/*.json\n", "gitignore"),
    ("engine/.gitignore", b"x" * 9000 + b"\n", "size"),
    ("engine/.gitignore", b"\xff\xfe__pycache__\n", "size"),
    ("engine/.gitattributes", b"*.py filter=x\n", "size"),  # only .gitignore is allowed by name
    ("torch.py", b"X = 1\n", "layout"),  # would shadow torch for a process started in the engine folder
]


@pytest.mark.parametrize("rel, data, rule", PLANTED, ids=[p[0].rsplit("/", 1)[-1] for p in PLANTED])
def test_only_utf8_py_source_can_be_loaded(tmp_path, rel, data, rule):
    engine = make_engine(tmp_path)
    (engine / rel).parent.mkdir(parents=True, exist_ok=True)
    (engine / rel).write_bytes(data)
    res = run_static(engine, import_check=False)
    assert not res.ok and any(f.rule == rule and f.file.startswith(rel.split("/__pycache__")[0]) for f in res.findings), res.error


HONEST_FILES = [  # look-alikes that are plain source or data and must pass
    ("engine/u8.py", b"# -*- coding: utf-8 -*-\nX = '\xc3\xa9'\n"),
    ("engine/u8b.py", b"# a helper\n# vim: set fileencoding=UTF-8 :\nX = 1\n"),
    ("engine/notes.md", b"# notes\n\nA script starts with #!/bin/sh; none ships here.\n"),
    ("engine/k.txt", b" #!/bin/sh (not at the start)\n"),
    ("engine/.gitignore", b"# housekeeping\n__pycache__/\n.autotune/\n*.pyc\n!keep.pyc\n"),  # engine_gitignore
    (".gitignore", b"/.cache/\nscratch/\n"),
    ("engine/bom.py", b"\xef\xbb\xbfX = 1\n"),
    ("engine/late.py", b"X = 1\nY = 2\n# coding: latin-1 (line 3: Python ignores it)\n"),
    ("engine/kernels/NOTES.txt", b"tile sizes: 64 x 64\n"),
    ("ENGINE.md", "# the engine \u2014 notes\n".encode()),
]


@pytest.mark.parametrize("rel, data", HONEST_FILES, ids=[p[0].rsplit("/", 1)[-1] for p in HONEST_FILES])
def test_honest_source_and_data_files_pass(tmp_path, rel, data):
    engine = make_engine(tmp_path)
    (engine / rel).parent.mkdir(parents=True, exist_ok=True)
    (engine / rel).write_bytes(data)
    res = run_static(engine, import_check=False)
    assert res.ok, res.error


def test_links_are_refused(tmp_path):
    engine = make_engine(tmp_path / "e")
    (tmp_path / "outside.py").write_text("X = 1\n")
    (engine / "engine" / "inside.py").symlink_to(tmp_path / "outside.py")
    res = run_static(engine, import_check=False)
    assert not res.ok and any(f.rule == "symlink" and f.file == "engine/inside.py" for f in res.findings), res.error


def test_audited_import_writes_no_bytecode(tmp_path):
    engine = make_engine(tmp_path, "\nfrom . import helper\n")
    (engine / "engine" / "helper.py").write_text("X = 1\n")
    assert run_static(engine).ok
    assert not list(engine.rglob("__pycache__")) and run_static(engine).ok  # a second gate sees the same folder


def test_a_git_repository_inside_the_engine_folder_is_refused(tmp_path):
    """Its config (core.fsmonitor, filters) runs commands wherever git is used on the folder (git_config_in_engine)."""
    engine = make_engine(tmp_path, "")
    (engine / "engine" / ".git").mkdir()
    (engine / "engine" / ".git" / "config").write_text("[core]\n\tfsmonitor = touch /tmp/x\n")
    res = run_static(engine, import_check=False)
    assert not res.ok and any(f.file == "engine/.git" and "git repository inside" in f.message for f in res.findings)
