/* The fast Avro decoder, compiled: an interpreter of the decoding programs of
 * analytics/avro_program.py (the opcodes and operands are described there).
 *
 * `Decoder(program, truncate, strict)` parses a program once into a tree of C structs; calling
 * it with (values, start, row, errors) reads each framed value from `start` into the builders'
 * lists, exactly as the generated Python of analytics/avro_codegen.py would (strings as bytes).
 * A value it cannot read whole is not worded here: its appends are truncated away
 * (`truncate(row)`) and the strict Python decoder reads it again (`strict((value,), start, row,
 * errors)`), which quarantines it with its message, so every message is worded in one place.
 *
 * Every read is bounds-checked against the value, and a length is added to a position only once
 * it is known to end inside it, so no sum overflows.  A varint's tenth byte above 1 would not fit
 * 64 bits and fails the value, as in Python, and so do more array and map items, read or
 * skipped, than the value has bytes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* The opcodes of analytics/avro_program.py (a unit test checks that they agree). */
enum {
    OP_BOOL = 1, OP_INT, OP_LONG, OP_INT_AS_FLOAT, OP_LONG_AS_FLOAT, OP_TS_MILLIS, OP_FLOAT,
    OP_DOUBLE, OP_STRING, OP_BYTES, OP_FIXED, OP_DECIMAL, OP_ENUM, OP_CALL, OP_ADD, OP_FAIL,
    OP_UNION, OP_BLOCKS, OP_SKIP, OP_SKIP_LONG, OP_SKIP_BYTES, OP_SKIP_BLOCKS,
};

#define MAX_MILLIS (INT64_MAX / 1000)
#define MAX_DEPTH 64 /* programs nest no deeper than the reader schema, which is not recursive */

typedef struct Seq Seq;
typedef struct {
    int code;
    PyObject *list;   /* the values' (or offsets') list; borrowed from the program */
    PyObject *obj;    /* CALL/ADD: the callable; ENUM: the table; DECIMAL: 10**precision */
    PyObject *value;  /* ADD: the default */
    Py_ssize_t size;  /* SKIP, FIXED: bytes; DECIMAL: bytes or -1 (length-prefixed) */
    int64_t limit;    /* DECIMAL: 10**precision when it fits int64, else 0 */
    Seq *seqs;        /* UNION: one per branch; BLOCKS, SKIP_BLOCKS: the item */
    Py_ssize_t nseqs;
} Op;

struct Seq {
    Op *ops;
    Py_ssize_t n;
};

/* -- parsing a program (a tuple of operation tuples) ------------------------------------------- */

static void
seq_free(Seq *seq)
{
    for (Py_ssize_t i = 0; i < seq->n; i++) {
        Op *op = &seq->ops[i];
        for (Py_ssize_t j = 0; j < op->nseqs; j++)
            seq_free(&op->seqs[j]);
        PyMem_Free(op->seqs);
    }
    PyMem_Free(seq->ops);
    seq->ops = NULL;
    seq->n = 0;
}

static int seq_parse(PyObject *program, Seq *out, int depth);

static int
bad_program(const char *what)
{
    PyErr_Format(PyExc_ValueError, "invalid decoding program: %s", what);
    return -1;
}

static int
op_parse(PyObject *t, Op *op, int depth)
{
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) < 1 || !PyLong_Check(PyTuple_GET_ITEM(t, 0)))
        return bad_program("an operation is not a tuple starting with its opcode");
    Py_ssize_t n = PyTuple_GET_SIZE(t);
    long code = PyLong_AsLong(PyTuple_GET_ITEM(t, 0));
    op->code = (int)code;
#define ARGS(k) \
    if (n != (k)) \
        return bad_program("wrong number of operands");
