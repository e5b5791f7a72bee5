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
 * ``row_plain(row)`` answers as ``verify._row_plainly_well_formed(row)``: whether a stored row
 * (the 17 fields of ``StoredRow``) certainly passes check 1, the format of each field.
 *
 * ``envelope(v, tenant, ..., prev_hash)`` returns the bytes ``event.envelope_bytes`` returns
 * (orjson's form of the envelope, which is its JCS form) when every value is an exact str, an
 * exact int within +-(2^53 - 1) or None, and None otherwise (the caller then asks orjson, which
 * gives the bytes or the refusal).
 *
 * ``bind_event(cls, names)`` and ``event(*fields)``: ``event`` builds an instance of the
 * frozen, slotted dataclass ``cls`` (``event.Event``) with its 19 fields in order, writing each
 * slot at the offset its member descriptor names, as ``object.__setattr__`` would, without the
 * per-field lookups (``event.stored_event``, which every store read and recorded event calls).
 *
 * Nothing here calls back into Python, so dicts and lists cannot change while they are walked.
 * canonical.py falls back to its own walk when this module is not built; the tests hold the
 * two to the same answers over generated values.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#ifdef Py_T_OBJECT_EX
#define OBJECT_EX_MEMBER Py_T_OBJECT_EX
#else
#include <structmember.h>
#define OBJECT_EX_MEMBER T_OBJECT_EX
#endif

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
        unsigned long long add = 0;
        if (floor(v) == v) {
            if (v == 0.0) {
                add = signbit(v) ? OTHER : INTEGRAL;
            }
            else {
                add = (v > -1e16 && v < 1e16) ? INTEGRAL : OTHER;
            }
        }
        else if (v > -1e-5 && v < 1e-5) {
            add = OTHER;
        }
        /* The count of other floats only needs to be nonzero: past 2^23 of them it stops
         * (where the Python count, unbounded, goes on) instead of wrapping around to 0. */
        if (add != OTHER || *flags < (1ULL << 63)) {
            *flags += add;
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


/* -- the format of a stored row (verify._row_plainly_well_formed) ---------------------------- */

#define MAX_SAFE_INTEGER 9007199254740991LL

/* The ASCII text of ``value`` and its length, or NULL when it is not an exact, ASCII str. */
static const char *
ascii_of(PyObject *value, Py_ssize_t *size)
{
    if (!PyUnicode_CheckExact(value)) {
        return NULL;
    }
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(value) < 0) { /* a legacy string of the old C API */
        PyErr_Clear();
        return NULL;
    }
#endif
    if (!PyUnicode_IS_ASCII(value)) {
        return NULL;
    }
    *size = PyUnicode_GET_LENGTH(value);
    return (const char *)PyUnicode_1BYTE_DATA(value);
}

static int
is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int
is_lower_hex(char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'f');
}

static int
is_lower(char c)
{
    return c >= 'a' && c <= 'z';
}

/* [A-Za-z0-9._-]{1,max} (with ':' when ``colon``): tenant and run_id */
static int
id_ok(PyObject *value, Py_ssize_t max, int colon)
{
    Py_ssize_t n;
    const char *s = ascii_of(value, &n);
    if (s == NULL || n < 1 || n > max) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        char c = s[i];
        if (!(is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '.' ||
              c == '_' || c == '-' || (colon && c == ':'))) {
            return 0;
        }
    }
    return 1;
}

/* [0-9a-f]{n}, with ``prefix`` before it */
static int
hex_ok(PyObject *value, const char *prefix, Py_ssize_t n)
{
    Py_ssize_t size;
    const char *s = ascii_of(value, &size);
    Py_ssize_t p = (Py_ssize_t)strlen(prefix);
    if (s == NULL || size != p + n || memcmp(s, prefix, (size_t)p) != 0) {
        return 0;
    }
    for (Py_ssize_t i = p; i < size; i++) {
        if (!is_lower_hex(s[i])) {
            return 0;
        }
    }
    return 1;
}

/* [0-9a-f]{n}, not all zeros: trace_id and span_id */
static int
w3c_ok(PyObject *value, Py_ssize_t n)
{
    if (!hex_ok(value, "", n)) {
        return 0;
    }
    const char *s = (const char *)PyUnicode_1BYTE_DATA(value);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] != '0') {
            return 1;
        }
    }
    return 0;
}

