/* The per-record walks of produce-time validation, compiled: broker/protocol/record_walk.py.
 *
 * Each function answers one question, "would the Python walk accept these records?", with
 * True exactly when it would.  On False the Python walk runs and raises the error with its
 * message, so the messages are worded in one place; a valid batch never pays for it.
 *
 * Every read is bounds-checked against the buffer, and a length is added to a position only
 * once it is known to end inside the buffer, so no sum overflows.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* A zigzag varint of at most ten bytes read at *pos, ending at or before `end`; 0 when it runs
 * past `end` or is longer.  A value beyond 64 bits (a tenth byte above 1) saturates: every use
 * of a length that large fails or reads it as null just as Python's exact value would. */
static int
varint(const unsigned char *data, Py_ssize_t end, Py_ssize_t *pos, int64_t *value)
{
    uint64_t raw = 0;
    Py_ssize_t p = *pos;
    for (int shift = 0; shift <= 63; shift += 7) {
        if (p >= end)
            return 0;
        unsigned char b = data[p++];
        if (shift == 63 && (b & 0x7F) > 1) {
            if (b >= 0x80)
                return 0;
            *value = (raw & 1) ? INT64_MIN : INT64_MAX;
            *pos = p;
            return 1;
        }
        raw |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *value = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            *pos = p;
            return 1;
        }
    }
    return 0;
}

/* A length field (key, value or header value): the position after its bytes, or -1 when they
 * run past `end`.  A negative length is null and takes no bytes. */
static Py_ssize_t
skip(const unsigned char *data, Py_ssize_t end, Py_ssize_t pos)
{
    int64_t length;
    if (!varint(data, end, &pos, &length))
        return -1;
    if (length > 0) {
        if (length > end - pos)
            return -1;
        pos += (Py_ssize_t)length;
    }
    return pos;
}

/* One record of an uncompressed batch, field by field, as `_check_record` reads it; the
 * position after it, or -1. */
static Py_ssize_t
record(const unsigned char *data, Py_ssize_t end, Py_ssize_t pos, int need_keys)
{
    int64_t length, delta, key_length, headers;
    if (!varint(data, end, &pos, &length))
        return -1;
    Py_ssize_t start = pos;
    if (pos >= end || data[pos] & 0x80) /* attributes: one byte, below 0x80 */
        return -1;
    pos++;
    if (!varint(data, end, &pos, &delta) || !varint(data, end, &pos, &delta))
        return -1; /* timestamp and offset deltas */
    Py_ssize_t key = pos;
    if (!varint(data, end, &key, &key_length) || (need_keys && key_length < 0))
        return -1;
    if ((pos = skip(data, end, pos)) < 0 || (pos = skip(data, end, pos)) < 0) /* key, value */
        return -1;
    if (!varint(data, end, &pos, &headers) || headers < 0)
        return -1;
    for (int64_t i = 0; i < headers; i++) {
        int64_t size;
        if (!varint(data, end, &pos, &size) || size < 0 || size > end - pos)
            return -1;
        /* A consumer decodes header keys: they must be UTF-8, as Python's strict decoder says. */
        PyObject *text = PyUnicode_DecodeUTF8((const char *)data + pos, (Py_ssize_t)size, "strict");
        if (text == NULL) {
            PyErr_Clear();
            return -1;
        }
        Py_DECREF(text);
        pos += (Py_ssize_t)size;
        if ((pos = skip(data, end, pos)) < 0)
            return -1;
    }
    if (length < 0 || pos - start != length)
        return -1;
    return pos;
}

PyDoc_STRVAR(check_records_doc,
"check_records(data, count, need_keys) -> bool\n\n"
"Whether records.check_records would accept the records: True only when it would.");

static PyObject *
check_records(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t count;
    int need_keys;
    if (!PyArg_ParseTuple(args, "y*np:check_records", &view, &count, &need_keys))
        return NULL;
    const unsigned char *data = view.buf;
    Py_ssize_t pos = 0, end = view.len;
    int ok = 1;
    for (Py_ssize_t i = 0; i < count && ok; i++)
        ok = (pos = record(data, end, pos, need_keys)) >= 0;
    ok = ok && pos == end;
    PyBuffer_Release(&view);
    return PyBool_FromLong(ok);
}

PyDoc_STRVAR(frame_records_doc,
"frame_records(data, count, need_keys) -> bool\n\n"
"Whether records.frame_records would accept the records: True only when it would.");

static PyObject *
frame_records(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t count;
    int need_keys;
    if (!PyArg_ParseTuple(args, "y*np:frame_records", &view, &count, &need_keys))
        return NULL;
    const unsigned char *data = view.buf;
    Py_ssize_t pos = 0, end = view.len, seen = 0;
    int ok = 1;
    while (pos < end && ok) {
        int64_t length, field;
        ok = varint(data, end, &pos, &length) && length > 0 && length <= end - pos;
        if (ok && need_keys) {
            Py_ssize_t p = pos + 1, stop = pos + (Py_ssize_t)length; /* after the attributes */
            ok = varint(data, stop, &p, &field) && varint(data, stop, &p, &field)
                 && varint(data, stop, &p, &field) && field >= 0;
        }
        pos += ok ? (Py_ssize_t)length : 0;
        seen++;
    }
    ok = ok && seen == count;
    PyBuffer_Release(&view);
    return PyBool_FromLong(ok);
}

static PyMethodDef methods[] = {
    {"check_records", check_records, METH_VARARGS, check_records_doc},
    {"frame_records", frame_records, METH_VARARGS, frame_records_doc},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot slots[] = {
#ifdef Py_mod_multiple_interpreters
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
    {0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "broker.protocol._recordwalk",
    .m_doc = "The per-record walks of produce-time validation, compiled (record_walk.py has the reference).",
    .m_size = 0,
    .m_methods = methods,
    .m_slots = slots,
};

PyMODINIT_FUNC
PyInit__recordwalk(void)
{
    return PyModuleDef_Init(&module);
}
