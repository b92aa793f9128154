# C types for the compiled build of _arrow_frames_py.py (compiled as _arrow_frames_c: one source, two builds).
# Cython reads these declarations beside the Python source ("pure Python mode"); the Python build ignores them.
cimport cython

from rxhubs.spark._arrow_values_c cimport Buf, MapColumn, ValueReader, bits, is_name, put

cdef int K_NULL, K_TRUE, K_FALSE, K_UINT, K_INT, K_BYTES, K_OTHER
cdef unsigned long long _EXACT_MS, _TOP


@cython.final
cdef class FrameColumns(ValueReader):
    cdef object slow
    cdef public Py_ssize_t rows
    cdef list bufs, maps
    cdef Buf body, body_off, off, off_off, seq, enq, pk, pk_off, pk_ok, pub, pub_off, pub_ok
    cdef MapColumn props, system
    cdef object delivery

    @cython.locals(n=Py_ssize_t, pos=Py_ssize_t, added=Py_ssize_t,
                   size="unsigned long long", doff="unsigned int", end=Py_ssize_t, frame_channel=Py_ssize_t,
                   body=Py_ssize_t, payload=Py_ssize_t)
    cpdef tuple parse(self, bytes buf, Py_ssize_t channel, unsigned long long handle, Py_ssize_t start=*)
    @cython.locals(code="unsigned int", count=Py_ssize_t, i=Py_ssize_t, at=Py_ssize_t, kind=int, ours=bint)
    cdef Py_ssize_t _transfer(self, Py_ssize_t body, Py_ssize_t end, unsigned long long handle) except -2
    cdef int _event(self, bytes data, Py_ssize_t pos, Py_ssize_t end) except -1
    @cython.locals(annotations=Py_ssize_t, properties=Py_ssize_t, application=Py_ssize_t, data=Py_ssize_t,
                   p=Py_ssize_t, d="unsigned int", at=Py_ssize_t, code="unsigned int", system=MapColumn,
                   first=Py_ssize_t)
    cdef int _fast(self, Py_ssize_t pos, Py_ssize_t end) except -1
    @cython.locals(code="unsigned int", count=Py_ssize_t, system=MapColumn, i=Py_ssize_t, kind=int, name=bytes)
    cdef int _properties(self, Py_ssize_t at) except -1
    @cython.locals(code="unsigned int", pairs=Py_ssize_t, system=MapColumn, seq=bint,
                   offset=bint, enqueued=bint, key=bint, publisher=bint, is_publisher=bint, k=Py_ssize_t,
                   kn=Py_ssize_t, kind=int, i=Py_ssize_t, t=Py_ssize_t)
    cdef int _annotations(self, Py_ssize_t at, Py_ssize_t first) except -1
    @cython.locals(text=bytes, column=MapColumn)
    cpdef append_row(self, bytes body, str offset, long long seq, long long micros, object publisher, object key,
                     list properties, list system)
    @cython.locals(n=Py_ssize_t)
    cpdef Py_ssize_t size(self)
    @cython.locals(rows=Py_ssize_t, m=MapColumn, maps=list, buf=Buf)
    cpdef tuple take(self)

    cdef int _is_transfer(self, Py_ssize_t body, Py_ssize_t end) except -1


# The SHA-256 of the source this build was compiled from: setup.py defines the C macro per compiled module
# (rxhubs/_extensions.py checks it at import; a stale build is not used).
cdef extern from *:
    """
    #ifndef RXHUBS_SOURCE_SHA256
    #define RXHUBS_SOURCE_SHA256 ""
    #endif
    """
    const char* RXHUBS_SOURCE_SHA256
