# C types for the compiled build of _frames_py.py (compiled as _frames_c: one source, two builds).
# Cython reads these declarations beside the Python source ("pure Python mode"); the Python build ignores them.
cimport cython


@cython.locals(x="unsigned long long", i=Py_ssize_t)
cdef unsigned long long _be(const unsigned char[:] view, Py_ssize_t pos, Py_ssize_t width) noexcept


@cython.locals(top="unsigned long long", mask="unsigned long long")
cdef object _signed(unsigned long long u, int bits)


@cython.final
cdef class _Reader:
    cdef bytes data
    cdef const unsigned char[:] view
    cdef Py_ssize_t pos
    cdef Py_ssize_t end
    cdef int depth

    @cython.locals(p=Py_ssize_t)
    cdef Py_ssize_t need(self, Py_ssize_t n) except -1
    cdef unsigned int u8(self) except? 0xFFFFFFFF
    cdef unsigned long long u32(self) except? 0xFFFFFFFFFFFFFFFF
    cdef unsigned long long u64(self) except? 0xFFFFFFFFFFFFFFFF
    cdef object i64(self)
    @cython.locals(p=Py_ssize_t)
    cdef bytes raw(self, Py_ssize_t n)
    cdef object value(self)
    @cython.locals(n=Py_ssize_t, u="unsigned long long")
    cdef object typed(self, unsigned int code)
    cdef object nested(self, unsigned int code)
    cdef Py_ssize_t count(self, bint large) except -1
    @cython.locals(n=Py_ssize_t, out=list)
    cdef list list_of(self, bint large)
    @cython.locals(n=Py_ssize_t, out=dict)
    cdef dict dict_of(self, bint large)
    @cython.locals(n=Py_ssize_t, code="unsigned int", out=list)
    cdef list array(self, bint large)
    cdef object section_list(self, str what)


cpdef object decode_message(bytes data, Py_ssize_t pos, Py_ssize_t end)


@cython.locals(p=Py_ssize_t, descriptor="unsigned int", body=list, sequence=list)
cdef object _decode(_Reader r, Py_ssize_t pos, Py_ssize_t end)


# The SHA-256 of the source this build was compiled from: setup.py defines the C macro per compiled module
# (rxhubs/_extensions.py checks it at import; a stale build is not used).
cdef extern from *:
    """
    #ifndef RXHUBS_SOURCE_SHA256
    #define RXHUBS_SOURCE_SHA256 ""
    #endif
    """
    const char* RXHUBS_SOURCE_SHA256
