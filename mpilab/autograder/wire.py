"""Plain data as bytes that decode without running anything: what a student's process sends.

Results of student code reach the grader from processes the student controls (the
sandboxed kernel and MPI workers). Unpickling such bytes would run whatever they say, so
they travel in this format instead: a JSON document for the structure and raw buffers for
NumPy arrays, decoded with :func:`json.loads` and :func:`numpy.frombuffer` only::

    data = encode({"probe": np.arange(6.0).reshape(2, 3), "rank": 1})
    decode(data)     # -> {'probe': array([[0., 1., 2.], [3., 4., 5.]]), 'rank': 1}

What can travel is what :func:`mpilab.grading.run_on_ranks` accepts as a result: ``None``,
``bool``, ``int``, ``float``, ``complex``, ``str``, ``bytes``, lists, tuples and dicts of
them, and NumPy arrays of numbers (kinds ``b i u f c``). :func:`decode` checks every
part of what it is given (sizes, nesting, dtypes) and raises :class:`WireError`, never
anything else, for bytes that do not fit.

A value becomes plain data before it travels (:func:`plain`: NumPy scalars become Python
numbers, a ``bytearray`` bytes; anything else is refused with a ``TypeError`` that says
what it is); the checks convert their own results with it too (:mod:`mpilab.grading`).
"""

from __future__ import annotations

import base64
import json
import math
import struct
from typing import Any

import numpy as np

__all__ = ["WireError", "encode", "decode", "MAGIC", "SCALARS", "plain", "verify_plain"]

MAGIC = b"MPILAB-WIRE-1\n"
MAX_DEPTH = 24
MAX_BYTES = 512 << 20  # what one decode accepts in all
MAX_HEADER = 64 << 20
_KINDS = "biufc"


class WireError(ValueError):
    """Bytes that are not a valid encoding of plain data (or exceed the limits)."""


