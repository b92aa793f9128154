"""The partition a partition key routes to: the lookup3 hash the SDK's buffered producer and the service use."""

from __future__ import annotations

__all__ = ["partition_for_key"]


def partition_for_key(key: str, partition_count: int) -> int:
    """The partition index of a partition key: lookup3 hash, as the SDK's buffered producer computes it."""
    c, b = _lookup3([ord(ch) & 0xFFFFFFFF for ch in key])
    h = (c ^ b) & 0xFFFF
    if h >= 0x8000:
        h -= 0x10000
    return abs(h % partition_count)


def _rot(x: int, k: int) -> int:
    return ((x << k) | (x >> (32 - k))) & 0xFFFFFFFF


def _lookup3(data: list[int]) -> tuple[int, int]:
    m = 0xFFFFFFFF
    n = len(data)
    a = b = c = (0xDEADBEEF + n) & m
    p = 0
    rem = n

    def word(i: int, k: int) -> int:
        return sum(data[i + j] << (8 * j) for j in range(k))

    while rem > 12:
        a = (a + word(p, 4)) & m
        b = (b + word(p + 4, 4)) & m
        c = (c + word(p + 8, 4)) & m
        a = (a - c) & m; a ^= _rot(c, 4); c = (c + b) & m  # noqa: E702
        b = (b - a) & m; b ^= _rot(a, 6); a = (a + c) & m  # noqa: E702
        c = (c - b) & m; c ^= _rot(b, 8); b = (b + a) & m  # noqa: E702
        a = (a - c) & m; a ^= _rot(c, 16); c = (c + b) & m  # noqa: E702
        b = (b - a) & m; b ^= _rot(a, 19); a = (a + c) & m  # noqa: E702
        c = (c - b) & m; c ^= _rot(b, 4); b = (b + a) & m  # noqa: E702
        p += 12
        rem -= 12
    if rem == 0:
        return c, b
    if rem > 8:
        c = (c + word(p + 8, rem - 8)) & m
    if rem > 4:
        b = (b + word(p + 4, min(4, rem - 4))) & m
    a = (a + word(p, min(4, rem))) & m
    c ^= b; c = (c - _rot(b, 14)) & m  # noqa: E702
    a ^= c; a = (a - _rot(c, 11)) & m  # noqa: E702
    b ^= a; b = (b - _rot(a, 25)) & m  # noqa: E702
    c ^= b; c = (c - _rot(b, 16)) & m  # noqa: E702
    a ^= c; a = (a - _rot(c, 4)) & m  # noqa: E702
    b ^= a; b = (b - _rot(a, 14)) & m  # noqa: E702
    c ^= b; c = (c - _rot(b, 24)) & m  # noqa: E702
    return c, b