/* [0-9A-HJKMNP-TV-Z]{26} */
static int
ulid_ok(PyObject *value)
{
    Py_ssize_t n;
    const char *s = ascii_of(value, &n);
    if (s == NULL || n != 26) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        char c = s[i];
        if (!(is_digit(c) || (c >= 'A' && c <= 'Z' && c != 'I' && c != 'L' && c != 'O' &&
                              c != 'U'))) {
            return 0;
        }
    }
    return 1;
}

/* [0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z */
static int
ts_ok(PyObject *value)
{
    static const char shape[] = "dddd-dd-ddTdd:dd:dd.ddddddZ";
    Py_ssize_t n;
    const char *s = ascii_of(value, &n);
    if (s == NULL || n != (Py_ssize_t)(sizeof(shape) - 1)) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (shape[i] == 'd' ? !is_digit(s[i]) : s[i] != shape[i]) {
            return 0;
        }
    }
    return 1;
}

/* [a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+ | handoff | decision */
static int
type_ok(PyObject *value)
{
    Py_ssize_t n;
    const char *s = ascii_of(value, &n);
    if (s == NULL) {
        return 0;
    }
    if ((n == 7 && memcmp(s, "handoff", 7) == 0) || (n == 8 && memcmp(s, "decision", 8) == 0)) {
        return 1;
    }
    int parts = 0;
    Py_ssize_t i = 0;
    while (1) {
        if (i >= n || !is_lower(s[i])) {
            return 0; /* each part begins with a letter */
        }
        i++;
        while (i < n && (is_lower(s[i]) || is_digit(s[i]) || s[i] == '_')) {
            i++;
        }
        parts++;
        if (i == n) {
            return parts >= 2;
        }
        if (s[i] != '.') {
            return 0;
        }
        i++;
    }
}

static int
optional_ascii_ok(PyObject *value)
{
    Py_ssize_t n;
    return value == Py_None || ascii_of(value, &n) != NULL;
}

/* An exact int within ±(2^53 - 1) (and at least ``low``). */
static int
safe_int_ok(PyObject *value, long long low)
{
    if (!PyLong_CheckExact(value)) {
        return 0;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow != 0 || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    return v >= low && v <= MAX_SAFE_INTEGER;
}

static PyObject *
row_plain(PyObject *module, PyObject *row)
{
    if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != 17) {
        PyErr_SetString(PyExc_TypeError, "row_plain(row): a tuple of the 17 StoredRow fields");
        return NULL;
    }
    PyObject *const *f = &PyTuple_GET_ITEM(row, 0);
    PyObject *tenant = f[0], *run_id = f[1], *seq = f[2], *event_id = f[3], *ts = f[4];
    PyObject *kind = f[5], *actor = f[6], *trace = f[7], *span = f[8], *key = f[9];
    PyObject *model = f[10], *seed = f[11], *digest = f[12], *prev = f[13], *stored = f[14];
    PyObject *body = f[15], *salt = f[16];
    Py_ssize_t actor_size;
    int ok = id_ok(tenant, 64, 0) && id_ok(run_id, 128, 1) && ulid_ok(event_id) &&
             ts_ok(ts) && type_ok(kind) && hex_ok(digest, "sha256:", 64) &&
             hex_ok(stored, "sha256:", 64) &&
             (prev == Py_None || hex_ok(prev, "sha256:", 64)) &&
             (salt == Py_None || hex_ok(salt, "", 32)) && safe_int_ok(seq, 0) &&
             ascii_of(actor, &actor_size) != NULL && actor_size >= 1 && actor_size <= 128 &&
             (trace == Py_None || w3c_ok(trace, 32)) && (span == Py_None || w3c_ok(span, 16)) &&
             optional_ascii_ok(key) && optional_ascii_ok(model) &&
             (seed == Py_None || safe_int_ok(seed, -MAX_SAFE_INTEGER)) &&
             (body == Py_None || PyBytes_CheckExact(body));
    return PyBool_FromLong(ok);
}


/* -- the envelope's canonical bytes (event.envelope_bytes) ------------------------------------ */

typedef struct {
    char *data;
    Py_ssize_t size;
    Py_ssize_t capacity;
    char small[768];
} Buffer;

static int
buffer_reserve(Buffer *b, Py_ssize_t more)
{
    if (b->size + more <= b->capacity) {
        return 0;
    }
    Py_ssize_t capacity = b->capacity * 2;
    while (capacity < b->size + more) {
        capacity *= 2;
    }
    char *data = PyMem_Malloc((size_t)capacity);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(data, b->data, (size_t)b->size);
    if (b->data != b->small) {
        PyMem_Free(b->data);
    }
    b->data = data;
    b->capacity = capacity;
    return 0;
}

