/* Building an event from its decoded wire struct in C: `projections.decoding`'s builder
 * without a Python frame per event.
 *
 * A replay builds one event per row. The Python builder (`decoding._builder_python`, the
 * definition and the fallback) makes the frozen dataclass with `object.__new__` and sets
 * each slot through its descriptor, checking on the way what msgspec cannot (a name is
 * printable; a memo or reason is printable and not blank; a pool's None is the general
 * pool; the event's own rule about fields together). A `Builder` does the same steps in
 * the same order, from a plan made once per event type by `decoding`:
 *
 *     Builder(cls, fields, refused, refused_error, general)
 *
 * `fields`: a tuple of (name, slot descriptor, check) per field of the wire struct, in
 * its order; `check` one of the CHECK_* codes below. `refused`: None, or a callable
 * taking the wire struct, true when the event's rule about fields together fails.
 * `refused_error`: the exception raised (with no arguments) for any failed check, which
 * sends the payload the generic way. `general`: the general pool's name.
 *
 * A str of ASCII characters is judged here; any other str is asked its own
 * `isprintable()` and `strip()`, so the answers are Python's. Values are never
 * converted: msgspec gave them their types.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>

enum {
    CHECK_NONE = 0,          /* taken as decoded */
    CHECK_NAME = 1,          /* a str, printable */
    CHECK_OPTIONAL_NAME = 2, /* None, or a printable str */
    CHECK_POOL = 3,          /* None (the general pool), or a printable str */
    CHECK_TEXT = 4,          /* None, or a printable str that is not blank */
    CHECK_LAST = CHECK_TEXT,
};

typedef struct {
    PyObject *name;   /* the field's name, interned */
    PyObject *setter; /* the slot's descriptor on the event class */
    descrsetfunc set; /* its type's __set__ */
    int check;
} Field;

typedef struct {
    PyObject_HEAD
    PyTypeObject *cls;
    PyObject *refused;       /* None or callable(wire) -> bool */
    PyObject *refused_error; /* exception type */
    PyObject *general;
    PyObject *empty;         /* () for object.__new__ */
    Py_ssize_t count;
    Field *fields;
    vectorcallfunc vectorcall;
} Builder;

/* Whether s.method() is true (1, 0), or -1 with an exception set: Python's own answer,
 * for the strs not judged here. */
static int
asked(PyObject *s, const char *method)
{
    PyObject *answer = PyObject_CallMethod(s, method, NULL);
    if (answer == NULL)
        return -1;
    int truth = PyObject_IsTrue(answer);
    Py_DECREF(answer);
    return truth;
}

/* str.isprintable(): 1, 0, or -1 with an exception set. */
static int
is_printable(PyObject *s)
{
    if (!PyUnicode_IS_ASCII(s))
        return asked(s, "isprintable");
    const unsigned char *c = PyUnicode_1BYTE_DATA(s);
    for (Py_ssize_t i = 0, n = PyUnicode_GET_LENGTH(s); i < n; i++) {
        /* ASCII's unprintable characters: the controls, 0x00-0x1f and 0x7f. */
        if (c[i] < 0x20 || c[i] == 0x7f)
            return 0;
    }
    return 1;
}

/* Whether str.strip() leaves something (its result is true): 1, 0, or -1 with an
 * exception set. */
static int
is_not_blank(PyObject *s)
{
    if (!PyUnicode_IS_ASCII(s))
        return asked(s, "strip");
    const unsigned char *c = PyUnicode_1BYTE_DATA(s);
    for (Py_ssize_t i = 0, n = PyUnicode_GET_LENGTH(s); i < n; i++) {
        if (!Py_UNICODE_ISSPACE(c[i]))
            return 1;
    }
    return 0;
}

/* The value to store for one field (a new reference), NULL with an exception set: the
 * builder's refused_error for a failed check. */
static PyObject *
checked(Builder *self, int check, PyObject *v)
{
    int ok = 1;
    switch (check) {
    case CHECK_NONE:
        break;
    case CHECK_NAME:
        /* msgspec gave a str; anything else is not this builder's to judge. */
        ok = PyUnicode_Check(v) ? is_printable(v) : 0;
        break;
    case CHECK_OPTIONAL_NAME:
        if (v != Py_None)
            ok = PyUnicode_Check(v) ? is_printable(v) : 0;
        break;
    case CHECK_POOL:
        if (v == Py_None) {
            Py_DECREF(v);
            Py_INCREF(self->general);
            return self->general;
        }
        ok = PyUnicode_Check(v) ? is_printable(v) : 0;
        break;
    case CHECK_TEXT:
        if (v != Py_None) {
            ok = PyUnicode_Check(v) ? is_printable(v) : 0;
            if (ok == 1)
                ok = is_not_blank(v);
        }
        break;
    }
    if (ok == 1)
        return v;
    Py_DECREF(v);
    if (ok == 0)
        PyErr_SetNone(self->refused_error);
    return NULL;
}