#define LIST(i) \
    if (!PyList_Check(PyTuple_GET_ITEM(t, i))) \
        return bad_program("an operand is not a list"); \
    op->list = PyTuple_GET_ITEM(t, i);
    switch (code) {
    case OP_BOOL: case OP_INT: case OP_LONG: case OP_INT_AS_FLOAT: case OP_LONG_AS_FLOAT:
    case OP_TS_MILLIS: case OP_FLOAT: case OP_DOUBLE: case OP_STRING: case OP_BYTES:
        ARGS(2) LIST(1)
        return 0;
    case OP_FIXED: case OP_SKIP:
        if (code == OP_FIXED) {
            ARGS(3) LIST(1)
        } else {
            ARGS(2)
        }
        op->size = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, n - 1));
        if (op->size < 0)
            return PyErr_Occurred() ? -1 : bad_program("a negative size");
        return 0;
    case OP_DECIMAL: {
        ARGS(4) LIST(1)
        op->size = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 2));
        if (op->size == -1 && PyErr_Occurred())
            return -1;
        if (op->size < -1)
            return bad_program("a decimal's size below -1");
        op->obj = PyTuple_GET_ITEM(t, 3);
        if (!PyLong_Check(op->obj))
            return bad_program("a decimal's limit is not an int");
        int overflow = 0;
        long long limit = PyLong_AsLongLongAndOverflow(op->obj, &overflow);
        if (limit == -1 && PyErr_Occurred())
            return -1;
        op->limit = overflow ? 0 : (int64_t)limit;
        return 0;
    }
    case OP_ENUM:
        ARGS(3) LIST(1)
        op->obj = PyTuple_GET_ITEM(t, 2);
        if (!PyTuple_Check(op->obj))
            return bad_program("an enum's table is not a tuple");
        return 0;
    case OP_CALL:
    case OP_ADD:
        ARGS(code == OP_CALL ? 2 : 3)
        op->obj = PyTuple_GET_ITEM(t, 1);
        if (!PyCallable_Check(op->obj))
            return bad_program("a call's operand is not callable");
        op->value = code == OP_ADD ? PyTuple_GET_ITEM(t, 2) : NULL;
        return 0;
    case OP_FAIL:
    case OP_SKIP_LONG:
    case OP_SKIP_BYTES:
        return 0;
    case OP_UNION: {
        ARGS(2)
        PyObject *branches = PyTuple_GET_ITEM(t, 1);
        if (!PyTuple_Check(branches))
            return bad_program("a union's branches are not a tuple");
        Py_ssize_t k = PyTuple_GET_SIZE(branches);
        op->seqs = PyMem_Calloc(k ? (size_t)k : 1, sizeof(Seq));
        if (op->seqs == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        op->nseqs = k;
        for (Py_ssize_t i = 0; i < k; i++)
            if (seq_parse(PyTuple_GET_ITEM(branches, i), &op->seqs[i], depth + 1) < 0)
                return -1;
        return 0;
    }
    case OP_BLOCKS:
    case OP_SKIP_BLOCKS:
        if (code == OP_BLOCKS) {
            ARGS(3) LIST(1)
        } else {
            ARGS(2)
        }
        op->seqs = PyMem_Calloc(1, sizeof(Seq));
        if (op->seqs == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        op->nseqs = 1;
        return seq_parse(PyTuple_GET_ITEM(t, n - 1), op->seqs, depth + 1);
    default:
        return bad_program("unknown opcode");
    }
#undef ARGS
#undef LIST
}