static int
buffer_put(Buffer *b, const char *text, Py_ssize_t n)
{
    if (buffer_reserve(b, n) < 0) {
        return -1;
    }
    memcpy(b->data + b->size, text, (size_t)n);
    b->size += n;
    return 0;
}

/* A JSON string as orjson (and JCS) writes it: '"' and '\' escaped, \b \t \n \f \r, the other
 * control characters as \u00xx (lower-case hex), everything else as its UTF-8 bytes. 1 when
 * written, 0 when the value is not handled here (a lone surrogate), -1 on error. */
static int
put_string(Buffer *b, PyObject *value)
{
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(value, &n);
    if (s == NULL) {
        PyErr_Clear();
        return 0;
    }
    if (buffer_reserve(b, 6 * n + 2) < 0) {
        return -1;
    }
    static const char hex[] = "0123456789abcdef";
    char *out = b->data + b->size;
    *out++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            *out++ = (char)c;
            continue;
        }
        *out++ = '\\';
        switch (c) {
        case '"': *out++ = '"'; break;
        case '\\': *out++ = '\\'; break;
        case '\b': *out++ = 'b'; break;
        case '\t': *out++ = 't'; break;
        case '\n': *out++ = 'n'; break;
        case '\f': *out++ = 'f'; break;
        case '\r': *out++ = 'r'; break;
        default:
            *out++ = 'u';
            *out++ = '0';
            *out++ = '0';
            *out++ = hex[c >> 4];
            *out++ = hex[c & 15];
        }
    }
    *out++ = '"';
    b->size = out - b->data;
    return 1;
}

/* One value of the envelope: 1 written, 0 not handled here, -1 error. */
static int
put_value(Buffer *b, PyObject *value)
{
    if (value == Py_None) {
        return buffer_put(b, "null", 4) < 0 ? -1 : 1;
    }
    if (PyUnicode_CheckExact(value)) {
        return put_string(b, value);
    }
    if (PyLong_CheckExact(value)) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (overflow != 0 || (v == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return 0;
        }
        if (v > MAX_SAFE_INTEGER || v < -MAX_SAFE_INTEGER) {
            return 0; /* orjson's OPT_STRICT_INTEGER refuses it: let it say so */
        }
        char digits[32];
        int len = snprintf(digits, sizeof digits, "%lld", v);
        return buffer_put(b, digits, len) < 0 ? -1 : 1;
    }
    return 0;
}

/* The envelope's keys in JCS order, each with the index of its argument (SPEC order:
 * v, tenant, run_id, seq, event_id, ts, type, actor, trace_id, span_id, idempotency_key,
 * model, seed, payload_digest, prev_hash). */
static const struct {
    const char *key;
    int arg;
} ENVELOPE_ORDER[15] = {
    {"{\"actor\":", 7},          {",\"event_id\":", 4},    {",\"idempotency_key\":", 10},
    {",\"model\":", 11},         {",\"payload_digest\":", 13}, {",\"prev_hash\":", 14},
    {",\"run_id\":", 2},         {",\"seed\":", 12},       {",\"seq\":", 3},
    {",\"span_id\":", 9},        {",\"tenant\":", 1},      {",\"trace_id\":", 8},
    {",\"ts\":", 5},             {",\"type\":", 6},        {",\"v\":", 0},
};

static PyObject *
envelope(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 15) {
        PyErr_SetString(PyExc_TypeError, "envelope() takes the 15 envelope fields in order");
        return NULL;
    }
    Buffer b;
    b.data = b.small;
    b.size = 0;
    b.capacity = (Py_ssize_t)sizeof b.small;
    PyObject *result = NULL;
    for (int i = 0; i < 15; i++) {
        const char *key = ENVELOPE_ORDER[i].key;
        if (buffer_put(&b, key, (Py_ssize_t)strlen(key)) < 0) {
            goto done;
        }
        int written = put_value(&b, args[ENVELOPE_ORDER[i].arg]);
        if (written < 0) {
            goto done;
        }
        if (written == 0) {
            result = Py_None;
            Py_INCREF(result);
            goto done;
        }
    }
    if (buffer_put(&b, "}", 1) < 0) {
        goto done;
    }
    result = PyBytes_FromStringAndSize(b.data, b.size);