def _node(x: Any, bufs: list[bytes], depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise WireError(f"nested more than {MAX_DEPTH} levels deep")
    t = type(x)
    if x is None or t is bool or t is str:
        return x
    if t is int:
        return x if abs(x) < 1 << 53 else {"i": str(x)}
    if t is float:
        return x if math.isfinite(x) else {"f": repr(x)}
    if t is complex:
        return {"c": [repr(x.real), repr(x.imag)]}
    if t is bytes:
        return {"b": base64.b64encode(x).decode()}
    if t is list:
        return {"l": [_node(v, bufs, depth + 1) for v in x]}
    if t is tuple:
        return {"t": [_node(v, bufs, depth + 1) for v in x]}
    if t is dict:
        return {"d": [[_node(k, bufs, depth + 1), _node(v, bufs, depth + 1)]
                      for k, v in x.items()]}
    if t is np.ndarray:
        if x.dtype.kind not in _KINDS or x.dtype.fields is not None or x.dtype.subdtype:
            raise WireError(f"a NumPy array of {x.dtype} is not plain data")
        bufs.append(x.tobytes(order="C"))  # (ascontiguousarray would make 0-d arrays 1-d)
        return {"a": [len(bufs) - 1, x.dtype.str, list(x.shape)]}
    raise WireError(f"an object of type {t.__name__} is not plain data")


def encode(value: Any) -> bytes:
    """`value` (plain data, exact types) as bytes; :class:`WireError` for anything else.

    Parameters
    ----------
    value : object
        Plain data of the exact types the module lists (``None``, ``bool``, ``int``,
        ``float``, ``complex``, ``str``, ``bytes``, lists, tuples and dicts of them,
        NumPy arrays of kinds ``b i u f c``), nested at most ``MAX_DEPTH`` levels.
        Subclasses and NumPy scalars are refused: convert with :func:`plain` first.

    Returns
    -------
    bytes
        ``MAGIC``, the sizes, the JSON structure, then each array's raw buffer (C order).

    Raises
    ------
    WireError
        When part of `value` is not plain data or is nested too deeply.
    """
    bufs: list[bytes] = []
    head = json.dumps(_node(value, bufs, 0), separators=(",", ":")).encode()
    parts = [MAGIC, struct.pack("<QI", len(head), len(bufs)), head]
    for b in bufs:
        parts += [struct.pack("<Q", len(b)), b]
    return b"".join(parts)


def _dtype(text: Any) -> np.dtype:
    if type(text) is not str or len(text) > 8:
        raise WireError("bad array dtype")
    try:
        dt = np.dtype(text)
    except TypeError:
        raise WireError(f"bad array dtype {text!r}") from None
    if dt.kind not in _KINDS or dt.fields is not None or dt.subdtype is not None:
        raise WireError(f"arrays of {dt} are not plain data")
    return dt


def _value(n: Any, bufs: list[memoryview], depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise WireError(f"nested more than {MAX_DEPTH} levels deep")
    t = type(n)
    if n is None or t in (bool, str, int):
        return n
    if t is float:
        return n
    if t is not dict or len(n) != 1:
        raise WireError(f"unexpected {t.__name__} in the structure")
    (tag, v), = n.items()
    try:
        if tag == "l":
            return [_value(e, bufs, depth + 1) for e in _list(v)]
        if tag == "t":
            return tuple(_value(e, bufs, depth + 1) for e in _list(v))
        if tag == "d":
            out = {}
            for pair in _list(v):
                k, val = _list(pair, 2)
                k = _value(k, bufs, depth + 1)
                if type(k) in (list, dict):
                    raise WireError("unhashable dict key")
                out[k] = _value(val, bufs, depth + 1)
            return out
        if tag == "i" and type(v) is str and len(v) <= 10_000:
            return int(v)
        if tag == "f" and v in ("inf", "-inf", "nan"):
            return float(v)
        if tag == "c":
            re_, im = _list(v, 2)
            return complex(float(_str(re_)), float(_str(im)))
        if tag == "b" and type(v) is str:
            return base64.b64decode(v.encode(), validate=True)
        if tag == "a":
            idx, dts, shape = _list(v, 3)
            dt = _dtype(dts)
            shape = tuple(_list(shape))
            if type(idx) is not int or not 0 <= idx < len(bufs) or len(shape) > 32 or any(
                    type(s) is not int or s < 0 for s in shape):
                raise WireError("bad array header")
            buf = bufs[idx]
            if math.prod(shape) * dt.itemsize != len(buf):
                raise WireError("array size does not match its buffer")
            return np.frombuffer(buf, dtype=dt).reshape(shape).copy()
    except (ValueError, TypeError, OverflowError) as exc:
        if isinstance(exc, WireError):
            raise
        raise WireError(f"bad {tag!r} node: {exc}") from None
    raise WireError(f"unknown tag {tag!r}")


def _list(v: Any, n: int | None = None) -> list:
    if type(v) is not list or (n is not None and len(v) != n):
        raise WireError("malformed structure")
    return v


def _str(v: Any) -> str:
    if type(v) is not str or len(v) > 64:
        raise WireError("malformed number")
    return v


def decode(data: bytes, max_bytes: int = MAX_BYTES) -> Any:
    """The plain data `data` encodes; :class:`WireError` for anything malformed.

    Parameters
    ----------
    data : bytes
        What :func:`encode` made, as sent by a student's process (untrusted).
    max_bytes : int, optional
        The largest `data` accepted, in bytes (default ``MAX_BYTES``, 512 MiB).

    Returns
    -------
    object
        The decoded value: plain data only, NumPy arrays as writable copies.

    Raises
    ------
    WireError
        For anything that is not bytes of a valid encoding within the limits (size,
        nesting, dtypes, array shapes); never another exception.
    """
    if type(data) is not bytes:
        raise WireError("not bytes")
    if len(data) > max_bytes:
        raise WireError(f"{len(data):,} bytes, more than the {max_bytes:,} accepted")
    view = memoryview(data)
    pos = len(MAGIC)
    if bytes(view[:pos]) != MAGIC or len(data) < pos + 12:
        raise WireError("not mpilab wire data")
    hlen, nbuf = struct.unpack_from("<QI", data, pos)
    pos += 12
    if hlen > MAX_HEADER or pos + hlen > len(data) or nbuf > 100_000:
        raise WireError("bad header size")
    head = bytes(view[pos:pos + hlen])
    pos += hlen
    bufs = []
    for _ in range(nbuf):
        if pos + 8 > len(data):
            raise WireError("truncated")
        (blen,) = struct.unpack_from("<Q", data, pos)
        pos += 8
        if pos + blen > len(data):
            raise WireError("truncated buffer")
        bufs.append(view[pos:pos + blen])
        pos += blen
    if pos != len(data):
        raise WireError("trailing bytes")
    try:
        tree = json.loads(head)
    except (ValueError, RecursionError):
        raise WireError("the structure is not valid JSON") from None
    try:
        return _value(tree, bufs, 0)
    except RecursionError:
        raise WireError("nested too deeply") from None


# ---------------------------------------------------------------------------------------
# plain data: what a value becomes before it travels (the checks' results too)


SCALARS = (type(None), bool, int, float, complex, str, bytes)


def plain(x: Any, where: str = "", depth: int = 0) -> Any:
    """`x` as plain data, or raise TypeError naming what is not.

    Parameters
    ----------
    x : object
        A value returned by a student's function (or computed by a check).
    where : str, optional
        How a message names `x`, e.g. ``"the value"``; the parts of a container are
        named from it (``"the value[0]"``). Empty (the default): ``"the result"``.
    depth : int, optional
        The nesting level of `x` (0 at the top; the recursion counts it): deeper than 20
        levels is refused.

    Returns
    -------
    object
        `x` as exact plain types: NumPy scalars and 0-d arrays as Python numbers, arrays
        of numbers as copies, object arrays as lists, ``bytearray`` and ``memoryview`` as
        ``bytes``, containers converted part by part.

    Raises
    ------
    TypeError
        When some part of `x` is not plain data; the message names the part and its type
        and says what to return instead.
    """
    t = type(x)
    if t in SCALARS:
        return x
    if depth > 20:
        raise TypeError(f"{where or 'the result'} is nested more than 20 levels deep")
    if isinstance(x, np.generic):
        if x.dtype.kind in "biufc":
            return x.item()
        raise TypeError(f"{where or 'the result'} is a NumPy {x.dtype} scalar")
    if isinstance(x, np.ndarray):
        if x.dtype.kind in "biufc" and x.dtype.fields is None:
            return x.item() if x.ndim == 0 else np.array(x, copy=True, subok=False)
        if x.dtype.kind == "O":
            return [plain(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(x.tolist())]
        raise TypeError(f"{where or 'the result'} is a NumPy array of {x.dtype}")
    if t in (bytearray, memoryview):
        return bytes(x)
    if t is list:
        return [plain(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(x)]
    if t is tuple:
        return tuple(plain(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(x))
    if t is dict:
        return {plain(k, f"{where} key", depth + 1): plain(v, f"{where}[{k!r}]", depth + 1)
                for k, v in x.items()}
    what = t.__name__
    if t.__module__ not in ("builtins", "__main__"):
        what = f"{t.__module__}.{t.__qualname__}"
    base = next((b.__name__ for b in SCALARS[1:] + (list, tuple, dict) if isinstance(x, b)),
                None)
    hint = (f" (a subclass of {base}; return a plain {base})" if base else
            "; return numbers, strings, lists, tuples or NumPy arrays")
    raise TypeError(f"{where or 'the result'} is an object of type {what}{hint}")


def verify_plain(x: Any, depth: int = 0) -> bool:
    """True when `x` is plain data by exact type (what came back can be trusted to compare).

    Parameters
    ----------
    x : object
        The value to check (typically what :func:`decode` returned).
    depth : int, optional
        The nesting level of `x` (0 at the top; the recursion counts it): deeper than 21
        levels is not plain.

    Returns
    -------
    bool
        Whether `x` and every part of it are of the exact plain types (no subclasses,
        NumPy arrays of numbers only).
    """
    t = type(x)
    if t in SCALARS:
        return True
    if depth > 21:
        return False
    if t is np.ndarray:
        return x.dtype.kind in "biufc" and x.dtype.fields is None
    if t in (list, tuple):
        return all(verify_plain(v, depth + 1) for v in x)
    if t is dict:
        return all(verify_plain(k, depth + 1) and verify_plain(v, depth + 1)
                   for k, v in x.items())
    return False