static int
seq_parse(PyObject *program, Seq *out, int depth)
{
    if (depth > MAX_DEPTH)
        return bad_program("nested too deep");
    if (!PyTuple_Check(program))
        return bad_program("a program is not a tuple");
    Py_ssize_t n = PyTuple_GET_SIZE(program);
    out->ops = PyMem_Calloc(n ? (size_t)n : 1, sizeof(Op));
    if (out->ops == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    out->n = n;
    for (Py_ssize_t i = 0; i < n; i++)
        if (op_parse(PyTuple_GET_ITEM(program, i), &out->ops[i], depth) < 0)
            return -1;
    return 0;
}

/* -- reading ----------------------------------------------------------------------------------- */

typedef struct {
    const unsigned char *data;
    Py_ssize_t pos, end;
    Py_ssize_t items; /* the array and map items the value may still hold: one per byte, in all */
} Cursor;

/* What running a program on a value came to. */
enum { READ_OK = 0, READ_BAD = 1, READ_RAISED = 2 };

static int
varint(Cursor *c, int64_t *value)
{
    uint64_t raw = 0;
    for (int shift = 0; shift <= 63; shift += 7) {
        if (c->pos >= c->end)
            return 0;
        unsigned char b = c->data[c->pos++];
        if (shift == 63 && b > 1)
            return 0;
        raw |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *value = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return 1;
        }
    }
    return 0;
}

/* A length, non-negative and ending inside the value. */
static int
length(Cursor *c, Py_ssize_t *n)
{
    int64_t v;
    if (!varint(c, &v) || v < 0 || v > c->end - c->pos)
        return 0;
    *n = (Py_ssize_t)v;
    return 1;
}

/* Appends `item` (a new reference, or NULL after a Python error) to `list`. */
static int
append(PyObject *list, PyObject *item)
{
    if (item == NULL)
        return READ_RAISED;
    int failed = PyList_Append(list, item);
    Py_DECREF(item);
    return failed ? READ_RAISED : READ_OK;
}

