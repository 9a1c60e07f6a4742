/* The chain check in C: `eventstore.hashing.chained` without the interpreter's per-row cost.
 *
 * For each stored row (position, id, stream, version, type, time, recorded_at,
 * payload_text, hash) it writes the bytes `hashing.chain_input` gives (the previous hash,
 * then the record's canonical JSON in UTF-8: id, stream and type escaped as
 * json.encoder.encode_basestring does with ensure_ascii=False, integers in decimal, the
 * payload text spliced in as stored), hashes them with SHA-256 (OpenSSL's, or hashlib's
 * where the build found no OpenSSL headers) and compares the hex digest with the stored
 * hash.
 *
 * The pure-Python `chained` stays the definition. Only rows of the exact expected shape
 * (a 9-tuple of exact ints that fit in 64 bits and exact strs without lone surrogates)
 * are checked here; at the first row of any other shape the rest of the read is handed,
 * with the state reached so far, to the Python function, which then does whatever it
 * does with such a row. The errors are built by the Python helpers, so both paths raise
 * the same ChainBroken with the same message at the same position.
 *
 * `pinned` is the same hash of each row on its own: rows in any order, each a stored row
 * followed by its predecessor's stored hash (None at position 1), as `hashing.pinned`
 * (whose Python definition, `pinned_python`, takes any row of another shape). `linked`
 * is `pinned` with the predecessors' hashes in a dict by position beside the stored rows
 * (`hashing.linked`, defined by `linked_python`).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

/* Set once by configure(): the Python side of the contract. */
static PyObject *reference;    /* hashing.chained_python(rows, prev_hash, after_position) */
static PyObject *out_of_place; /* (expected, position) -> ChainBroken */
static PyObject *bad_hash;     /* (position) -> ChainBroken */
static PyObject *sha256;       /* hashlib.sha256 */
static PyObject *chain_from;   /* itertools.chain */
static PyObject *str_digest;   /* "digest", interned */
static PyObject *pinned_reference; /* hashing.pinned_python(rows) */
static PyObject *linked_reference; /* hashing.linked_python(rows, hashes) */

/* ---- a growable byte buffer ------------------------------------------------------- */

typedef struct {
    char *data;
    Py_ssize_t len;
    Py_ssize_t cap;
} Buffer;

