/* The profile scan of canonical.py, compiled: the same walk, the same answers.
 *
 * ``scan(value)`` returns the flags ``canonical._scan(value, 1)`` returns (integral floats
 * below 1e16 counted in the low bits, other floats orjson prints unlike JCS counted from bit
 * 40) and raises ``ValueError`` where ``_scan`` raises ``_Reject``: a value of a type outside
 * the profile (exact dict, list, str, int, bool, None and float only), NaN or an infinity,
 * nesting deeper than MAX_DEPTH. Keys, integers and strings are left to orjson, as in Python.
 *
 * ``drop_dot_zero(data, count)`` removes the ".0" before each "," "]" or "}" of ``data`` (what
 * orjson prints after an integral float) when there are exactly ``count`` of them, and
 * returns None otherwise: the regular expression of canonical.py, in one pass.
 *
 * Nothing here calls back into Python, so dicts and lists cannot change while they are walked.
 * canonical.py falls back to its own walk when this module is not built; the tests hold the
 * two to the same answers over generated values.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

#define MAX_DEPTH 64
#define INTEGRAL 1ULL
#define OTHER (1ULL << 40)

static int
scan_value(PyObject *value, int depth, unsigned long long *flags);

static int
scan_item(PyObject *item, int depth, unsigned long long *flags)
{
    if (PyUnicode_CheckExact(item) || PyLong_CheckExact(item) || PyBool_Check(item) ||
        item == Py_None) {
        return 0;
    }
    return scan_value(item, depth + 1, flags);
}

static int
scan_value(PyObject *value, int depth, unsigned long long *flags)
{
    if (PyDict_CheckExact(value)) {
        if (depth > MAX_DEPTH) {
            return -1;
        }
        Py_ssize_t pos = 0;
        PyObject *key, *item;
        while (PyDict_Next(value, &pos, &key, &item)) {
            if (scan_item(item, depth, flags) < 0) {
                return -1;
            }
        }
        return 0;
    }
    if (PyList_CheckExact(value)) {
        if (depth > MAX_DEPTH) {
            return -1;
        }
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(value); i++) {
            if (scan_item(PyList_GET_ITEM(value, i), depth, flags) < 0) {
                return -1;
            }
        }
        return 0;
    }
    if (PyUnicode_CheckExact(value) || PyLong_CheckExact(value) || PyBool_Check(value) ||
        value == Py_None) {
        return 0;
    }
    if (PyFloat_CheckExact(value)) {
        double v = PyFloat_AS_DOUBLE(value);
        if (!isfinite(v)) {
            return -1;
        }
        if (floor(v) == v) {
            if (v == 0.0) {
                *flags += signbit(v) ? OTHER : INTEGRAL;
            }
            else {
                *flags += (v > -1e16 && v < 1e16) ? INTEGRAL : OTHER;
            }
        }
        else if (v > -1e-5 && v < 1e-5) {
            *flags += OTHER;
        }
        return 0;
    }
    return -1;
}

static PyObject *
scan(PyObject *module, PyObject *value)
{
    unsigned long long flags = 0;
    if (scan_value(value, 1, &flags) < 0) {
        PyErr_SetString(PyExc_ValueError, "outside the profile");
        return NULL;
    }
    return PyLong_FromUnsignedLongLong(flags);
}

/* The position of the next ".0" before "," "]" or "}" at or after ``from``, or -1. */
static Py_ssize_t
next_dot_zero(const char *data, Py_ssize_t size, Py_ssize_t from)
{
    while (from + 2 < size) {
        const char *dot = memchr(data + from, '.', (size_t)(size - 2 - from));
        if (dot == NULL) {
            return -1;
        }
        Py_ssize_t i = dot - data;
        char end = data[i + 2];
        if (data[i + 1] == '0' && (end == ',' || end == ']' || end == '}')) {
            return i;
        }
        from = i + 1;
    }
    return -1;
}

static PyObject *
drop_dot_zero(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyBytes_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "drop_dot_zero(data: bytes, count: int)");
        return NULL;
    }
    Py_ssize_t count = PyLong_AsSsize_t(args[1]);
    if (count == -1 && PyErr_Occurred()) {
        return NULL;
    }
    const char *data = PyBytes_AS_STRING(args[0]);
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
    /* First count, so that a mismatch costs no copy. */
    Py_ssize_t found = 0;
    for (Py_ssize_t i = next_dot_zero(data, size, 0); i >= 0;
         i = next_dot_zero(data, size, i + 2)) {
        found++;
    }
    if (found != count) {
        Py_RETURN_NONE;
    }
    if (found == 0) {
        Py_INCREF(args[0]);
        return args[0];
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, size - 2 * found);
    if (out == NULL) {
        return NULL;
    }
    char *dst = PyBytes_AS_STRING(out);
    Py_ssize_t from = 0;
    for (Py_ssize_t i = next_dot_zero(data, size, 0); i >= 0;
         i = next_dot_zero(data, size, i + 2)) {
        memcpy(dst, data + from, (size_t)(i - from));
        dst += i - from;
        from = i + 2;
    }
    memcpy(dst, data + from, (size_t)(size - from));
    return out;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_O, "The profile scan of canonical._scan (ValueError for _Reject)."},
    {"drop_dot_zero", (PyCFunction)(void (*)(void))drop_dot_zero, METH_FASTCALL,
     "Drop the '.0' before each ',' ']' or '}' if there are exactly count of them."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef_Slot slots[] = {
#if PY_VERSION_HEX >= 0x030C0000
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
    {0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "tachograph.record.jcs_scan",
    "The compiled profile scan of tachograph.record.canonical.", 0, methods, slots,
};

PyMODINIT_FUNC
PyInit_jcs_scan(void)
{
    return PyModuleDef_Init(&moduledef);
}