static uint64_t
little_endian(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static int run(const Seq *seq, Cursor *c);

static int
decimal(const Op *op, Cursor *c)
{
    Py_ssize_t n = op->size;
    if (n < 0 && !length(c, &n))
        return READ_BAD;
    if (n > c->end - c->pos)
        return READ_BAD;
    const unsigned char *p = c->data + c->pos;
    c->pos += n;
    if (n <= 8) {
        uint64_t raw = 0;
        for (Py_ssize_t i = 0; i < n; i++)
            raw = (raw << 8) | p[i];
        int64_t v = 0;
        if (n > 0) {
            int shift = (int)(64 - 8 * n); /* sign-extend from the top bit of the first byte */
            v = shift ? (int64_t)(raw << shift) >> shift : (int64_t)raw;
        }
        /* A limit beyond int64 (precision 19 and up) holds every int64. */
        if (op->limit && (v <= -op->limit || v >= op->limit))
            return READ_BAD;
        return append(op->list, PyLong_FromLongLong(v));
    }
    PyObject *v = _PyLong_FromByteArray(p, (size_t)n, 0, 1);
    if (v == NULL)
        return READ_RAISED;
    PyObject *magnitude = PyNumber_Absolute(v);
    if (magnitude == NULL) {
        Py_DECREF(v);
        return READ_RAISED;
    }
    int within = PyObject_RichCompareBool(magnitude, op->obj, Py_LT);
    Py_DECREF(magnitude);
    if (within <= 0) {
        Py_DECREF(v);
        return within < 0 ? READ_RAISED : READ_BAD;
    }
    return append(op->list, v);
}

static int
blocks(const Op *op, Cursor *c)
{
    int read = op->code == OP_BLOCKS;
    Py_ssize_t count = 0;
    for (;;) {
        int64_t k;
        if (!varint(c, &k))
            return READ_BAD;
        if (k == 0)
            break;
        if (k < 0) {
            /* The block's byte size: a skip jumps over the block, a read checks it is not
             * negative and reads the items. */
            int64_t size;
            if (!varint(c, &size) || size < 0)
                return READ_BAD;
            if (!read) {
                if (size > c->end - c->pos)
                    return READ_BAD;
                c->pos += (Py_ssize_t)size;
                continue;
            }
            if (k == INT64_MIN)
                return READ_BAD;
            k = -k;
        }
        /* Items of a zero-width type (null) take no bytes: without a budget, blocks of them
         * would make a small value cost time and memory without bound. */
        if (k > c->items)
            return READ_BAD;
        c->items -= (Py_ssize_t)k;
        count += (Py_ssize_t)k;
        for (int64_t i = 0; i < k; i++) {
            int r = run(op->seqs, c);
            if (r != READ_OK)
                return r;
        }
    }
    if (!read)
        return READ_OK;
    Py_ssize_t rows = PyList_GET_SIZE(op->list);
    if (rows == 0) {
        PyErr_SetString(PyExc_IndexError, "a list's offsets lost their first entry");
        return READ_RAISED;
    }
    Py_ssize_t last = PyLong_AsSsize_t(PyList_GET_ITEM(op->list, rows - 1));
    if (last == -1 && PyErr_Occurred())
        return READ_RAISED;
    return append(op->list, PyLong_FromSsize_t(last + count));
}

static int
step(const Op *op, Cursor *c)
{
    int64_t v;
    Py_ssize_t n;
    switch (op->code) {
    case OP_BOOL:
        if (c->pos >= c->end || c->data[c->pos] > 1)
            return READ_BAD;
        return append(op->list, PyBool_FromLong(c->data[c->pos++]));
    case OP_INT:
    case OP_INT_AS_FLOAT:
        if (!varint(c, &v) || v < INT32_MIN || v > INT32_MAX)
            return READ_BAD;
        return append(op->list, op->code == OP_INT ? PyLong_FromLongLong(v) : PyFloat_FromDouble((double)v));
    case OP_LONG:
        if (!varint(c, &v))
            return READ_BAD;
        return append(op->list, PyLong_FromLongLong(v));
    case OP_LONG_AS_FLOAT:
        if (!varint(c, &v))
            return READ_BAD;
        return append(op->list, PyFloat_FromDouble((double)v));
    case OP_TS_MILLIS:
        if (!varint(c, &v) || v < -MAX_MILLIS || v > MAX_MILLIS)
            return READ_BAD;
        return append(op->list, PyLong_FromLongLong(v));
    case OP_FLOAT: {
        if (c->end - c->pos < 4)
            return READ_BAD;
        uint32_t bits = (uint32_t)little_endian(c->data + c->pos, 4);
        float f;
        memcpy(&f, &bits, 4);
        c->pos += 4;
        return append(op->list, PyFloat_FromDouble((double)f));
    }
    case OP_DOUBLE: {
        if (c->end - c->pos < 8)
            return READ_BAD;
        uint64_t bits = little_endian(c->data + c->pos, 8);
        double d;
        memcpy(&d, &bits, 8);
        c->pos += 8;
        return append(op->list, PyFloat_FromDouble(d));
    }
    case OP_STRING:
    case OP_BYTES:
    case OP_FIXED:
        if (op->code == OP_FIXED) {
            n = op->size;
            if (n > c->end - c->pos)
                return READ_BAD;
        } else if (!length(c, &n)) {
            return READ_BAD;
        }
        c->pos += n;
        return append(op->list, PyBytes_FromStringAndSize((const char *)c->data + c->pos - n, n));
    case OP_DECIMAL:
        return decimal(op, c);
    case OP_ENUM: {
        if (!varint(c, &v) || v < 0 || v >= PyTuple_GET_SIZE(op->obj))
            return READ_BAD;
        PyObject *symbol = PyTuple_GET_ITEM(op->obj, (Py_ssize_t)v);
        if (symbol == Py_None)
            return READ_BAD;
        Py_INCREF(symbol);
        return append(op->list, symbol);
    }
    case OP_CALL:
    case OP_ADD: {
        PyObject *done = op->code == OP_CALL ? PyObject_CallNoArgs(op->obj) : PyObject_CallOneArg(op->obj, op->value);
        if (done == NULL)
            return READ_RAISED;
        Py_DECREF(done);
        return READ_OK;
    }
    case OP_FAIL:
        return READ_BAD;
    case OP_UNION:
        if (!varint(c, &v) || v < 0 || v >= op->nseqs)
            return READ_BAD;
        return run(&op->seqs[v], c);
    case OP_BLOCKS:
    case OP_SKIP_BLOCKS:
        return blocks(op, c);
    case OP_SKIP:
        if (op->size > c->end - c->pos)
            return READ_BAD;
        c->pos += op->size;
        return READ_OK;
    case OP_SKIP_LONG:
        return varint(c, &v) ? READ_OK : READ_BAD;
    case OP_SKIP_BYTES:
        if (!length(c, &n))
            return READ_BAD;
        c->pos += n;
        return READ_OK;
    default:
        return READ_BAD; /* refused when parsed */
    }
}

static int
run(const Seq *seq, Cursor *c)
{
    for (Py_ssize_t i = 0; i < seq->n; i++) {
        int r = step(&seq->ops[i], c);
        if (r != READ_OK)
            return r;
    }
    return READ_OK;
}

/* -- the Decoder type ---------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *program; /* owns every object the parsed tree borrows */
    PyObject *truncate;
    PyObject *strict;
    Seq seq;
} Decoder;

