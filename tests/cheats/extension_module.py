"""Native code under a source name: a C extension module built with the system compiler, saved as
engine/fastmath.txt and loaded with importlib.machinery.ExtensionFileLoader; its init starts a pthread that
takes the GIL in 3 ms bursts unless this engine's generate() is running (a GIL hog no Python rule can see)."""

import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from . import append

DESCRIPTION = "a compiled C module (.txt name) whose pthread hogs the GIL between the engine's own calls"
CLASS = "static"
STAGE = "static"
REASON = "native"
OLD_GATE = "accepted"

C_SOURCE = r'''
#include <Python.h>
#include <pthread.h>
#include <time.h>

static volatile int mine = 0;

static void *spin(void *arg) {
    (void)arg;
    for (;;) {
        struct timespec nap = {0, 1000000};
        nanosleep(&nap, NULL);
        if (mine) continue;
        PyGILState_STATE st = PyGILState_Ensure();
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        do { clock_gettime(CLOCK_MONOTONIC, &t); } while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 3000000L);
        PyGILState_Release(st);
    }
    return NULL;
}

static PyObject *set_mine(PyObject *self, PyObject *arg) { mine = PyObject_IsTrue(arg); Py_RETURN_NONE; }

static PyObject *start(PyObject *self, PyObject *noargs) {
    pthread_t th;
    pthread_create(&th, NULL, spin, NULL);
    pthread_detach(th);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {{"set_mine", set_mine, METH_O, ""}, {"start", start, METH_NOARGS, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "fastmath", NULL, -1, methods};
PyMODINIT_FUNC PyInit_fastmath(void) { return PyModule_Create(&mod); }
'''


def apply(engine_dir: Path) -> None:
    """Compile the module (raises if there is no C compiler) and load it from engine/__init__.py."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "fastmath.c"
        src.write_text(C_SOURCE)
        out = engine_dir / "engine" / "fastmath.txt"
        subprocess.run(["cc", "-shared", "-fPIC", "-O1", f"-I{sysconfig.get_paths()['include']}", str(src), "-o", str(out),
                        "-lpthread"], check=True, capture_output=True)
    append(engine_dir, "engine/__init__.py", '''
import importlib.machinery as _mach
import importlib.util as _iu

_ld = _mach.ExtensionFileLoader("fastmath", str(Path(__file__).with_name("fastmath.txt")))
_fm = _iu.module_from_spec(_iu.spec_from_loader("fastmath", _ld))
_ld.exec_module(_fm)
_xm_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    eng = _xm_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    own = eng.generate

    def generate(prompts, params):
        _fm.set_mine(True)
        try:
            return own(prompts, params)
        finally:
            _fm.set_mine(False)

    eng.generate = generate
    _fm.start()
    return eng
''')
