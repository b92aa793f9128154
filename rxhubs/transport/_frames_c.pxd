# C types for the compiled build of _frames_py.py (compiled as _frames_c: one source, two builds).
# Cython reads these declarations beside the Python source ("pure Python mode"); the Python build ignores them.
cimport cython


@cython.locals(x="unsigned long long", i=Py_ssize_t)
cdef unsigned long long _be(const unsigned char[:] view, Py_ssize_t pos, Py_ssize_t width) noexcept


@cython.locals(top="unsigned long long", mask="unsigned long long")
cdef object _signed(unsigned long long u, int bits)


cdef tuple _KEYS
cdef bint _COMPILED
cdef bint _DIRECT
cdef Py_ssize_t _AT_DATA
cdef Py_ssize_t _AT_BODY
cdef Py_ssize_t _AT_SEQUENCE


@cython.locals(i=Py_ssize_t)
cdef bint _same(const unsigned char[:] view, Py_ssize_t pos, bytes key, Py_ssize_t n) except -1


@cython.final
cdef class _Reader:
    cdef bytes data
    cdef const unsigned char[:] view
    cdef Py_ssize_t pos
    cdef Py_ssize_t end
    cdef int depth
    cdef object delivery_id
    cdef bint more

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
    @cython.locals(n=Py_ssize_t, out=dict, code="unsigned int")
    cdef dict dict_of(self, bint large)
    @cython.locals(n=Py_ssize_t, code="unsigned int", out=list)
    cdef list array(self, bint large)
    cdef object section_list(self, str what)
    @cython.locals(n=Py_ssize_t, p=Py_ssize_t, key=bytes)
    cdef object known_key(self)


cpdef object decode_message(bytes data, Py_ssize_t pos, Py_ssize_t end)


@cython.locals(p=Py_ssize_t, descriptor="unsigned int", code="unsigned int", body=list, sequence=list)
cdef object _decode(_Reader r, Py_ssize_t pos, Py_ssize_t end, bint whole, bint events)


@cython.locals(one=bint)
cpdef object message_event(object message)


cdef object _made(type kind, object data, object body, object sequence_number)


# An event can never be part of a reference cycle (rxhubs/transport/_events_py.py): the collector need not visit it.
# rxhubs_slot: where a __slots__ member descriptor stores its value in the object (-1: another kind of descriptor);
# rxhubs_event: a new `kind` (an Event subclass without __dict__) with its _data slot set and body and sequence
# number set unless None (left empty: decoded on first read), untracked; what object.__new__ and the descriptors'
# __set__ do, without their argument tuples.
cdef extern from *:
    """
    #include <structmember.h>
    static CYTHON_INLINE void rxhubs_untrack(PyObject *o) { PyObject_GC_UnTrack(o); }
    static Py_ssize_t rxhubs_slot(PyObject *d) {
        PyMemberDef *m;
        if (Py_TYPE(d) != &PyMemberDescr_Type) return -1;
        m = ((PyMemberDescrObject *)d)->d_member;
        return (m->type == T_OBJECT_EX && !(m->flags & READONLY)) ? m->offset : -1;
    }
    static CYTHON_INLINE void rxhubs_store(PyObject *o, Py_ssize_t at, PyObject *v) {
        Py_INCREF(v);
        *(PyObject **)((char *)o + at) = v;
    }
    static PyObject *rxhubs_event(PyObject *kind, Py_ssize_t at_data, PyObject *data, Py_ssize_t at_body,
                                  PyObject *body, Py_ssize_t at_seq, PyObject *seq) {
        PyTypeObject *t = (PyTypeObject *)kind;
        PyObject *o = t->tp_alloc(t, 0);
        if (o == NULL) return NULL;
        if (PyObject_GC_IsTracked(o)) PyObject_GC_UnTrack(o);
        rxhubs_store(o, at_data, data);
        if (body != Py_None) rxhubs_store(o, at_body, body);
        if (seq != Py_None) rxhubs_store(o, at_seq, seq);
        return o;
    }
    """
    void rxhubs_untrack(object o)
    Py_ssize_t rxhubs_slot(object d)
    object rxhubs_event(type kind, Py_ssize_t at_data, object data, Py_ssize_t at_body, object body,
                        Py_ssize_t at_seq, object seq)


# The SHA-256 of the source this build was compiled from: setup.py defines the C macro per compiled module
# (rxhubs/_extensions.py checks it at import; a stale build is not used).
cdef extern from *:
    """
    #ifndef RXHUBS_SOURCE_SHA256
    #define RXHUBS_SOURCE_SHA256 ""
    #endif
    """
    const char* RXHUBS_SOURCE_SHA256