static PyObject *
Builder_build(Builder *self, PyObject *wire)
{
    if (self->refused != Py_None) {
        PyObject *answer = PyObject_CallOneArg(self->refused, wire);
        if (answer == NULL)
            return NULL;
        int truth = PyObject_IsTrue(answer);
        Py_DECREF(answer);
        if (truth < 0)
            return NULL;
        if (truth) {
            PyErr_SetNone(self->refused_error);
            return NULL;
        }
    }
    /* object.__new__(cls): what the Python builder calls. */
    PyObject *event = PyBaseObject_Type.tp_new(self->cls, self->empty, NULL);
    if (event == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < self->count; i++) {
        Field *f = &self->fields[i];
        PyObject *v = PyObject_GetAttr(wire, f->name);
        if (v == NULL)
            goto fail;
        v = checked(self, f->check, v);
        if (v == NULL)
            goto fail;
        int done = f->set(f->setter, event, v);
        Py_DECREF(v);
        if (done < 0)
            goto fail;
    }
    return event;
fail:
    Py_DECREF(event);
    return NULL;
}

static PyObject *
Builder_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_Format(PyExc_TypeError, "a builder takes one wire struct, got %zd arguments",
                     nargs + (kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames)));
        return NULL;
    }
    return Builder_build((Builder *)callable, args[0]);
}

static void
clear_fields(Builder *self)
{
    if (self->fields != NULL) {
        for (Py_ssize_t i = 0; i < self->count; i++) {
            Py_XDECREF(self->fields[i].name);
            Py_XDECREF(self->fields[i].setter);
        }
        PyMem_Free(self->fields);
        self->fields = NULL;
    }
    self->count = 0;
}

static int
Builder_init(Builder *self, PyObject *args, PyObject *kwds)
{
    PyObject *cls, *fields, *refused, *refused_error, *general;
    if (kwds != NULL && PyDict_GET_SIZE(kwds) != 0) {
        PyErr_SetString(PyExc_TypeError, "Builder takes its arguments by position");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "O!O!OOU:Builder", &PyType_Type, &cls, &PyTuple_Type,
                          &fields, &refused, &refused_error, &general))
        return -1;
    if (refused != Py_None && !PyCallable_Check(refused)) {
        PyErr_Format(PyExc_TypeError, "refused must be None or callable, got %R", refused);
        return -1;
    }
    if (!PyExceptionClass_Check(refused_error)) {
        PyErr_Format(PyExc_TypeError, "refused_error must be an exception class, got %R",
                     refused_error);
        return -1;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(fields);
    Field *plan = PyMem_Calloc((size_t)(count ? count : 1), sizeof(Field));
    if (plan == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PyTuple_GET_ITEM(fields, i);
        PyObject *name, *setter;
        int check;
        if (!PyTuple_Check(item) || !PyArg_ParseTuple(item, "UOi", &name, &setter, &check)) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "field %zd: expected (name, descriptor, check), "
                             "got %R", i, item);
            goto fail;
        }
        descrsetfunc set = Py_TYPE(setter)->tp_descr_set;
        if (set == NULL) {
            PyErr_Format(PyExc_TypeError, "field %R: %R cannot set a value", name, setter);
            goto fail;
        }
        if (check < CHECK_NONE || check > CHECK_LAST) {
            PyErr_Format(PyExc_ValueError, "field %R: unknown check %d", name, check);
            goto fail;
        }
        Py_INCREF(name);
        PyUnicode_InternInPlace(&name);
        Py_INCREF(setter);
        plan[i] = (Field){name, setter, set, check};
        continue;
    fail:
        for (Py_ssize_t j = 0; j < i; j++) {
            Py_DECREF(plan[j].name);
            Py_DECREF(plan[j].setter);
        }
        PyMem_Free(plan);
        return -1;
    }
    clear_fields(self);
    PyObject *empty = PyTuple_New(0);
    if (empty == NULL) {
        for (Py_ssize_t j = 0; j < count; j++) {
            Py_DECREF(plan[j].name);
            Py_DECREF(plan[j].setter);
        }
        PyMem_Free(plan);
        return -1;
    }
    Py_INCREF(cls);
    Py_INCREF(refused);
    Py_INCREF(refused_error);
    Py_INCREF(general);
    Py_XSETREF(self->cls, (PyTypeObject *)cls);
    Py_XSETREF(self->refused, refused);
    Py_XSETREF(self->refused_error, refused_error);
    Py_XSETREF(self->general, general);
    Py_XSETREF(self->empty, empty);
    self->fields = plan;
    self->count = count;
    self->vectorcall = Builder_vectorcall;
    return 0;
}