static int
reserve(Buffer *b, Py_ssize_t more)
{
    if (more > PY_SSIZE_T_MAX - b->len) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t need = b->len + more;
    if (need <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap ? b->cap : 512;
    while (cap < need)
        cap = cap > PY_SSIZE_T_MAX / 2 ? need : cap * 2;
    char *data = PyMem_Realloc(b->data, (size_t)cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

/* The caller reserved the room. */
static inline void
put(Buffer *b, const char *s, Py_ssize_t n)
{
    memcpy(b->data + b->len, s, (size_t)n);
    b->len += n;
}

#define PUT_LITERAL(b, s) put((b), (s), (Py_ssize_t)(sizeof(s) - 1))

/* Outcomes of writing one field. */
#define WROTE 0
#define FAILED (-1) /* a Python error is set */
#define ODD 1       /* not of the shape checked here: hand the row to Python */

static const char hexdigits[] = "0123456789abcdef";

/* Before 3.12 a str made through the old C API may still need its canonical form. */
static inline int
ready(PyObject *s)
{
#if PY_VERSION_HEX < 0x030C0000
    return PyUnicode_READY(s);
#else
    (void)s;
    return 0;
#endif
}

/* A str in UTF-8, escaped as JSON (with its quotes) when `quoted`: the escapes of
 * json.encoder.encode_basestring with ensure_ascii=False, that is `"` and `\` and the
 * control characters below 0x20 (\b \f \n \r \t by name, the others as \u00XX);
 * everything else as its UTF-8 bytes. A lone surrogate has no UTF-8 form (Python's
 * strict encoder raises): ODD. */
static int
put_text(Buffer *b, PyObject *s, int quoted)
{
    if (ready(s) < 0)
        return FAILED;
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    if (!quoted && PyUnicode_IS_ASCII(s)) {
        if (reserve(b, n) < 0)
            return FAILED;
        put(b, (const char *)data, n);
        return WROTE;
    }
    /* At most 6 bytes per character (\u00XX), 4 for UTF-8, plus the quotes. */
    if (n > (PY_SSIZE_T_MAX - 2) / 6) {
        PyErr_NoMemory();
        return FAILED;
    }
    if (reserve(b, n * (quoted ? 6 : 4) + 2) < 0)
        return FAILED;
    unsigned char *out = (unsigned char *)b->data + b->len;
    if (quoted)
        *out++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c < 0x80) {
            if (quoted && (c < 0x20 || c == '"' || c == '\\')) {
                *out++ = '\\';
                switch (c) {
                case '"': *out++ = '"'; break;
                case '\\': *out++ = '\\'; break;
                case '\b': *out++ = 'b'; break;
                case '\f': *out++ = 'f'; break;
                case '\n': *out++ = 'n'; break;
                case '\r': *out++ = 'r'; break;
                case '\t': *out++ = 't'; break;
                default:
                    *out++ = 'u';
                    *out++ = '0';
                    *out++ = '0';
                    *out++ = (unsigned char)hexdigits[c >> 4];
                    *out++ = (unsigned char)hexdigits[c & 0xf];
                }
            }
            else {
                *out++ = (unsigned char)c;
            }
        }
        else if (c < 0x800) {
            *out++ = (unsigned char)(0xc0 | (c >> 6));
            *out++ = (unsigned char)(0x80 | (c & 0x3f));
        }
        else if (c < 0x10000) {
            if (c >= 0xd800 && c <= 0xdfff)
                return ODD; /* nothing was committed: b->len is unchanged */
            *out++ = (unsigned char)(0xe0 | (c >> 12));
            *out++ = (unsigned char)(0x80 | ((c >> 6) & 0x3f));
            *out++ = (unsigned char)(0x80 | (c & 0x3f));
        }
        else {
            *out++ = (unsigned char)(0xf0 | (c >> 18));
            *out++ = (unsigned char)(0x80 | ((c >> 12) & 0x3f));
            *out++ = (unsigned char)(0x80 | ((c >> 6) & 0x3f));
            *out++ = (unsigned char)(0x80 | (c & 0x3f));
        }
    }
    if (quoted)
        *out++ = '"';
    b->len = (Py_ssize_t)((char *)out - b->data);
    return WROTE;
}

/* A 64-bit integer in decimal, as str(int) writes it. */
static int
put_int(Buffer *b, long long v)
{
    char digits[24];
    char *end = digits + sizeof(digits);
    char *p = end;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *--p = '-';
    if (reserve(b, end - p) < 0)
        return FAILED;
    put(b, p, end - p);
    return WROTE;
}

/* An exact int that fits in 64 bits, else ODD. */
static int
as_int64(PyObject *o, long long *out)
{
    if (!PyLong_CheckExact(o))
        return ODD;
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow)
        return ODD;
    if (v == -1 && PyErr_Occurred())
        return FAILED;
    *out = v;
    return WROTE;
}

/* ---- the record's bytes ----------------------------------------------------------- */

/* One stored row's fields, borrowed from its tuple. */
typedef struct {
    long long position, version, time, recorded_at;
    PyObject *id, *stream, *type, *payload, *hash;
} Row;

/* The row's fields when it has exactly the shape checked here (ODD otherwise). */
static int
unpack_fields(PyObject **f, Row *r);

static int
unpack(PyObject *tuple, Row *r)
{
    if (!PyTuple_CheckExact(tuple) || PyTuple_GET_SIZE(tuple) != 9)
        return ODD;
    return unpack_fields(&PyTuple_GET_ITEM(tuple, 0), r);
}

