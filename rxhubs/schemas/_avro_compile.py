"""Avro readers made per schema: one plain Python function per writer schema, instead of fastavro's walk of it.

fastavro's ``schemaless_reader`` walks the schema for every record (a dispatch per field, a decoder object and an
options dict per call): most of its ~10 us per small record. :func:`compile_reader` turns a parsed writer schema
into the source of one function that reads the records of many bodies laid end to end in one ``bytes``, with
every field's read written out (varints, lengths, ``struct`` for floats), then compiles it once. Names from
the schema never enter the source: record field names, enum symbols and fixed sizes are passed in as constants
by index, so a schema from a registry cannot inject code.

The reader is exact or refuses: it gives fastavro's value for the same bytes, and raises (any exception) where
it is unsure, so its caller falls back to fastavro for that record (``tests/schemas/test_avro_compile.py``
checks both against fastavro on generated schemas, values and corrupted bodies). It refuses varints beyond 64
bits, ``int`` values outside 32 bits, booleans other than 0 and 1, negative lengths and out-of-range enum
or union indexes. Schemas with logical types or recursive named types get no reader (None): fastavro reads them.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

__all__ = ["MISSING", "compile_reader"]

Reader = Callable[[bytes, list[int]], list[Any]]


class _Missing:
    """What a compiled reader gives for a body it could not read exactly."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()

_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
_DOUBLE = struct.Struct("<d").unpack_from
_FLOAT = struct.Struct("<f").unpack_from


class _UnsupportedError(Exception):
    """The schema uses something the compiler leaves to fastavro."""


class _Emitter:
    """Writes the reader's source: ``b`` is the body, ``p`` the position; each type leaves its value in a name."""

    def __init__(self, named: dict[str, Any]) -> None:
        self.lines: list[str] = []
        self.constants: list[Any] = []
        self.named = named
        self.counter = 0
        self.open: set[str] = set()

    def name(self) -> str:
        self.counter += 1
        return f"v{self.counter}"

    def constant(self, value: Any) -> str:
        self.constants.append(value)
        return f"k{len(self.constants) - 1}"

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)

    def varint(self, indent: int, target: str) -> None:
        """A zigzag varint of at most ten bytes (64 bits) into ``target`` (unrolled: one branch per byte)."""
        e = self.emit
        e(indent, "x = b[p]; p += 1")
        for shift in range(7, 63, 7):
            e(indent, "if x & 128:" if shift == 7 else "if c & 128:")
            indent += 1
            e(indent, f"c = b[p]; p += 1; x = {'(x & 127)' if shift == 7 else 'x'} | ((c & 127) << {shift})")
        e(indent, "if c & 128:")  # the tenth byte holds bit 63 only: anything more is fastavro's call
        e(indent + 1, "c = b[p]; p += 1")
        e(indent + 1, "if c > 1: raise ValueError('varint')")
        e(indent + 1, "x |= c << 63")
        indent -= 8
        e(indent, f"{target} = (x >> 1) ^ -(x & 1)")

    def length(self, indent: int, target: str) -> None:
        """A length: never negative; past the body's end is caught where the caller compares the end."""
        self.varint(indent, target)
        self.emit(indent, f"if {target} < 0: raise ValueError('length')")

    def value(self, schema: Any, indent: int) -> str:
        """Emit the reads of one value of ``schema``; returns the expression that holds it."""
        e = self.emit
        if isinstance(schema, list):
            return self.union(schema, indent)
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return self.primitive(schema, indent)
            if schema in self.named:
                if schema in self.open:
                    raise _UnsupportedError("recursive named type")
                return self.value(self.named[schema], indent)
            raise _UnsupportedError(f"unknown type {schema!r}")
        if not isinstance(schema, dict) or "logicalType" in schema:
            raise _UnsupportedError("logical type")
        kind = schema.get("type")
        if kind in _PRIMITIVES:
            return self.value(kind, indent)
        target = self.name()
        if kind == "record":
            full = str(schema.get("name"))
            self.open.add(full)
            names = [self.value(f["type"], indent) for f in schema["fields"]]
            self.open.discard(full)
            keys = [self.constant(f["name"]) for f in schema["fields"]]
            e(indent, f"{target} = {{{', '.join(f'{k}: {n}' for k, n in zip(keys, names, strict=True))}}}")
        elif kind == "enum":
            symbols = self.constant(tuple(schema["symbols"]))
            self.varint(indent, target)
            e(indent, f"if not 0 <= {target} < len({symbols}): raise ValueError('enum')")
            e(indent, f"{target} = {symbols}[{target}]")
        elif kind == "fixed":
            size = int(schema["size"])
            e(indent, f"{target} = b[p:p + {size}]; p += {size}")
        elif kind in ("array", "map"):
            e(indent, f"{target} = {'[]' if kind == 'array' else '{}'}")
            count = self.name()
            e(indent, "while True:")
            self.varint(indent + 1, count)
            e(indent + 1, f"if {count} == 0: break")
            e(indent + 1, f"if {count} < 0:")
            e(indent + 2, f"{count} = -{count}")
            self.varint(indent + 2, "_")
            if kind == "map" or self.takes_bytes(schema["items"]):  # a map's key takes one byte at least
                # more items than bytes left is a corrupt count: refuse it (slices past the end never raise, so
                # a count of 2**60 would otherwise run for hours)
                e(indent + 1, f"if {count} > end - p: raise ValueError('count')")
            e(indent + 1, f"for _ in range({count}):")
            if kind == "map":
                key = self.primitive("string", indent + 2)
                item = self.value(schema["values"], indent + 2)
                e(indent + 2, f"{target}[{key}] = {item}")
            else:
                item = self.value(schema["items"], indent + 2)
                e(indent + 2, f"{target}.append({item})")
        else:
            raise _UnsupportedError(f"type {kind!r}")
        return target

    def takes_bytes(self, schema: Any, seen: frozenset[str] = frozenset()) -> bool:
        """Every value of ``schema`` takes one byte at least (False for null, fixed(0), records of those)."""
        if isinstance(schema, list):
            return True  # the branch index
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return schema != "null"
            if schema in seen or schema not in self.named:
                return False  # unsure: no guard (the read still ends where fastavro's would)
            return self.takes_bytes(self.named[schema], seen | {schema})
        kind = schema.get("type") if isinstance(schema, dict) else None
        if kind == "record":
            name = str(schema.get("name"))
            return any(self.takes_bytes(f["type"], seen | {name}) for f in schema["fields"])
        if kind == "fixed":
            return int(schema["size"]) > 0
        return kind in ("enum", "array", "map") or (kind in _PRIMITIVES and kind != "null")

    def primitive(self, kind: str, indent: int) -> str:
        e = self.emit
        if kind == "null":
            return "None"
        target = self.name()
        if kind == "boolean":
            e(indent, f"{target} = b[p]; p += 1")
            e(indent, f"if {target} > 1: raise ValueError('boolean')")
            e(indent, f"{target} = {target} == 1")
        elif kind in ("int", "long"):
            self.varint(indent, target)
            if kind == "int":
                e(indent, f"if not -2147483648 <= {target} <= 2147483647: raise ValueError('int')")
        elif kind in ("float", "double"):
            size = 4 if kind == "float" else 8
            e(indent, f"{target} = {'FLOAT' if size == 4 else 'DOUBLE'}(b, p)[0]; p += {size}")
        else:  # bytes, string
            self.length(indent, target)
            read = f"b[p:p + {target}]"
            e(indent, f"{target}, p = {read if kind == 'bytes' else f'{read}.decode()'}, p + {target}")
        return target

    def union(self, branches: list[Any], indent: int) -> str:
        target = self.name()
        index = self.name()
        self.varint(indent, index)
        for i, branch in enumerate(branches):
            self.emit(indent, f"{'if' if i == 0 else 'elif'} {index} == {i}:")
            self.emit(indent + 1, f"{target} = {self.value(branch, indent + 1)}")
        self.emit(indent, "else: raise ValueError('union')")
        return target