static void
Decoder_dealloc(Decoder *self)
{
    PyObject_GC_UnTrack(self);
    seq_free(&self->seq);
    Py_CLEAR(self->program);
    Py_CLEAR(self->truncate);
    Py_CLEAR(self->strict);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
Decoder_traverse(Decoder *self, visitproc visit, void *arg)
{
    Py_VISIT(self->program);
    Py_VISIT(self->truncate);
    Py_VISIT(self->strict);
    return 0;
}

static int
Decoder_clear(Decoder *self)
{
    seq_free(&self->seq);
    Py_CLEAR(self->program);
    Py_CLEAR(self->truncate);
    Py_CLEAR(self->strict);
    return 0;
}

static int
Decoder_init(Decoder *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"program", "truncate", "strict", NULL};
    PyObject *program, *truncate, *strict;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!OO", kwlist, &PyTuple_Type, &program, &truncate, &strict))
        return -1;
    if (!PyCallable_Check(truncate) || !PyCallable_Check(strict)) {
        PyErr_SetString(PyExc_TypeError, "truncate and strict must be callable");
        return -1;
    }
    Decoder_clear(self);
    if (seq_parse(program, &self->seq, 0) < 0) {
        seq_free(&self->seq);
        return -1;
    }
    Py_INCREF(program);
    Py_INCREF(truncate);
    Py_INCREF(strict);
    self->program = program;
    self->truncate = truncate;
    self->strict = strict;
    return 0;
}

/* Hands the value the fast read gave up on to the strict decoder, after truncating its appends. */
static int
again_strictly(Decoder *self, PyObject *value, PyObject *start, PyObject *row, PyObject *errors)
{
    PyObject *done = PyObject_CallOneArg(self->truncate, row);
    if (done == NULL)
        return -1;
    Py_DECREF(done);
    PyObject *one = PyTuple_Pack(1, value);
    if (one == NULL)
        return -1;
    done = PyObject_CallFunctionObjArgs(self->strict, one, start, row, errors, NULL);
    Py_DECREF(one);
    if (done == NULL)
        return -1;
    Py_DECREF(done);
    return 0;
}