/* The first nine fields of a row (a stored row's), borrowed. */
static int
unpack_fields(PyObject **f, Row *r)
{
    int rc;
    if ((rc = as_int64(f[0], &r->position)) != WROTE
        || (rc = as_int64(f[3], &r->version)) != WROTE
        || (rc = as_int64(f[5], &r->time)) != WROTE
        || (rc = as_int64(f[6], &r->recorded_at)) != WROTE)
        return rc;
    if (!PyUnicode_CheckExact(f[1]) || !PyUnicode_CheckExact(f[2])
        || !PyUnicode_CheckExact(f[4]) || !PyUnicode_CheckExact(f[7])
        || !PyUnicode_CheckExact(f[8]))
        return ODD;
    if (ready(f[8]) < 0)
        return FAILED;
    r->id = f[1];
    r->stream = f[2];
    r->type = f[4];
    r->payload = f[7];
    r->hash = f[8];
    return WROTE;
}

/* After `prev` (already in the buffer): the record's canonical JSON, keys sorted. */
static int
put_record(Buffer *b, const Row *r)
{
    int rc;
#define FIELD(call) \
    if ((rc = (call)) != WROTE) \
        return rc
#define KEY(s) \
    if (reserve(b, (Py_ssize_t)(sizeof(s) - 1)) < 0) \
        return FAILED; \
    PUT_LITERAL(b, s)
    KEY("{\"id\":");
    FIELD(put_text(b, r->id, 1));
    KEY(",\"payload\":");
    FIELD(put_text(b, r->payload, 0));
    KEY(",\"position\":");
    FIELD(put_int(b, r->position));
    KEY(",\"recorded_at\":");
    FIELD(put_int(b, r->recorded_at));
    KEY(",\"stream\":");
    FIELD(put_text(b, r->stream, 1));
    KEY(",\"time\":");
    FIELD(put_int(b, r->time));
    KEY(",\"type\":");
    FIELD(put_text(b, r->type, 1));
    KEY(",\"version\":");
    FIELD(put_int(b, r->version));
    KEY("}");
#undef FIELD
#undef KEY
    return WROTE;
}

/* The SHA-256 of the buffer's bytes. Where the build found OpenSSL's headers, straight
 * from libcrypto (the library hashlib itself calls here); else through hashlib.sha256, at
 * the cost of two Python objects per record. Only called with the GIL held and no Python
 * code run between its steps, so one OpenSSL context serves the process. */
#ifdef CHAIN_OPENSSL
#include <openssl/evp.h>

#define HASHED_WITH "openssl"
static EVP_MD *sha256_md;
static EVP_MD_CTX *sha256_ctx;

static int
init_hash(void)
{
    sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
    sha256_ctx = EVP_MD_CTX_new();
    if (sha256_md == NULL || sha256_ctx == NULL) {
        PyErr_SetString(PyExc_ImportError, "OpenSSL offers no SHA-256 here");
        return -1;
    }
    return 0;
}

static int
digest_of(const Buffer *b, unsigned char d[32])
{
    unsigned int size = 0;
    if (!EVP_DigestInit_ex2(sha256_ctx, sha256_md, NULL)
        || !EVP_DigestUpdate(sha256_ctx, b->data, (size_t)b->len)
        || !EVP_DigestFinal_ex(sha256_ctx, d, &size) || size != 32) {
        PyErr_SetString(PyExc_RuntimeError, "OpenSSL's SHA-256 failed");
        return FAILED;
    }
    return WROTE;
}
#else
#define HASHED_WITH "hashlib"

static int
init_hash(void)
{
    return 0;
}

static int
digest_of(const Buffer *b, unsigned char d[32])
{
    PyObject *data = PyBytes_FromStringAndSize(b->data, b->len);
    if (data == NULL)
        return FAILED;
    PyObject *h = PyObject_CallOneArg(sha256, data);
    Py_DECREF(data);
    if (h == NULL)
        return FAILED;
    PyObject *digest = PyObject_CallMethodNoArgs(h, str_digest);
    Py_DECREF(h);
    if (digest == NULL)
        return FAILED;
    if (!PyBytes_Check(digest) || PyBytes_GET_SIZE(digest) != 32) {
        PyErr_Format(PyExc_TypeError, "sha256().digest() gave %R, not 32 bytes", digest);
        Py_DECREF(digest);
        return FAILED;
    }
    memcpy(d, PyBytes_AS_STRING(digest), 32);
    Py_DECREF(digest);
    return WROTE;
}
#endif

