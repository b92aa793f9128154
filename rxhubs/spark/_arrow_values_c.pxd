# C types for the compiled build of _arrow_values_py.py (compiled as _arrow_values_c: one source, two builds).
# Cython reads these declarations beside the Python source ("pure Python mode"); the Python build ignores them.
cimport cython

cdef class ValueReader

cdef int K_NULL, K_TRUE, K_FALSE, K_UINT, K_INT, K_BYTES, K_OTHER
cdef int _MAX_DEPTH


@cython.final
cdef class Buf:
    cdef public bytearray data
    cdef unsigned char[::1] view
    cdef public Py_ssize_t n

    @cython.locals(p=Py_ssize_t)
    cdef inline Py_ssize_t room(self, Py_ssize_t k) except -1
    cdef int grow(self, Py_ssize_t size) except -1
    @cython.locals(p=Py_ssize_t)
    cdef inline int byte(self, unsigned char x) except -1
    @cython.locals(p=Py_ssize_t)
    cdef inline int i32(self, long long x) except -1
    @cython.locals(p=Py_ssize_t, i=int)
    cdef inline int i64(self, long long x) except -1
    @cython.locals(p=Py_ssize_t, i=Py_ssize_t, k=Py_ssize_t)
    cdef int copy(self, ValueReader r, Py_ssize_t a, Py_ssize_t b) except -1
    @cython.locals(p=Py_ssize_t, i=Py_ssize_t, k=Py_ssize_t)
    cdef int add(self, bytes src) except -1
    @cython.locals(p=Py_ssize_t, i=Py_ssize_t)
    cdef int copy_buf(self, Buf src, Py_ssize_t a, Py_ssize_t b) except -1
    @cython.locals(k=int, t="unsigned long long", p=Py_ssize_t, i=Py_ssize_t)
    cdef int digits(self, unsigned long long u, bint negative) except -1
    @cython.locals(i=Py_ssize_t)
    cdef int same(self, Py_ssize_t a, Py_ssize_t b, Py_ssize_t c, Py_ssize_t d) except -1
    @cython.locals(x=Py_ssize_t)
    cdef inline Py_ssize_t get_i32(self, Py_ssize_t at) except -1
    cpdef object take(self)


@cython.locals(nulls=Py_ssize_t, i=Py_ssize_t, out=Buf)
cdef object bits(Buf valid, Py_ssize_t rows)


cdef class MapColumn


cdef class ValueReader:
    cdef bytes frame
    cdef const unsigned char[::1] v
    cdef Py_ssize_t pos
    cdef Py_ssize_t end
    cdef int depth
    cdef int kind
    cdef unsigned long long u
    cdef Py_ssize_t a
    cdef Py_ssize_t b

    @cython.locals(i=Py_ssize_t, c="unsigned int", n=Py_ssize_t, lo="unsigned int", hi="unsigned int", j=Py_ssize_t)
    cdef int utf8(self, Py_ssize_t a, Py_ssize_t b) except -1
    @cython.locals(x="unsigned long long", i=Py_ssize_t)
    cdef inline unsigned long long be(self, Py_ssize_t pos, Py_ssize_t width) noexcept
    @cython.locals(p=Py_ssize_t)
    cdef inline Py_ssize_t need(self, Py_ssize_t k) except -1
    cdef int past(self, Py_ssize_t p, Py_ssize_t k) except -1
    @cython.locals(x=int)
    cdef inline int u8(self) except -1
    cdef inline Py_ssize_t count(self, bint large) except -1
    @cython.locals(code="unsigned int", k=Py_ssize_t, width=int, x="unsigned long long", top="unsigned long long")
    cdef int scan(self) except -1
    cdef int skip(self) except -1
    @cython.locals(n=Py_ssize_t, element="unsigned int")
    cdef int skip_typed(self, unsigned int code) except -1
    @cython.locals(code="unsigned int", pairs=Py_ssize_t, first=Py_ssize_t)
    cdef int map_entries(self, MapColumn column) except -1
    @cython.locals(keys=Buf, offsets=Buf, start=Py_ssize_t, previous=Py_ssize_t, at=Py_ssize_t, nxt=Py_ssize_t)
    cdef int key(self, MapColumn column, Py_ssize_t first) except -1
    @cython.locals(kind=int, values=Buf)
    cdef int text(self, MapColumn column, bint base64) except -1


@cython.final
cdef class MapColumn:
    cdef public Buf offsets, keys, keys_off, values, values_off, valid

    cdef int start(self) except -1
    cdef int end_row(self) except -1


@cython.locals(i=Py_ssize_t)
cdef int is_name(Buf buf, Py_ssize_t at, bytes name) except -1


@cython.locals(text=bytes)
cdef int put(Buf data, Buf offsets, Buf valid, object value) except -1


# Buf.copy's block copy: dst.view[p:p + k] = r.v[a:a + k] as one memcpy (the bounds are checked before it); the
# Python build defines rxhubs_move as a function of the same effect.
cdef extern from *:
    """
    #include <string.h>
    #define rxhubs_move(dst, p, r, a, k) memcpy((dst)->view.data + (p), (r)->v.data + (a), (size_t)(k))
    """
    void rxhubs_move(Buf dst, Py_ssize_t p, ValueReader r, Py_ssize_t a, Py_ssize_t k)


# The SHA-256 of the source this build was compiled from: setup.py defines the C macro per compiled module
# (rxhubs/_extensions.py checks it at import; a stale build is not used).
cdef extern from *:
    """
    #ifndef RXHUBS_SOURCE_SHA256
    #define RXHUBS_SOURCE_SHA256 ""
    #endif
    """
    const char* RXHUBS_SOURCE_SHA256