static PyObject *
Decoder_call(Decoder *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"values", "start", "row", "errors", NULL};
    PyObject *values, *start_obj, *errors;
    Py_ssize_t start, row;
    if (self->program == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Decoder not initialised");
        return NULL;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOnO", kwlist, &values, &start_obj, &row, &errors))
        return NULL;
    start = PyLong_AsSsize_t(start_obj);
    if (start == -1 && PyErr_Occurred())
        return NULL;
    PyObject *seq = PySequence_Fast(values, "values must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < n; i++, row++) {
        PyObject *value = PySequence_Fast_GET_ITEM(seq, i);
        int r = READ_BAD;
        if (PyBytes_Check(value) && start >= 0 && start <= PyBytes_GET_SIZE(value)) {
            Py_ssize_t size = PyBytes_GET_SIZE(value);
            Cursor c = {(const unsigned char *)PyBytes_AS_STRING(value), start, size, size};
            r = run(&self->seq, &c);
            if (r == READ_OK && c.pos != c.end)
                r = READ_BAD;
        }
        if (r == READ_OK)
            continue;
        if (r == READ_RAISED) {
            /* As the Python decoder's `except Exception`: anything else propagates. */
            if (!PyErr_ExceptionMatches(PyExc_Exception)) {
                Py_DECREF(seq);
                return NULL;
            }
            PyErr_Clear();
        }
        PyObject *row_obj = PyLong_FromSsize_t(row);
        if (row_obj == NULL || again_strictly(self, value, start_obj, row_obj, errors) < 0) {
            Py_XDECREF(row_obj);
            Py_DECREF(seq);
            return NULL;
        }
        Py_DECREF(row_obj);
    }
    Py_DECREF(seq);
    return PyLong_FromSsize_t(row);
}

static PyTypeObject DecoderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "analytics._avrovm.Decoder",
    .tp_doc = PyDoc_STR("Decoder(program, truncate, strict): the fast decoder of a decoding program."),
    .tp_basicsize = sizeof(Decoder),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Decoder_init,
    .tp_dealloc = (destructor)Decoder_dealloc,
    .tp_traverse = (traverseproc)Decoder_traverse,
    .tp_clear = (inquiry)Decoder_clear,
    .tp_call = (ternaryfunc)Decoder_call,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "analytics._avrovm",
    .m_doc = "An interpreter of Avro decoding programs (analytics/avro_program.py).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__avrovm(void)
{
    if (PyType_Ready(&DecoderType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&DecoderType);
    if (PyModule_AddObject(m, "Decoder", (PyObject *)&DecoderType) < 0) {
        Py_DECREF(&DecoderType);
        Py_DECREF(m);
        return NULL;
    }
    static const struct { const char *name; int code; } opcodes[] = {
        {"BOOL", OP_BOOL}, {"INT", OP_INT}, {"LONG", OP_LONG}, {"INT_AS_FLOAT", OP_INT_AS_FLOAT},
        {"LONG_AS_FLOAT", OP_LONG_AS_FLOAT}, {"TS_MILLIS", OP_TS_MILLIS}, {"FLOAT", OP_FLOAT},
        {"DOUBLE", OP_DOUBLE}, {"STRING", OP_STRING}, {"BYTES", OP_BYTES}, {"FIXED", OP_FIXED},
        {"DECIMAL", OP_DECIMAL}, {"ENUM", OP_ENUM}, {"CALL", OP_CALL}, {"ADD", OP_ADD},
        {"FAIL", OP_FAIL}, {"UNION", OP_UNION}, {"BLOCKS", OP_BLOCKS}, {"SKIP", OP_SKIP},
        {"SKIP_LONG", OP_SKIP_LONG}, {"SKIP_BYTES", OP_SKIP_BYTES}, {"SKIP_BLOCKS", OP_SKIP_BLOCKS},
    };
    PyObject *table = PyDict_New();
    if (table == NULL) {
        Py_DECREF(m);
        return NULL;
    }
    for (size_t i = 0; i < sizeof opcodes / sizeof opcodes[0]; i++) {
        PyObject *code = PyLong_FromLong(opcodes[i].code);
        if (code == NULL || PyDict_SetItemString(table, opcodes[i].name, code) < 0) {
            Py_XDECREF(code);
            Py_DECREF(table);
            Py_DECREF(m);
            return NULL;
        }
        Py_DECREF(code);
    }
    if (PyModule_AddObject(m, "OPCODES", table) < 0) {
        Py_DECREF(table);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
