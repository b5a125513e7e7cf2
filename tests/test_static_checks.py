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
    ("import importlib\nM = importlib.import_module('trans' + 'formers')", "forbidden-call", "computed string"),
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
]


@pytest.mark.parametrize("code", ALLOWED)
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