static int
Builder_traverse(Builder *self, visitproc visit, void *arg)
{
    Py_VISIT(self->cls);
    Py_VISIT(self->refused);
    Py_VISIT(self->refused_error);
    Py_VISIT(self->general);
    for (Py_ssize_t i = 0; i < self->count; i++) {
        Py_VISIT(self->fields[i].name);
        Py_VISIT(self->fields[i].setter);
    }
    return 0;
}

static int
Builder_clear(Builder *self)
{
    Py_CLEAR(self->cls);
    Py_CLEAR(self->refused);
    Py_CLEAR(self->refused_error);
    Py_CLEAR(self->general);
    Py_CLEAR(self->empty);
    clear_fields(self);
    return 0;
}

static void
Builder_dealloc(Builder *self)
{
    PyObject_GC_UnTrack(self);
    Builder_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A call that did not go through the vectorcall slot (one made before __init__, or
 * with a keyword): the same checks, the same build. */
static PyObject *
Builder_call(PyObject *self, PyObject *args, PyObject *kwds)
{
    if (((Builder *)self)->cls == NULL) {
        PyErr_SetString(PyExc_TypeError, "this Builder was not initialised");
        return NULL;
    }
    Py_ssize_t nargs = PyTuple_GET_SIZE(args);
    if (nargs != 1 || (kwds != NULL && PyDict_GET_SIZE(kwds) != 0)) {
        PyErr_Format(PyExc_TypeError, "a builder takes one wire struct, got %zd arguments",
                     nargs + (kwds == NULL ? 0 : PyDict_GET_SIZE(kwds)));
        return NULL;
    }
    return Builder_build((Builder *)self, PyTuple_GET_ITEM(args, 0));
}

static PyObject *
Builder_repr(Builder *self)
{
    if (self->cls == NULL)
        return PyUnicode_FromString("<Builder (not initialised)>");
    return PyUnicode_FromFormat("<Builder of %s>", self->cls->tp_name);
}

static PyTypeObject Builder_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "projections._eventbuild.Builder",
    .tp_doc = "Builder(cls, fields, refused, refused_error, general): builds a `cls` from "
              "a decoded wire struct (see projections.decoding).",
    .tp_basicsize = sizeof(Builder),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Builder_init,
    .tp_dealloc = (destructor)Builder_dealloc,
    .tp_traverse = (traverseproc)Builder_traverse,
    .tp_clear = (inquiry)Builder_clear,
    .tp_call = Builder_call,
    .tp_repr = (reprfunc)Builder_repr,
    .tp_vectorcall_offset = offsetof(Builder, vectorcall),
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "projections._eventbuild",
    .m_doc = "Building events from decoded wire structs in C (projections.decoding holds "
             "the definition).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__eventbuild(void)
{
    if (PyType_Ready(&Builder_Type) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL)
        return NULL;
    Py_INCREF(&Builder_Type);
    if (PyModule_AddObject(module, "Builder", (PyObject *)&Builder_Type) < 0
            || PyModule_AddIntConstant(module, "CHECK_NONE", CHECK_NONE) < 0
            || PyModule_AddIntConstant(module, "CHECK_NAME", CHECK_NAME) < 0
            || PyModule_AddIntConstant(module, "CHECK_OPTIONAL_NAME", CHECK_OPTIONAL_NAME) < 0
            || PyModule_AddIntConstant(module, "CHECK_POOL", CHECK_POOL) < 0
            || PyModule_AddIntConstant(module, "CHECK_TEXT", CHECK_TEXT) < 0) {
        Py_DECREF(&Builder_Type);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