/* The SHA-256 of the buffer's bytes as 64 lowercase hex digits (hexdigest's). */
static int
hex_sha256(const Buffer *b, char hex[64])
{
    unsigned char d[32];
    if (digest_of(b, d) != WROTE)
        return FAILED;
    for (int i = 0; i < 32; i++) {
        hex[2 * i] = hexdigits[d[i] >> 4];
        hex[2 * i + 1] = hexdigits[d[i] & 0xf];
    }
    return WROTE;
}

/* Whether a stored hash (an exact str) is these 64 hex digits. */
static int
same_hash(PyObject *stored, const char hex[64])
{
    return PyUnicode_IS_COMPACT_ASCII(stored) && PyUnicode_GET_LENGTH(stored) == 64
           && memcmp(PyUnicode_DATA(stored), hex, 64) == 0;
}

/* Raise the error the Python helper builds: helper(*args). */
static void
raise_from(PyObject *helper, PyObject *args)
{
    if (args == NULL)
        return;
    PyObject *exc = PyObject_Call(helper, args, NULL);
    Py_DECREF(args);
    if (exc == NULL)
        return;
    if (PyExceptionInstance_Check(exc))
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    else
        PyErr_Format(PyExc_TypeError, "the chain's error helper gave %R, not an exception",
                     exc);
    Py_DECREF(exc);
}

/* ---- the iterator ----------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *rows;     /* the iterable given, until the first next() */
    PyObject *iter;     /* iter(rows) */
    PyObject *delegate; /* the Python check, once a row of another shape came */
    long long expected; /* the position the next row must have */
    Buffer text;        /* prev hash, then the record being checked */
    Py_ssize_t prev_len;/* the previous hash's length at the buffer's start */
    char done;          /* ended: exhausted or raised, as a generator ends */
    char running;       /* inside next(): a second caller is refused */
    char pinned;        /* each row on its own: PINNED_ROW or PINNED_DICT, else 0 */
    PyObject *hashes;   /* PINNED_DICT: {position: stored hash} of the predecessors */
} Checker;

/* How a Checker finds each row's predecessor's hash when it checks rows on their own. */
#define PINNED_ROW 1  /* beside the row, as its tenth field */
#define PINNED_DICT 2 /* in `hashes`, by the predecessor's position */

static PyTypeObject Checker_Type;

/* The references a Checker holds, named once for the collector's two walks over them. */
#define CHECKER_REFS(each) each(rows) each(iter) each(delegate) each(hashes)
#define VISIT_REF(field) Py_VISIT(self->field);
#define CLEAR_REF(field) Py_CLEAR(self->field);

static int
Checker_traverse(Checker *self, visitproc visit, void *arg)
{
    CHECKER_REFS(VISIT_REF)
    return 0;
}

static int
Checker_clear(Checker *self)
{
    CHECKER_REFS(CLEAR_REF)
    return 0;
}