def compile_reader(parsed_schema: Any) -> Reader | None:
    r"""A reader of ``parsed_schema`` (from ``fastavro.parse_schema``) for many bodies laid end to end.

    ``reader(joined, ends)`` reads one value from each body of ``joined`` (body ``i`` ends at ``ends[i]`` and
    starts where body ``i - 1`` ends) and returns the values, with :data:`MISSING` for a body it could not read
    or whose read did not end exactly at its end (read that one with fastavro). None when the schema has logical
    types or recursive named types (read those with fastavro).

    Example:
        >>> import fastavro, io
        >>> schema = fastavro.parse_schema({"type": "record", "name": "R", "fields": [
        ...     {"name": "n", "type": "long"}, {"name": "s", "type": ["null", "string"]}]})
        >>> body = io.BytesIO(); fastavro.schemaless_writer(body, schema, {"n": -3, "s": "hi"})
        >>> one = body.getvalue()
        >>> read = compile_reader(schema)
        >>> read(one + b"\x05" + one, [5, 6, 11])  # a good body, a short one, a good one
        [{'n': -3, 's': 'hi'}, MISSING, {'n': -3, 's': 'hi'}]
        >>> compile_reader({"type": "int", "logicalType": "date"}) is None
        True
    """
    named = dict(parsed_schema.get("__named_schemas", {})) if isinstance(parsed_schema, dict) else {}
    emitter = _Emitter(named)
    try:
        result = emitter.value(parsed_schema, 4)
    except (_UnsupportedError, KeyError, TypeError, ValueError):
        return None
    constants = [f"    k{i} = K[{i}]" for i in range(len(emitter.constants))]  # closure cells: fast lookups
    body = ["    def read(b, ends):", "        out = []", "        append = out.append", "        p = 0",
            "        for end in ends:", "            try:", *emitter.lines,
            f"                append({result} if p == end else MISSING)",
            "            except Exception:", "                append(MISSING)", "            p = end",
            "        return out"]
    source = "\n".join(["def make(K, FLOAT, DOUBLE, MISSING):", *constants, *body, "    return read"])
    scope: dict[str, Any] = {}
    exec(compile(source, "<rxhubs avro reader>", "exec"), scope)
    reader: Reader = scope["make"](tuple(emitter.constants), _FLOAT, _DOUBLE, MISSING)
    return reader
