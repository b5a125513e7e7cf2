"""The wire format between the judge and its worker processes: plain data and tensors, never pickle.

A worker runs engine code, so whatever it sends is untrusted: the judge must not execute
anything while decoding it (``pickle`` would). A message is a JSON document (dicts with string
keys, lists, str, int, float incl. NaN/inf, bool, None) in which CPU tensors are replaced by
``{"__tensor__": i, "dtype": "float32", "shape": [T, V]}``, followed by the tensors' raw bytes:

    header  = struct "<QI": JSON length, number of buffers
    JSON    = UTF-8
    buffers = for each: struct "<Q" byte length, then the bytes (C-contiguous, little-endian)

Reads and writes take an absolute ``deadline`` (``time.monotonic()`` seconds); a peer that
does not answer in time raises ``TimeoutError``, one that closed its end ``EOFError``, one that
sent something malformed ``ProtocolError``.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time
from typing import Any

import torch

#: dtypes a tensor may have on the wire (anything else is a ProtocolError).
DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64,
    "int64": torch.int64, "int32": torch.int32, "uint8": torch.uint8, "bool": torch.bool,
}
#: Largest JSON part and largest single buffer accepted (bytes): a worker cannot make the judge allocate more.
MAX_JSON = 256 * 1024 * 1024
MAX_BUFFER = 16 * 1024**3
#: Longest string (and dict key) accepted inside a message: replies carry dtype and device names, errors and
#: tracebacks (cut to 4000 and 6000 characters by the worker), never more; a longer one would end up in the verdict.
MAX_STRING = 64 * 1024
_HEAD = struct.Struct("<QI")
_LEN = struct.Struct("<Q")
_CHUNK = 1 << 20


class ProtocolError(RuntimeError):
    """A message that does not follow the wire format (a broken or hostile worker)."""


def _flatten(obj: Any, bufs: list[bytes]) -> Any:
    if isinstance(obj, torch.Tensor):
        t = obj.detach().to("cpu").contiguous()
        name = str(t.dtype).removeprefix("torch.")
        if name not in DTYPES:
            t, name = t.float(), "float32"
        bufs.append(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        return {"__tensor__": len(bufs) - 1, "dtype": name, "shape": list(t.shape)}
    if isinstance(obj, dict):
        return {str(k): _flatten(v, bufs) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_flatten(v, bufs) for v in obj]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"cannot send {type(obj).__name__} to the other process; send plain data or CPU tensors")


def encode(obj: Any) -> bytes:
    """One message: ``obj`` (plain data and tensors) as bytes in the wire format.

    Raises:
        TypeError: ``obj`` holds something other than plain data and tensors.
    """
    bufs: list[bytes] = []
    body = json.dumps(_flatten(obj, bufs)).encode()
    parts = [_HEAD.pack(len(body), len(bufs)), body]
    for b in bufs:
        parts += [_LEN.pack(len(b)), b]
    return b"".join(parts)


def _tensor(spec: dict, bufs: list[bytearray]) -> torch.Tensor:
    try:
        buf, dtype, shape = bufs[spec["__tensor__"]], DTYPES[spec["dtype"]], [int(s) for s in spec["shape"]]
    except (KeyError, IndexError, TypeError, ValueError) as err:
        raise ProtocolError(f"bad tensor descriptor {str(spec)[:200]}: {err}") from None
    numel = 1
    for s in shape:
        if s < 0:
            raise ProtocolError(f"negative tensor dimension in {shape}")
        numel *= s
    itemsize = torch.empty((), dtype=dtype).element_size()
    if numel * itemsize != len(buf):
        raise ProtocolError(f"tensor of shape {shape} and dtype {spec['dtype']} needs {numel * itemsize} bytes, got {len(buf)}")
    if numel == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(buf, dtype=dtype).reshape(shape)


def _rebuild(obj: Any, bufs: list[bytearray]) -> Any:
    if isinstance(obj, dict):
        if "__tensor__" in obj:
            return _tensor(obj, bufs)
        return {_short(k): _rebuild(v, bufs) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_rebuild(v, bufs) for v in obj]
    return _short(obj) if isinstance(obj, str) else obj


def _short(text: str) -> str:
    if len(text) > MAX_STRING:
        raise ProtocolError(f"a string of {len(text)} characters (the limit is {MAX_STRING}): {text[:80]!r}...")
    return text


def _wait(fd: int, deadline: float | None, write: bool) -> None:
    timeout = None if deadline is None else max(0.0, deadline - time.monotonic())  # past it: poll once
    r, w, _ = select.select([] if write else [fd], [fd] if write else [], [], timeout)
    if not (r or w):
        raise TimeoutError("deadline passed")


def _read_exact(fd: int, n: int, deadline: float | None) -> bytearray:
    out = bytearray(n)
    view = memoryview(out)
    pos = 0
    while pos < n:
        _wait(fd, deadline, write=False)
        got = os.readv(fd, [view[pos : min(n, pos + 64 * _CHUNK)]])
        if got == 0:
            raise EOFError("the other process closed the pipe")
        pos += got
    return out


def send(fd: int, obj: Any, deadline: float | None = None) -> None:
    """Encode ``obj`` and write it to ``fd`` (blocking or non-blocking), by ``deadline``.

    Raises:
        TimeoutError: the peer did not take the bytes in time; BrokenPipeError: it is gone.
    """
    data = memoryview(encode(obj))
    pos = 0
    while pos < len(data):
        _wait(fd, deadline, write=True)
        try:
            pos += os.write(fd, data[pos : pos + 16 * _CHUNK])
        except BlockingIOError:
            continue


def recv(fd: int, deadline: float | None = None, max_bytes: int | None = None) -> Any:
    """Read one message from ``fd`` by ``deadline`` and decode it (tensors come back as CPU tensors).

    ``max_bytes``: a cap on the whole message (JSON and buffers), checked before each allocation, so a
    worker cannot make the judge allocate more than that for one reply; None: only the per-part limits.

    Raises:
        TimeoutError, EOFError, ProtocolError (see the module docstring).
    """
    n_json, n_bufs = _HEAD.unpack(bytes(_read_exact(fd, _HEAD.size, deadline)))
    if n_json > MAX_JSON or n_bufs > 1_000_000:
        raise ProtocolError(f"message header claims {n_json} JSON bytes and {n_bufs} buffers")
    total = n_json
    if max_bytes is not None and total > max_bytes:
        raise ProtocolError(f"message of over {max_bytes} bytes (its JSON alone is {n_json})")
    try:
        doc = json.loads(bytes(_read_exact(fd, n_json, deadline)))
    except (ValueError, RecursionError) as err:  # RecursionError: nested deeper than the decoder goes
        raise ProtocolError(f"message is not JSON: {str(err)[:200]}") from None
    bufs = []
    for _ in range(n_bufs):
        (size,) = _LEN.unpack(bytes(_read_exact(fd, _LEN.size, deadline)))
        if size > MAX_BUFFER:
            raise ProtocolError(f"buffer of {size} bytes is over the {MAX_BUFFER}-byte limit")
        total += size
        if max_bytes is not None and total > max_bytes:
            raise ProtocolError(f"message of over {max_bytes} bytes (the judge's cap on one reply)")
        bufs.append(_read_exact(fd, size, deadline))
    try:
        return _rebuild(doc, bufs)
    except RecursionError:
        raise ProtocolError("message nested too deeply") from None