static void
Checker_dealloc(Checker *self)
{
    PyObject_GC_UnTrack(self);
    Checker_clear(self);
    PyMem_Free(self->text.data);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Hand the rest of the read, from `row` on, to the Python check with the state reached. */
static PyObject *
hand_over(Checker *self, PyObject *row)
{
    PyObject *prev = PyUnicode_DecodeUTF8(self->text.data, self->prev_len, "strict");
    PyObject *after = prev ? PyLong_FromLongLong(self->expected - 1) : NULL;
    PyObject *rest = after ? PyObject_CallFunction(chain_from, "(O)O", row, self->iter) : NULL;
    PyObject *delegate = rest ? PyObject_CallFunctionObjArgs(reference, rest, prev, after, NULL)
                              : NULL;
    Py_XDECREF(prev);
    Py_XDECREF(after);
    Py_XDECREF(rest);
    if (delegate == NULL)
        return NULL;
    Py_CLEAR(self->iter);
    self->delegate = delegate;
    return PyIter_Next(delegate);
}

/* The source's next row (NULL at its end or with the error set), the source opened at
 * the first call, lazily as a generator's would be. */
static PyObject *
next_row(Checker *self)
{
    if (self->iter == NULL) {
        self->iter = PyObject_GetIter(self->rows);
        if (self->iter == NULL)
            return NULL;
        Py_CLEAR(self->rows);
    }
    return PyIter_Next(self->iter);
}

/* After a row's hash was computed (rc WROTE, or FAILED with the error set): the row when
 * its stored hash is that one; else NULL with ChainBroken (or the error) set, the row
 * let go. */
static PyObject *
checked(int rc, PyObject *row, const Row *r, const char hex[64])
{
    if (rc == WROTE && same_hash(r->hash, hex))
        return row;
    if (rc == WROTE)
        raise_from(bad_hash, Py_BuildValue("(L)", r->position));
    Py_DECREF(row);
    return NULL;
}

/* The row (a new reference, given up), checked to chain; NULL with the error set. */
static PyObject *
check_row(Checker *self, PyObject *row)
{
    Row r;
    int rc = unpack(row, &r);
    if (rc == WROTE && self->expected == LLONG_MAX)
        rc = ODD; /* the position after it has no 64-bit form */
    if (rc == WROTE && r.position != self->expected) {
        raise_from(out_of_place, Py_BuildValue("(LL)", self->expected, r.position));
        Py_DECREF(row);
        return NULL;
    }
    if (rc == WROTE) {
        self->text.len = self->prev_len;
        rc = put_record(&self->text, &r);
    }
    char hex[64];
    if (rc == WROTE)
        rc = hex_sha256(&self->text, hex);
    if (rc == ODD) {
        self->text.len = self->prev_len;
        PyObject *out = hand_over(self, row);
        Py_DECREF(row);
        return out;
    }
    PyObject *out = checked(rc, row, &r, hex);
    if (out != NULL) {
        memcpy(self->text.data, hex, 64); /* the buffer holds at least prev + record */
        self->text.len = self->prev_len = 64;
        self->expected++;
    }
    return out;
}

static PyObject *pinned_row(Checker *self, PyObject *row);
static PyObject *linked_row(Checker *self, PyObject *row);
static PyObject *hand_over_own(Checker *self, PyObject *row);

static PyObject *
Checker_next(Checker *self)
{
    if (self->done)
        return NULL;
    if (self->running) {
        /* A generator's words: the Python check raises the same. */
        PyErr_SetString(PyExc_ValueError, "generator already executing");
        return NULL;
    }
    self->running = 1;
    PyObject *row;
    if (self->delegate != NULL)
        row = PyIter_Next(self->delegate);
    else if ((row = next_row(self)) != NULL)
        row = self->pinned == PINNED_DICT ? linked_row(self, row)
              : self->pinned == PINNED_ROW ? pinned_row(self, row)
              : check_row(self, row);
    self->running = 0;
    if (row == NULL) {
        /* Exhausted or raised: ended for good, like a generator, and its rows let go. */
        self->done = 1;
        Checker_clear(self);
    }
    return row;
}

static PyTypeObject Checker_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "eventstore._chain.Checker",
    .tp_basicsize = sizeof(Checker),
    .tp_dealloc = (destructor)Checker_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Stored rows, each yielded after it is checked to chain (see chained and "
              "pinned).",
    .tp_traverse = (traverseproc)Checker_traverse,
    .tp_clear = (inquiry)Checker_clear,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)Checker_next,
};

/* ---- each row's own link: pinned ------------------------------------------------- */

/* In `pinned` mode a Checker takes rows in any order, each a stored row followed by its
 * predecessor's stored hash (None at position 1), and yields each after its stored hash
 * is checked to be the one its content and that hash give. A row of another shape hands
 * the rest to the Python definition. */
static const char genesis[] =
    "0000000000000000000000000000000000000000000000000000000000000000";

/* The genesis hash as the predecessor's, in the emptied buffer. */
static int
put_genesis(Checker *self)
{
    if (reserve(&self->text, 64) < 0)
        return FAILED;
    put(&self->text, genesis, 64);
    return WROTE;
}