done:
    if (b.data != b.small) {
        PyMem_Free(b.data);
    }
    return result;
}


/* -- events (event.stored_event) ---------------------------------------------------------- */

#define EVENT_FIELDS 19

static PyTypeObject *event_cls = NULL;
static Py_ssize_t event_offsets[EVENT_FIELDS];

static PyObject *
bind_event(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyType_Check(args[0]) || !PyTuple_CheckExact(args[1]) ||
        PyTuple_GET_SIZE(args[1]) != EVENT_FIELDS) {
        PyErr_SetString(PyExc_TypeError, "bind_event(cls, names): a class and its 19 fields");
        return NULL;
    }
    PyTypeObject *cls = (PyTypeObject *)args[0];
    if (cls->tp_itemsize != 0 || cls->tp_dictoffset != 0 || cls->tp_alloc == NULL) {
        PyErr_SetString(PyExc_TypeError, "bind_event: the class must have slots only");
        return NULL;
    }
    Py_ssize_t offsets[EVENT_FIELDS];
    for (Py_ssize_t i = 0; i < EVENT_FIELDS; i++) {
        PyObject *name = PyTuple_GET_ITEM(args[1], i);
        PyObject *descr = PyObject_GetAttr((PyObject *)cls, name);
        if (descr == NULL) {
            return NULL;
        }
        int ok = Py_IS_TYPE(descr, &PyMemberDescr_Type) &&
                 ((PyMemberDescrObject *)descr)->d_common.d_type == cls;
        PyMemberDef *member = ok ? ((PyMemberDescrObject *)descr)->d_member : NULL;
        Py_DECREF(descr); /* the class holds the descriptor, and the descriptor its member */
        if (member == NULL || member->type != OBJECT_EX_MEMBER || member->offset <= 0 ||
            member->offset + (Py_ssize_t)sizeof(PyObject *) > cls->tp_basicsize) {
            PyErr_Format(PyExc_TypeError, "bind_event: %R is not a slot of the class", name);
            return NULL;
        }
        offsets[i] = member->offset;
    }
    memcpy(event_offsets, offsets, sizeof offsets);
    Py_INCREF(cls);
    Py_XSETREF(event_cls, cls);
    Py_RETURN_NONE;
}

static PyObject *
make_event(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (event_cls == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "event(): bind_event was not called");
        return NULL;
    }
    if (nargs != EVENT_FIELDS && nargs != EVENT_FIELDS - 1) {
        PyErr_Format(PyExc_TypeError, "event() takes the %d fields in order (the last, "
                     "payload_bytes, may be left out: None)", EVENT_FIELDS);
        return NULL;
    }
    PyObject *obj = event_cls->tp_alloc(event_cls, 0);
    if (obj == NULL) {
        return NULL;
    }
    for (int i = 0; i < EVENT_FIELDS; i++) {
        PyObject **slot = (PyObject **)((char *)obj + event_offsets[i]);
        PyObject *value = i < nargs ? args[i] : Py_None;
        Py_INCREF(value);
        Py_XSETREF(*slot, value);
    }
    return obj;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_O, "The profile scan of canonical._scan (ValueError for _Reject)."},
    {"drop_dot_zero", (PyCFunction)(void (*)(void))drop_dot_zero, METH_FASTCALL,
     "Drop the '.0' before each ',' ']' or '}' if there are exactly count of them."},
    {"row_plain", row_plain, METH_O,
     "Whether a stored row certainly passes check 1 (verify._row_plainly_well_formed)."},
    {"envelope", (PyCFunction)(void (*)(void))envelope, METH_FASTCALL,
     "The envelope's JCS bytes (event.envelope_bytes), or None for a value it leaves to orjson."},
    {"bind_event", (PyCFunction)(void (*)(void))bind_event, METH_FASTCALL,
     "Bind event() to a slotted class and its 19 fields in order."},
    {"event", (PyCFunction)(void (*)(void))make_event, METH_FASTCALL,
     "An instance of the bound class with its 19 fields, in order (event.stored_event)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef_Slot slots[] = {
#if PY_VERSION_HEX >= 0x030C0000
    /* one bound event class per process (bind_event): not for several interpreters */
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
    {0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "tachograph.record.native",
    "Compiled helpers of tachograph.record: the profile scan, the row check, the envelope.", 0, methods, slots,
};

PyMODINIT_FUNC
PyInit_native(void)
{
    return PyModuleDef_Init(&moduledef);
}