/* NULL with ChainBroken set for a row (given up) whose predecessor is not stored. */
static PyObject *
missing_before(PyObject *row, long long position)
{
    raise_from(out_of_place, Py_BuildValue("(LL)", position - 1, position));
    Py_DECREF(row);
    return NULL;
}

/* After the predecessor's hash is in the buffer (rc WROTE): the row when its stored hash
 * is the one the buffer and its record give; the rest handed to Python at a row of
 * another shape (ODD). */
static PyObject *
check_own(Checker *self, PyObject *row, const Row *r, int rc)
{
    if (rc == WROTE)
        rc = put_record(&self->text, r);
    char hex[64];
    if (rc == WROTE)
        rc = hex_sha256(&self->text, hex);
    if (rc == ODD)
        return hand_over_own(self, row);
    return checked(rc, row, r, hex);
}

static PyObject *
pinned_row(Checker *self, PyObject *row)
{
    Row r;
    int rc = ODD;
    PyObject *prev = NULL;
    if (PyTuple_CheckExact(row) && PyTuple_GET_SIZE(row) == 10) {
        rc = unpack_fields(&PyTuple_GET_ITEM(row, 0), &r);
        prev = PyTuple_GET_ITEM(row, 9);
    }
    self->text.len = 0;
    if (rc == WROTE && prev == Py_None && r.position == LLONG_MIN)
        rc = ODD; /* the position before it has no 64-bit form */
    if (rc == WROTE && prev == Py_None) {
        if (r.position != 1)
            return missing_before(row, r.position);
        rc = put_genesis(self);
    } else if (rc == WROTE) {
        rc = PyUnicode_CheckExact(prev) ? put_text(&self->text, prev, 0) : ODD;
    }
    return check_own(self, row, &r, rc);
}

/* Hand the rest of a read of rows checked on their own, from `row` (given up) on, to the
 * Python definition of the mode. */
static PyObject *
hand_over_own(Checker *self, PyObject *row)
{
    PyObject *rest = PyObject_CallFunction(chain_from, "(O)O", row, self->iter);
    Py_DECREF(row);
    if (rest == NULL)
        return NULL;
    if (self->pinned == PINNED_DICT)
        self->delegate = PyObject_CallFunctionObjArgs(linked_reference, rest, self->hashes,
                                                      NULL);
    else
        self->delegate = PyObject_CallOneArg(pinned_reference, rest);
    Py_DECREF(rest);
    if (self->delegate == NULL)
        return NULL;
    Py_CLEAR(self->iter);
    return PyIter_Next(self->delegate);
}

/* In `linked` mode each row is a stored row; its predecessor's stored hash is
 * hashes[position - 1] (the genesis hash at position 1), and a predecessor missing from
 * `hashes` is missing from the journal, as a None beside the row is to `pinned`. */
static PyObject *
linked_row(Checker *self, PyObject *row)
{
    Row r;
    int rc = unpack(row, &r);
    self->text.len = 0;
    if (rc == WROTE && r.position == LLONG_MIN)
        rc = ODD; /* the position before it has no 64-bit form */
    if (rc == WROTE && r.position == 1) {
        rc = put_genesis(self);
    } else if (rc == WROTE) {
        PyObject *key = PyLong_FromLongLong(r.position - 1);
        PyObject *prev = key ? PyDict_GetItemWithError(self->hashes, key) : NULL;
        Py_XDECREF(key);
        if (prev == NULL && !PyErr_Occurred())
            return missing_before(row, r.position);
        if (prev == NULL)
            rc = FAILED;
        else
            rc = PyUnicode_CheckExact(prev) ? put_text(&self->text, prev, 0) : ODD;
    }
    return check_own(self, row, &r, rc);
}

/* A Checker over `rows`, not yet tracked by the collector. */
static Checker *
new_checker(PyObject *rows, long long expected, char pinned)
{
    Checker *self = PyObject_GC_New(Checker, &Checker_Type);
    if (self == NULL)
        return NULL;
    self->rows = Py_NewRef(rows);
    self->iter = NULL;
    self->delegate = NULL;
    self->expected = expected;
    self->text = (Buffer){NULL, 0, 0};
    self->prev_len = 0;
    self->done = 0;
    self->running = 0;
    self->pinned = pinned;
    self->hashes = NULL;
    return self;
}

static PyObject *
pinned(PyObject *module, PyObject *rows)
{
    if (pinned_reference == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "eventstore._chain.configure() was not called");
        return NULL;
    }
    Checker *self = new_checker(rows, 0, PINNED_ROW);
    if (self != NULL)
        PyObject_GC_Track(self);
    return (PyObject *)self;
}

/* Whether a check may start: `nargs` arguments as it takes, and configure() called. */
static int
may_start(const char *name, Py_ssize_t nargs, Py_ssize_t takes)
{
    if (nargs != takes) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", name, takes,
                     nargs);
        return 0;
    }
    if (reference == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "eventstore._chain.configure() was not called");
        return 0;
    }
    return 1;
}

static PyObject *
linked(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (!may_start("linked", nargs, 2))
        return NULL;
    if (!PyDict_CheckExact(args[1]))
        return PyObject_Vectorcall(linked_reference, args, 2, NULL);
    Checker *self = new_checker(args[0], 0, PINNED_DICT);
    if (self == NULL)
        return NULL;
    self->hashes = Py_NewRef(args[1]);
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

/* ---- the module ------------------------------------------------------------------- */

static PyObject *
chained(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (!may_start("chained", nargs, 3))
        return NULL;
    PyObject *rows = args[0], *prev_hash = args[1], *after = args[2];
    long long after_position;
    int rc = as_int64(after, &after_position);
    if (rc == FAILED)
        return NULL;
    if (rc == ODD || after_position == LLONG_MAX || !PyUnicode_CheckExact(prev_hash))
        return PyObject_Vectorcall(reference, args, 3, NULL);
    Checker *self = new_checker(rows, after_position + 1, 0);
    if (self == NULL)
        return NULL;
    rc = put_text(&self->text, prev_hash, 0);
    if (rc != WROTE) {
        Py_DECREF(self);
        return rc == ODD ? PyObject_Vectorcall(reference, args, 3, NULL) : NULL;
    }
    self->prev_len = self->text.len;
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

static PyObject *
configure(PyObject *module, PyObject *args)
{
    PyObject *ref, *place, *hash, *sha, *chain, *pin, *link;
    if (!PyArg_ParseTuple(args, "OOOOOOO:configure", &ref, &place, &hash, &sha, &chain,
                          &pin, &link))
        return NULL;
    Py_XSETREF(pinned_reference, Py_NewRef(pin));
    Py_XSETREF(linked_reference, Py_NewRef(link));
    Py_XSETREF(reference, Py_NewRef(ref));
    Py_XSETREF(out_of_place, Py_NewRef(place));
    Py_XSETREF(bad_hash, Py_NewRef(hash));
    Py_XSETREF(sha256, Py_NewRef(sha));
    Py_XSETREF(chain_from, Py_NewRef(chain));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"chained", (PyCFunction)(void (*)(void))chained, METH_FASTCALL,
     "chained(rows, prev_hash, after_position): eventstore.hashing.chained, in C."},
    {"pinned", pinned, METH_O,
     "pinned(rows): eventstore.hashing.pinned, in C."},
    {"linked", (PyCFunction)(void (*)(void))linked, METH_FASTCALL,
     "linked(rows, hashes): eventstore.hashing.linked, in C."},
    {"configure", configure, METH_VARARGS,
     "configure(reference, out_of_place, bad_hash, sha256, chain, pinned_reference, "
     "linked_reference): the Python side."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "eventstore._chain",
    .m_doc = "The chain check in C (eventstore.hashing holds its definition).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__chain(void)
{
    if (PyType_Ready(&Checker_Type) < 0)
        return NULL;
    if (str_digest == NULL && (str_digest = PyUnicode_InternFromString("digest")) == NULL)
        return NULL;
    if (init_hash() < 0)
        return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module != NULL && PyModule_AddStringConstant(module, "HASHED_WITH", HASHED_WITH) < 0)
        Py_CLEAR(module);
    return module;
}
