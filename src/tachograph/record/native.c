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
 * ``jcs(data)``: the JCS form of stored JSON bytes, ``canonical(orjson.loads(data))``, or None
 * where it is not certain of that answer (see the section's comment below).
 *
 * ``verify_row(row, prev, pos, run_id, tenant)``: the common case of verifying one stored row
 * (``verify.LineChecker._feed_plain``), all of it or nothing (see its section's comment);
 * ``verify_event`` the same over the slots of a loaded event (a run read for replay);
 * ``verify_many`` either, over a page of them in turn; ``verify_start`` the same checks over a
 * page on a thread of its own, without the GIL, while the interpreter reads the next page
 * (see its section: the values are read into ``Field``s first, with the GIL held).
 *
 * ``contains_any(data, table)``: whether one of a set of words occurs in bytes (the secrets
 * pre-check of every recorded payload).
 *
 * ``untrack(d)``: a payload dict the recording path built, out of the cycle collector's sight
 * (as ``event`` leaves every event it builds).
 *
 * ``format_ts(ns)`` and ``UlidSource(draw).next(ms)``: the timestamp and the monotonic ULID of
 * a new event, as ``event._format_ts`` and ``event._UlidSource`` give them.
 *
 * ``U64Set()``: ``keycount.U64Set``, the table a run numbers its repeated keys with; its
 * ``hmac_key`` derives a default call key and counts it in one call.
 *
 * ``fresh(...)``: a new event from its checked fields, as ``event.fresh_event`` builds it (the
 * clock, the ULID, the digest, the envelope and its hash, in one call; see its section).
 *
 * ``bind_sha256(path)`` and ``sha256(data)``: the SHA-256 the helpers above take, OpenSSL's
 * from the libcrypto hashlib runs on where this process has it mapped, else hashlib's;
 * ``hmac_pads(key)`` and ``hmac16(inner, outer, data)``: a call key's keyed hash over it.
 *
 * Nothing here calls back into Python but ``UlidSource``'s draw of random bytes, the
 * SHA-256 of ``verify_row``, ``verify_event`` and ``fresh`` (hashlib's, on bytes, where
 * OpenSSL's is not bound) and the
 * ``dumps`` of ``fresh`` (orjson's, before anything is walked), so dicts and lists cannot
 * change while they are walked.
 * canonical.py falls back to its own walk when this module is not built; the tests hold the
 * two to the same answers over generated values.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__unix__) || defined(__APPLE__)
#include <dlfcn.h>
#include <pthread.h>
#define HAVE_DLFCN 1
#define HAVE_PTHREAD 1
#endif

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
scan(PyObject *Py_UNUSED(module), PyObject *value)
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
drop_dot_zero(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
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

/* -- fields read once, checked without the GIL ---------------------------------------------
 *
 * The checks and the envelope below read what a value holds through a ``Field``: its kind and
 * its ASCII text, UTF-8 text, bytes or integer, taken from the object by ``field_of`` while the
 * GIL is held. What follows reads only the Field (and the bytes it points into, which the
 * caller keeps alive), so that verify_start's thread can check a page of rows with the GIL
 * released while the interpreter reads the next page.
 */

enum {
    F_NONE = 0, /* None */
    F_ASCII,    /* an exact str of ASCII characters only: s, n */
    F_TEXT,     /* any other exact str: its UTF-8, s, n */
    F_INT,      /* an exact int within a C long long: i */
    F_BYTES,    /* exact bytes: s, n */
    F_OTHER,    /* anything else, an int beyond a long long, a str with a lone surrogate */
};

typedef struct {
    const char *s;
    union {
        Py_ssize_t n; /* F_ASCII, F_TEXT, F_BYTES */
        long long i;  /* F_INT */
    };
    int kind;
} Field;

static const Field FIELD_ONE = {.s = NULL, .i = 1, .kind = F_INT}; /* the envelope's v */

/* What ``value`` holds, read with the GIL held (no error is left set). The text and bytes
 * ``s`` points into are the object's own: valid while it is. */
static void
field_of(PyObject *value, Field *f)
{
    f->s = NULL;
    f->i = 0;
    if (value == Py_None) {
        f->kind = F_NONE;
        return;
    }
    if (PyUnicode_CheckExact(value)) {
#if PY_VERSION_HEX < 0x030C0000
        if (PyUnicode_READY(value) < 0) { /* a legacy string of the old C API */
            PyErr_Clear();
            f->kind = F_OTHER;
            return;
        }
#endif
        if (PyUnicode_IS_ASCII(value)) {
            f->kind = F_ASCII;
            f->s = (const char *)PyUnicode_1BYTE_DATA(value);
            f->n = PyUnicode_GET_LENGTH(value);
            return;
        }
        f->s = PyUnicode_AsUTF8AndSize(value, &f->n);
        if (f->s == NULL) {
            PyErr_Clear();
            f->kind = F_OTHER;
            return;
        }
        f->kind = F_TEXT;
        return;
    }
    if (PyLong_CheckExact(value)) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (overflow != 0 || (v == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            f->kind = F_OTHER;
            return;
        }
        f->kind = F_INT;
        f->i = v;
        return;
    }
    if (PyBytes_CheckExact(value)) {
        f->kind = F_BYTES;
        f->s = PyBytes_AS_STRING(value);
        f->n = PyBytes_GET_SIZE(value);
        return;
    }
    f->kind = F_OTHER;
}

/* Whether two fields hold the same value (str == str, int == int, None is None) */
static int
field_equal(const Field *a, const Field *b)
{
    if (a->kind != b->kind || a->kind == F_OTHER) {
        return 0;
    }
    if (a->kind == F_NONE) {
        return 1;
    }
    if (a->kind == F_INT) {
        return a->i == b->i;
    }
    return a->n == b->n && memcmp(a->s, b->s, (size_t)a->n) == 0;
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

/* The character classes of the checks below, one bit each, filled from the predicates above
 * when the module is executed. A check ANDs the classes of its characters and tests the bit
 * once at the end: no branch per character. Hashes, salts, ULIDs and run ids are random
 * characters, on which a branch per character (digit or letter?) was mispredicted about every
 * other time: hex_ok alone was the costliest compiled function of a replay. */
enum {
    CLASS_HEX = 1,      /* [0-9a-f] */
    CLASS_ULID = 2,     /* [0-9A-HJKMNP-TV-Z] (Crockford's base 32) */
    CLASS_ID = 4,       /* [A-Za-z0-9._-] */
    CLASS_ID_COLON = 8, /* [A-Za-z0-9._:-] */
};
static unsigned char char_class[256];

static void
init_char_class(void)
{
    for (int i = 0; i < 256; i++) {
        char c = (char)i;
        int id = i < 128 && (is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                             c == '.' || c == '_' || c == '-');
        int ulid = i < 128 && (is_digit(c) || (c >= 'A' && c <= 'Z' && c != 'I' && c != 'L' &&
                                                c != 'O' && c != 'U'));
        char_class[i] = (unsigned char)((i < 128 && is_lower_hex(c) ? CLASS_HEX : 0) |
                                        (ulid ? CLASS_ULID : 0) | (id ? CLASS_ID : 0) |
                                        (id || c == ':' ? CLASS_ID_COLON : 0));
    }
}

/* Whether each of the ``n`` characters at ``s`` is of class ``flag`` */
static int
all_of(const char *s, Py_ssize_t n, unsigned char flag)
{
    unsigned char acc = flag;
    for (Py_ssize_t i = 0; i < n; i++) {
        acc &= char_class[(unsigned char)s[i]];
    }
    return acc != 0;
}

/* [A-Za-z0-9._-]{1,max} (with ':' when ``colon``): tenant and run_id */
static int
id_ok(const Field *f, Py_ssize_t max, int colon)
{
    return f->kind == F_ASCII && f->n >= 1 && f->n <= max &&
           all_of(f->s, f->n, colon ? CLASS_ID_COLON : CLASS_ID);
}

/* [0-9a-f]{n}, with ``prefix`` before it */
static int
hex_ok(const Field *f, const char *prefix, Py_ssize_t n)
{
    Py_ssize_t p = (Py_ssize_t)strlen(prefix);
    return f->kind == F_ASCII && f->n == p + n && memcmp(f->s, prefix, (size_t)p) == 0 &&
           all_of(f->s + p, n, CLASS_HEX);
}

/* [0-9a-f]{n}, not all zeros: trace_id and span_id */
static int
w3c_ok(const Field *f, Py_ssize_t n)
{
    if (!hex_ok(f, "", n)) {
        return 0;
    }
    const char *s = f->s;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] != '0') {
            return 1;
        }
    }
    return 0;
}

/* [0-9A-HJKMNP-TV-Z]{26} */
static int
ulid_ok(const Field *f)
{
    return f->kind == F_ASCII && f->n == 26 && all_of(f->s, f->n, CLASS_ULID);
}

/* [0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z */
static int
ts_ok(const Field *f)
{
    static const char shape[] = "dddd-dd-ddTdd:dd:dd.ddddddZ";
    Py_ssize_t n = f->n;
    const char *s = f->s;
    if (f->kind != F_ASCII || n != (Py_ssize_t)(sizeof(shape) - 1)) {
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
type_ok(const Field *f)
{
    Py_ssize_t n = f->n;
    const char *s = f->s;
    if (f->kind != F_ASCII) {
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
optional_ascii_ok(const Field *f)
{
    return f->kind == F_NONE || f->kind == F_ASCII;
}

/* An exact int within ±(2^53 - 1) (and at least ``low``). */
static int
safe_int_ok(const Field *f, long long low)
{
    return f->kind == F_INT && f->i >= low && f->i <= MAX_SAFE_INTEGER;
}

/* Whether the 17 fields of a stored row (read by field_of) certainly pass check 1 */
static int
row_plain_ok(const Field *f)
{
    const Field *tenant = &f[0], *run_id = &f[1], *seq = &f[2], *event_id = &f[3];
    const Field *ts = &f[4], *kind = &f[5], *actor = &f[6], *trace = &f[7], *span = &f[8];
    const Field *key = &f[9], *model = &f[10], *seed = &f[11], *digest = &f[12];
    const Field *prev = &f[13], *stored = &f[14], *body = &f[15], *salt = &f[16];
    int ok = id_ok(tenant, 64, 0) && id_ok(run_id, 128, 1) && ulid_ok(event_id) &&
             ts_ok(ts) && type_ok(kind) && hex_ok(digest, "sha256:", 64) &&
             hex_ok(stored, "sha256:", 64) &&
             (prev->kind == F_NONE || hex_ok(prev, "sha256:", 64)) &&
             (salt->kind == F_NONE || hex_ok(salt, "", 32)) && safe_int_ok(seq, 0) &&
             actor->kind == F_ASCII && actor->n >= 1 && actor->n <= 128 &&
             (trace->kind == F_NONE || w3c_ok(trace, 32)) &&
             (span->kind == F_NONE || w3c_ok(span, 16)) && optional_ascii_ok(key) &&
             optional_ascii_ok(model) &&
             (seed->kind == F_NONE || safe_int_ok(seed, -MAX_SAFE_INTEGER)) &&
             (body->kind == F_NONE || body->kind == F_BYTES);
    return ok;
}

/* The 17 fields of a stored row from its 17 values, read with the GIL held */
static void
row_fields(PyObject *const *values, Field *f)
{
    for (int i = 0; i < 17; i++) {
        field_of(values[i], &f[i]);
    }
}

static PyObject *
row_plain(PyObject *Py_UNUSED(module), PyObject *row)
{
    if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != 17) {
        PyErr_SetString(PyExc_TypeError, "row_plain(row): a tuple of the 17 StoredRow fields");
        return NULL;
    }
    Field f[17];
    row_fields(&PyTuple_GET_ITEM(row, 0), f);
    return PyBool_FromLong(row_plain_ok(f));
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
    char *data = PyMem_RawMalloc((size_t)capacity); /* no GIL needed: see Field */
    if (data == NULL) {
        return -1; /* out of memory: the caller with the GIL says so (PyErr_NoMemory) */
    }
    memcpy(data, b->data, (size_t)b->size);
    if (b->data != b->small) {
        PyMem_RawFree(b->data);
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
 * control characters as \u00xx (lower-case hex), everything else as its UTF-8 bytes (the
 * ``n`` bytes at ``s``). 1 when written, -1 out of memory. */
static int
put_string(Buffer *b, const char *s, Py_ssize_t n)
{
    if (buffer_reserve(b, 6 * n + 2) < 0) {
        return -1;
    }
    static const char hex[] = "0123456789abcdef";
    char *out = b->data + b->size;
    *out++ = '"';
    Py_ssize_t i = 0;
    /* eight bytes at a time while none needs escaping (no byte below 0x20, no '"', no '\'),
       the common case: hashes, ids, times and names */
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
        uint64_t quote = w ^ (ones * '"'), slash = w ^ (ones * '\\');
        uint64_t special = ((w - ones * 0x20) & ~w) | ((quote - ones) & ~quote) |
                           ((slash - ones) & ~slash);
        if (special & highs) {
            break; /* this word has one: byte by byte from here */
        }
        memcpy(out, s + i, 8);
        out += 8;
    }
    for (; i < n; i++) {
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

/* One value of the envelope: 1 written, 0 not handled here (a str with a lone surrogate, an
 * int beyond 2^53 - 1, another type), -1 out of memory. */
static int
put_value(Buffer *b, const Field *value)
{
    if (value->kind == F_NONE) {
        return buffer_put(b, "null", 4) < 0 ? -1 : 1;
    }
    if (value->kind == F_ASCII || value->kind == F_TEXT) {
        return put_string(b, value->s, value->n);
    }
    if (value->kind == F_INT) {
        long long v = value->i;
        if (v > MAX_SAFE_INTEGER || v < -MAX_SAFE_INTEGER) {
            return 0; /* orjson's OPT_STRICT_INTEGER refuses it: let it say so */
        }
        char digits[24], *end = digits + sizeof digits, *d = end;
        unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
        do {
            *--d = (char)('0' + u % 10);
            u /= 10;
        } while (u != 0);
        if (v < 0) {
            *--d = '-';
        }
        return buffer_put(b, d, end - d) < 0 ? -1 : 1;
    }
    return 0;
}

/* The envelope's keys in JCS order, each with the index of its argument (SPEC order:
 * v, tenant, run_id, seq, event_id, ts, type, actor, trace_id, span_id, idempotency_key,
 * model, seed, payload_digest, prev_hash). */
#define ENVELOPE_KEY(text, arg) {text, arg, (Py_ssize_t)(sizeof text - 1)}
static const struct {
    const char *key;
    int arg;
    Py_ssize_t length;
} ENVELOPE_ORDER[15] = {
    ENVELOPE_KEY("{\"actor\":", 7),
    ENVELOPE_KEY(",\"event_id\":", 4),
    ENVELOPE_KEY(",\"idempotency_key\":", 10),
    ENVELOPE_KEY(",\"model\":", 11),
    ENVELOPE_KEY(",\"payload_digest\":", 13),
    ENVELOPE_KEY(",\"prev_hash\":", 14),
    ENVELOPE_KEY(",\"run_id\":", 2),
    ENVELOPE_KEY(",\"seed\":", 12),
    ENVELOPE_KEY(",\"seq\":", 3),
    ENVELOPE_KEY(",\"span_id\":", 9),
    ENVELOPE_KEY(",\"tenant\":", 1),
    ENVELOPE_KEY(",\"trace_id\":", 8),
    ENVELOPE_KEY(",\"ts\":", 5),
    ENVELOPE_KEY(",\"type\":", 6),
    ENVELOPE_KEY(",\"v\":", 0),
};

/* The envelope of the 15 fields ``args`` (SPEC order) into ``b``: 1 written, 0 a value not
 * handled here, -1 out of memory (no error set: no GIL is needed). */
static int
envelope_into(Buffer *b, const Field *args)
{
    for (int i = 0; i < 15; i++) {
        const char *key = ENVELOPE_ORDER[i].key;
        if (buffer_put(b, key, ENVELOPE_ORDER[i].length) < 0) {
            return -1;
        }
        int written = put_value(b, &args[ENVELOPE_ORDER[i].arg]);
        if (written <= 0) {
            return written;
        }
    }
    return buffer_put(b, "}", 1) < 0 ? -1 : 1;
}

/* The 15 envelope fields of the values ``args`` (SPEC order), read with the GIL held */
static void
envelope_fields(PyObject *const *args, Field *f)
{
    for (int i = 0; i < 15; i++) {
        field_of(args[i], &f[i]);
    }
}

/* The envelope's bytes of the 15 fields ``args``: a new bytes object, None (a new reference)
 * for a value not handled here, or NULL on error. */
static PyObject *
envelope_object(PyObject *const *args)
{
    Field fields[15];
    envelope_fields(args, fields);
    Buffer b;
    b.data = b.small;
    b.size = 0;
    b.capacity = (Py_ssize_t)sizeof b.small;
    PyObject *result = NULL;
    int written = envelope_into(&b, fields);
    if (written > 0) {
        result = PyBytes_FromStringAndSize(b.data, b.size);
    }
    else if (written == 0) {
        result = Py_NewRef(Py_None);
    }
    else {
        PyErr_NoMemory();
    }
    if (b.data != b.small) {
        PyMem_RawFree(b.data);
    }
    return result;
}

static PyObject *
envelope(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 15) {
        PyErr_SetString(PyExc_TypeError, "envelope() takes the 15 envelope fields in order");
        return NULL;
    }
    return envelope_object(args);
}


/* -- events (event.stored_event) ---------------------------------------------------------- */

#define EVENT_FIELDS 19

static PyTypeObject *event_cls = NULL;
static Py_ssize_t event_offsets[EVENT_FIELDS];

static PyObject *
bind_event(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
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
make_event(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
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
    /* Out of the cycle collector's sight (as CPython does for a tuple of atoms): every caller
       hands a payload that is a tree of JSON values (checked by canonical(), or decoded from
       stored bytes) and strings, ints and bytes beside it, so an event cannot be part of a
       reference cycle, and reference counting frees it. Tracked, the events waiting for the
       writer thread survived the young collections into the oldest generation, whose
       collections walk the whole heap. */
    PyObject_GC_UnTrack(obj);
    return obj;
}

/* -- JCS from stored bytes ------------------------------------------------------------------
 *
 * ``jcs(data)`` returns ``canonical(orjson.loads(data))``, the JCS form of stored JSON bytes,
 * in one pass over the bytes with no Python object built; or None wherever it is not certain
 * of that answer, and the caller then takes the Python path (which also names what is wrong).
 * It accepts strict RFC 8259 JSON only, in a narrow form: None for invalid UTF-8, a raw control
 * character, a lone surrogate, a duplicate key, a key with a character from U+E000 up (where
 * UTF-8 order is not JCS's UTF-16 order), an integer beyond +-(2^53 - 1), a number of more
 * than 40 characters, a fraction that rounds to zero or to an infinity, nesting deeper than
 * JCS_MAX_NEST, anything after the value. A verifier must not admit bytes that the reader a
 * replay serves from reads otherwise: tests/test_native.py holds this function to the Python
 * path over generated documents, spellings and byte mutations.
 */

#define JCS_MAX_NEST 60
#define JCS_OK 0
#define JCS_BAIL 1
#define JCS_ERROR (-1)

typedef struct {
    char *buf;
    Py_ssize_t len, cap;
} JcsBuffer;

typedef struct {
    const unsigned char *p, *end;
    JcsBuffer out;  /* the JCS bytes */
    JcsBuffer keys; /* the decoded keys of the objects open now, for sorting */
    int nest;
    int gil; /* whether the GIL is held: without it, a number that needs Python's float
                conversions is left to the Python path (JCS_BAIL) */
} Jcs;

typedef struct {
    Py_ssize_t key, key_len, seg, seg_len;
} Member;

static int
jcs_grow(JcsBuffer *b, Py_ssize_t more)
{
    Py_ssize_t need = b->len + more;
    if (need <= b->cap) {
        return JCS_OK;
    }
    Py_ssize_t cap = b->cap * 2 > need ? b->cap * 2 : need + 64;
    char *grown = PyMem_RawRealloc(b->buf, (size_t)cap);
    if (grown == NULL) {
        return JCS_ERROR; /* out of memory, no error set (see jcs_into) */
    }
    b->buf = grown;
    b->cap = cap;
    return JCS_OK;
}

static inline int
jcs_put(JcsBuffer *b, const void *data, Py_ssize_t n)
{
    if (b->len + n > b->cap && jcs_grow(b, n) != JCS_OK) {
        return JCS_ERROR;
    }
    memcpy(b->buf + b->len, data, (size_t)n);
    b->len += n;
    return JCS_OK;
}

static inline int
jcs_byte(JcsBuffer *b, char c)
{
    if (b->len + 1 > b->cap && jcs_grow(b, 1) != JCS_OK) {
        return JCS_ERROR;
    }
    b->buf[b->len++] = c;
    return JCS_OK;
}

static inline void
jcs_space(Jcs *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t')) {
        s->p++;
    }
}

static int jcs_value(Jcs *s);

static int
hex4(const unsigned char *p, unsigned int *cp)
{
    unsigned int v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') {
            v |= (unsigned int)(c - '0');
        }
        else if (c >= 'a' && c <= 'f') {
            v |= (unsigned int)(c - 'a' + 10);
        }
        else if (c >= 'A' && c <= 'F') {
            v |= (unsigned int)(c - 'A' + 10);
        }
        else {
            return JCS_BAIL;
        }
    }
    *cp = v;
    return JCS_OK;
}

/* The length of the valid UTF-8 sequence at p (a lead byte >= 0x80), or 0. */
static inline int
utf8_length(const unsigned char *p, const unsigned char *end)
{
    unsigned char c = p[0];
    Py_ssize_t left = end - p;
    if (c >= 0xC2 && c <= 0xDF) {
        return (left >= 2 && (p[1] & 0xC0) == 0x80) ? 2 : 0;
    }
    if (c >= 0xE0 && c <= 0xEF) {
        if (left < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) {
            return 0;
        }
        if ((c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] > 0x9F)) {
            return 0; /* overlong, or a surrogate */
        }
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (left < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 ||
            (p[3] & 0xC0) != 0x80) {
            return 0;
        }
        if ((c == 0xF0 && p[1] < 0x90) || (c == 0xF4 && p[1] > 0x8F)) {
            return 0; /* overlong, or past U+10FFFF */
        }
        return 4;
    }
    return 0;
}

/* A code point's UTF-8 bytes (a key's decoded form, which is sorted, never written). */
static int
put_utf8(JcsBuffer *out, unsigned int cp)
{
    char tmp[4];
    Py_ssize_t n;
    if (cp < 0x80) {
        tmp[0] = (char)cp;
        n = 1;
    }
    else if (cp < 0x800) {
        tmp[0] = (char)(0xC0 | (cp >> 6));
        tmp[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    }
    else if (cp < 0x10000) {
        tmp[0] = (char)(0xE0 | (cp >> 12));
        tmp[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        tmp[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    }
    else {
        tmp[0] = (char)(0xF0 | (cp >> 18));
        tmp[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        tmp[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        tmp[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    return jcs_put(out, tmp, n);
}

/* A code point as JCS writes it in a string: an escape for '"', '\\' and the controls, else
 * its UTF-8 bytes. */
static int
put_code_point(JcsBuffer *out, unsigned int cp)
{
    if (cp >= 0x20 && cp != '"' && cp != '\\') {
        return put_utf8(out, cp);
    }
    static const char hex[] = "0123456789abcdef";
    char tmp[6] = {'\\', 'u', '0', '0', hex[cp >> 4], hex[cp & 15]};
    Py_ssize_t n = 2;
    switch (cp) {
    case '"': tmp[1] = '"'; break;
    case '\\': tmp[1] = '\\'; break;
    case '\b': tmp[1] = 'b'; break;
    case '\f': tmp[1] = 'f'; break;
    case '\n': tmp[1] = 'n'; break;
    case '\r': tmp[1] = 'r'; break;
    case '\t': tmp[1] = 't'; break;
    default: n = 6;
    }
    return jcs_put(out, tmp, n);
}

/* Past the bytes from p that a string holds as they are (ASCII from 0x20, not '"' or '\\'),
 * eight at a time while none of them is another byte. */
static inline const unsigned char *
plain_run(const unsigned char *p, const unsigned char *end)
{
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    while (end - p >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        uint64_t quote = w ^ (ones * '"'), slash = w ^ (ones * '\\');
        uint64_t special = ((w - ones * 0x20) | (quote - ones) | (slash - ones) | w) & highs;
        if (special) {
            break; /* one of these eight bytes may be special: byte by byte from here */
        }
        p += 8;
    }
    while (p < end && *p >= 0x20 && *p != '"' && *p != '\\' && *p < 0x80) {
        p++;
    }
    return p;
}

/* The string at s->p (its opening quote) in JCS form onto s->out; when ``keys`` is given, its
 * decoded UTF-8 bytes onto it too (for sorting), refusing a character from U+E000 up. */
static int
jcs_string(Jcs *s, JcsBuffer *keys)
{
    const unsigned char *p = s->p + 1, *end = s->end;
    if (jcs_byte(&s->out, '"') != JCS_OK) {
        return JCS_ERROR;
    }
    for (;;) {
        const unsigned char *run = p;
        p = plain_run(p, end);
        while (p < end && *p >= 0x80) { /* a run that may hold multi-byte characters */
            int n = utf8_length(p, end);
            if (n == 0 || (keys != NULL && *p >= 0xEE)) {
                return JCS_BAIL;
            }
            p = plain_run(p + n, end);
        }
        if (p > run) {
            if (jcs_put(&s->out, run, p - run) != JCS_OK ||
                (keys != NULL && jcs_put(keys, run, p - run) != JCS_OK)) {
                return JCS_ERROR;
            }
        }
        if (p >= end || *p < 0x20) {
            return JCS_BAIL; /* unterminated, or a raw control character */
        }
        if (*p == '"') {
            s->p = p + 1;
            return jcs_byte(&s->out, '"');
        }
        /* an escape */
        if (p + 1 >= end) {
            return JCS_BAIL;
        }
        unsigned int cp;
        switch (p[1]) {
        case '"': cp = '"'; p += 2; break;
        case '\\': cp = '\\'; p += 2; break;
        case '/': cp = '/'; p += 2; break;
        case 'b': cp = '\b'; p += 2; break;
        case 'f': cp = '\f'; p += 2; break;
        case 'n': cp = '\n'; p += 2; break;
        case 'r': cp = '\r'; p += 2; break;
        case 't': cp = '\t'; p += 2; break;
        case 'u':
            if (end - p < 6 || hex4(p + 2, &cp) != JCS_OK) {
                return JCS_BAIL;
            }
            p += 6;
            if (cp >= 0xDC00 && cp <= 0xDFFF) {
                return JCS_BAIL; /* a lone low surrogate */
            }
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned int low;
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, &low) != JCS_OK ||
                    low < 0xDC00 || low > 0xDFFF) {
                    return JCS_BAIL; /* a lone high surrogate */
                }
                p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            }
            break;
        default:
            return JCS_BAIL;
        }
        if (keys != NULL) {
            if (cp >= 0xE000) {
                return JCS_BAIL;
            }
            if (put_utf8(keys, cp) != JCS_OK) {
                return JCS_ERROR;
            }
        }
        if (put_code_point(&s->out, cp) != JCS_OK) {
            return JCS_ERROR;
        }
    }
}

/* ECMAScript's Number.prototype.toString given the shortest round-trip digits of a non-zero
 * double (no leading or trailing zero; k of them), the position of its decimal point and its
 * sign: the formatting half of canonical.es6_number. */
static int
put_es6_digits(JcsBuffer *out, const char *digits, int k, int point, int negative)
{
    char buf[96];
    int n = 0;
    if (k <= 0 || k > 40 || point > 400 || point < -400) {
        return JCS_BAIL;
    }
    if (negative) {
        buf[n++] = '-';
    }
    if (k <= point && point <= 21) {
        memcpy(buf + n, digits, (size_t)k);
        n += k;
        for (int i = k; i < point; i++) {
            buf[n++] = '0';
        }
    }
    else if (0 < point && point <= 21) {
        memcpy(buf + n, digits, (size_t)point);
        n += point;
        buf[n++] = '.';
        memcpy(buf + n, digits + point, (size_t)(k - point));
        n += k - point;
    }
    else if (-6 < point && point <= 0) {
        buf[n++] = '0';
        buf[n++] = '.';
        for (int i = 0; i < -point; i++) {
            buf[n++] = '0';
        }
        memcpy(buf + n, digits, (size_t)k);
        n += k;
    }
    else {
        int e = point - 1;
        buf[n++] = digits[0];
        if (k > 1) {
            buf[n++] = '.';
            memcpy(buf + n, digits + 1, (size_t)(k - 1));
            n += k - 1;
        }
        n += snprintf(buf + n, sizeof(buf) - (size_t)n, "e%c%d", e >= 0 ? '+' : '-', abs(e));
    }
    return jcs_put(out, buf, n);
}

/* Number.prototype.toString of a finite, non-zero double (canonical.es6_number): the shortest
 * round-trip digits from Python's repr, then put_es6_digits. */
static int
put_es6_number(JcsBuffer *out, double value)
{
    char digits[32];
    int k = 0, seen_point = 0, exponent = 0, intlen = 0;
    char *text = PyOS_double_to_string(fabs(value), 'r', 0, 0, NULL);
    if (text == NULL) {
        return JCS_ERROR;
    }
    const char *c = text;
    for (; *c && *c != 'e' && *c != 'E'; c++) {
        if (*c == '.') {
            seen_point = 1;
            continue;
        }
        if (*c < '0' || *c > '9' || k >= (int)sizeof(digits) - 1) {
            PyMem_Free(text);
            return JCS_BAIL;
        }
        digits[k++] = *c;
        if (!seen_point) {
            intlen++;
        }
    }
    if (*c == 'e' || *c == 'E') {
        exponent = atoi(c + 1);
    }
    PyMem_Free(text);
    int point = intlen + exponent, lead = 0;
    while (lead < k && digits[lead] == '0') {
        lead++;
    }
    point -= lead;
    k -= lead;
    while (k > 0 && digits[lead + k - 1] == '0') {
        k--;
    }
    return put_es6_digits(out, digits + lead, k, point, value < 0);
}

static int
jcs_number(Jcs *s)
{
    const unsigned char *start = s->p, *p = s->p, *end = s->end;
    int integral = 1, nonzero = 0, exponent_part = 0;
    if (*p == '-') {
        p++;
    }
    const unsigned char *first = p;
    if (p < end && *p == '0') {
        p++;
    }
    else if (p < end && *p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9') {
            nonzero |= *p != '0';
            p++;
        }
    }
    else {
        return JCS_BAIL;
    }
    Py_ssize_t int_digits = p - first;
    if (p < end && *p == '.') {
        integral = 0;
        p++;
        if (p >= end || *p < '0' || *p > '9') {
            return JCS_BAIL;
        }
        while (p < end && *p >= '0' && *p <= '9') {
            nonzero |= *p != '0';
            p++;
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        integral = 0;
        exponent_part = 1;
        p++;
        if (p < end && (*p == '+' || *p == '-')) {
            p++;
        }
        if (p >= end || *p < '0' || *p > '9') {
            return JCS_BAIL;
        }
        while (p < end && *p >= '0' && *p <= '9') {
            p++;
        }
    }
    Py_ssize_t len = p - start;
    if (len > 40) {
        return JCS_BAIL;
    }
    s->p = p;
    if (integral) {
        if (int_digits > 16) {
            return JCS_BAIL;
        }
        long long v = 0;
        for (const unsigned char *d = first; d < p; d++) {
            v = v * 10 + (*d - '0');
        }
        if (v > MAX_SAFE_INTEGER) {
            return JCS_BAIL;
        }
        if (v == 0) {
            return jcs_byte(&s->out, '0'); /* "-0" is the integer 0 */
        }
        return jcs_put(&s->out, start, len);
    }
    if (!exponent_part) {
        /* A decimal fraction of at most 15 significant digits within +-1e40 is a normal double
         * whose shortest round-trip digits are its own (DBL_DIG is 15): format them as they
         * are, without a conversion either way. */
        char digits[48];
        int k = 0, point = (int)int_digits, leading = 1;
        for (const unsigned char *d = first; d < p; d++) {
            if (*d == '.') {
                continue;
            }
            if (leading && *d == '0') {
                point--;
                continue;
            }
            leading = 0;
            digits[k++] = (char)*d;
        }
        while (k > 0 && digits[k - 1] == '0') {
            k--;
        }
        if (k == 0) {
            return jcs_byte(&s->out, '0'); /* 0.0 and -0.0 */
        }
        if (k <= 15) {
            return put_es6_digits(&s->out, digits, k, point, *start == '-');
        }
    }
    if (!s->gil) {
        return JCS_BAIL; /* Python's conversions need the GIL: the caller's GIL path decides */
    }
    char text[48];
    memcpy(text, start, (size_t)len);
    text[len] = '\0';
    char *stop = NULL;
    double value = PyOS_string_to_double(text, &stop, NULL);
    if (value == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return JCS_BAIL;
    }
    if (stop != text + len || !isfinite(value)) {
        return JCS_BAIL;
    }
    if (value == 0.0) {
        if (nonzero) {
            return JCS_BAIL; /* a fraction that underflows to zero */
        }
        return jcs_byte(&s->out, '0');
    }
    return put_es6_number(&s->out, value);
}

static int
jcs_literal(Jcs *s, const char *word, Py_ssize_t n)
{
    if (s->end - s->p < n || memcmp(s->p, word, (size_t)n) != 0) {
        return JCS_BAIL;
    }
    s->p += n;
    return jcs_put(&s->out, word, n);
}

/* the keys buffer while members are sorted: one per thread (verify_start's checks run without
   the GIL) */
#if defined(_MSC_VER)
static __declspec(thread) const char *member_keys;
#else
static _Thread_local const char *member_keys;
#endif

static int
member_order(const void *a, const void *b)
{
    const Member *x = a, *y = b;
    Py_ssize_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
    int c = memcmp(member_keys + x->key, member_keys + y->key, (size_t)n);
    if (c != 0) {
        return c;
    }
    return x->key_len < y->key_len ? -1 : (x->key_len > y->key_len ? 1 : 0);
}

static int
jcs_object(Jcs *s)
{
    Member stack[16];
    Member *members = stack;
    Py_ssize_t count = 0, cap = 16;
    Py_ssize_t keys_start = s->keys.len;
    int rc = JCS_BAIL, sorted = 1;
    char *copy = NULL;
    s->p++;
    if (jcs_byte(&s->out, '{') != JCS_OK) {
        return JCS_ERROR;
    }
    Py_ssize_t body = s->out.len;
    jcs_space(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        return jcs_byte(&s->out, '}');
    }
    for (;;) {
        jcs_space(s);
        if (s->p >= s->end || *s->p != '"') {
            goto done;
        }
        if (count == cap) {
            Member *grown = PyMem_RawMalloc((size_t)(cap * 2) * sizeof(Member));
            if (grown == NULL) {
                rc = JCS_ERROR;
                goto done;
            }
            memcpy(grown, members, (size_t)count * sizeof(Member));
            if (members != stack) {
                PyMem_RawFree(members);
            }
            members = grown;
            cap *= 2;
        }
        Member *m = &members[count];
        m->seg = s->out.len;
        m->key = s->keys.len;
        rc = jcs_string(s, &s->keys);
        if (rc != JCS_OK) {
            goto done;
        }
        m->key_len = s->keys.len - m->key;
        jcs_space(s);
        if (s->p >= s->end || *s->p != ':') {
            rc = JCS_BAIL;
            goto done;
        }
        s->p++;
        if (jcs_byte(&s->out, ':') != JCS_OK) {
            rc = JCS_ERROR;
            goto done;
        }
        rc = jcs_value(s);
        if (rc != JCS_OK) {
            goto done;
        }
        m->seg_len = s->out.len - m->seg;
        if (count > 0) {
            member_keys = s->keys.buf;
            int c = member_order(&members[count - 1], m);
            if (c == 0) {
                rc = JCS_BAIL; /* a duplicate key */
                goto done;
            }
            sorted &= c < 0;
        }
        count++;
        jcs_space(s);
        if (s->p < s->end && *s->p == ',') {
            s->p++;
            if (jcs_byte(&s->out, ',') != JCS_OK) {
                rc = JCS_ERROR;
                goto done;
            }
            continue;
        }
        if (s->p < s->end && *s->p == '}') {
            s->p++;
            break;
        }
        rc = JCS_BAIL;
        goto done;
    }
    if (!sorted) {
        member_keys = s->keys.buf;
        if (count <= 16) {
            for (Py_ssize_t i = 1; i < count; i++) {
                Member m = members[i];
                Py_ssize_t j = i;
                while (j > 0 && member_order(&members[j - 1], &m) > 0) {
                    members[j] = members[j - 1];
                    j--;
                }
                members[j] = m;
            }
        }
        else {
            qsort(members, (size_t)count, sizeof(Member), member_order);
        }
        for (Py_ssize_t i = 1; i < count; i++) {
            if (member_order(&members[i - 1], &members[i]) == 0) {
                rc = JCS_BAIL;
                goto done;
            }
        }
        Py_ssize_t size = s->out.len - body;
        copy = PyMem_RawMalloc((size_t)size);
        if (copy == NULL) {
            rc = JCS_ERROR;
            goto done;
        }
        memcpy(copy, s->out.buf + body, (size_t)size);
        char *w = s->out.buf + body;
        for (Py_ssize_t i = 0; i < count; i++) {
            if (i > 0) {
                *w++ = ',';
            }
            memcpy(w, copy + (members[i].seg - body), (size_t)members[i].seg_len);
            w += members[i].seg_len;
        }
    }
    rc = jcs_byte(&s->out, '}');
done:
    s->keys.len = keys_start;
    if (members != stack) {
        PyMem_RawFree(members);
    }
    PyMem_RawFree(copy);
    return rc;
}

static int
jcs_array(Jcs *s)
{
    s->p++;
    if (jcs_byte(&s->out, '[') != JCS_OK) {
        return JCS_ERROR;
    }
    jcs_space(s);
    if (s->p < s->end && *s->p == ']') {
        s->p++;
        return jcs_byte(&s->out, ']');
    }
    for (;;) {
        int rc = jcs_value(s);
        if (rc != JCS_OK) {
            return rc;
        }
        jcs_space(s);
        if (s->p < s->end && *s->p == ',') {
            s->p++;
            if (jcs_byte(&s->out, ',') != JCS_OK) {
                return JCS_ERROR;
            }
            continue;
        }
        if (s->p < s->end && *s->p == ']') {
            s->p++;
            return jcs_byte(&s->out, ']');
        }
        return JCS_BAIL;
    }
}

static int
jcs_value(Jcs *s)
{
    jcs_space(s);
    if (s->p >= s->end) {
        return JCS_BAIL;
    }
    int rc;
    switch (*s->p) {
    case '{':
    case '[':
        if (++s->nest > JCS_MAX_NEST) {
            return JCS_BAIL;
        }
        rc = *s->p == '{' ? jcs_object(s) : jcs_array(s);
        s->nest--;
        return rc;
    case '"':
        return jcs_string(s, NULL);
    case 't':
        return jcs_literal(s, "true", 4);
    case 'f':
        return jcs_literal(s, "false", 5);
    case 'n':
        return jcs_literal(s, "null", 4);
    default:
        if (*s->p == '-' || (*s->p >= '0' && *s->p <= '9')) {
            return jcs_number(s);
        }
        return JCS_BAIL;
    }
}

/* The JCS form of ``size`` bytes at ``data`` into ``out`` (which the caller frees with
 * PyMem_RawFree, whatever the answer): JCS_OK, JCS_BAIL where jcs() steps aside, or
 * JCS_ERROR. With ``gil`` the GIL is held, and an error is set (out of memory, or Python's
 * float conversion's own). Without, JCS_ERROR is out of memory, nothing is set, and a number
 * that needs Python's float conversions is JCS_BAIL. */
static int
jcs_into(const unsigned char *data, Py_ssize_t size, JcsBuffer *out, int gil)
{
    Jcs s;
    s.p = data;
    s.end = data + size;
    s.nest = 0;
    s.gil = gil;
    s.out.len = 0;
    s.out.cap = size + 64;
    s.out.buf = PyMem_RawMalloc((size_t)s.out.cap);
    s.keys.len = 0;
    s.keys.cap = 256;
    s.keys.buf = PyMem_RawMalloc((size_t)s.keys.cap);
    int rc = JCS_ERROR;
    if (s.out.buf != NULL && s.keys.buf != NULL) {
        rc = jcs_value(&s);
        if (rc == JCS_OK) {
            jcs_space(&s);
            rc = s.p == s.end ? JCS_OK : JCS_BAIL;
        }
    }
    PyMem_RawFree(s.keys.buf);
    if (rc == JCS_ERROR && gil && !PyErr_Occurred()) {
        PyErr_NoMemory();
    }
    *out = s.out;
    return rc;
}

/* The JCS form of size bytes at data, as a new bytes object; None where jcs() steps aside;
 * NULL on error. */
static PyObject *
jcs_bytes(const unsigned char *data, Py_ssize_t size)
{
    JcsBuffer out;
    int rc = jcs_into(data, size, &out, 1);
    PyObject *result = NULL;
    if (rc == JCS_OK) {
        result = PyBytes_FromStringAndSize(out.buf, out.len);
    }
    else if (rc == JCS_BAIL) {
        result = Py_NewRef(Py_None);
    }
    PyMem_RawFree(out.buf);
    return result;
}

static PyObject *
jcs(PyObject *Py_UNUSED(module), PyObject *data)
{
    if (!PyBytes_CheckExact(data)) {
        PyErr_SetString(PyExc_TypeError, "jcs() takes bytes");
        return NULL;
    }
    return jcs_bytes((const unsigned char *)PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data));
}


/* -- one stored row verified (verify.LineChecker._feed_plain) ----------------------------------
 *
 * ``verify_row(row, prev, pos, run_id, tenant)`` returns the row's stored hash when every check
 * of ``_feed_plain``'s common case passes: the row is plainly well formed (``row_plain``), its
 * seq is ``pos``, its prev_hash is ``prev`` (None exactly at position 0), its run and tenant
 * are ``run_id`` and ``tenant``, the SHA-256 of its envelope is its hash, and the salted
 * SHA-256 of its payload's JCS form (``jcs``) is its payload digest. Otherwise None: the
 * Python path then checks the row again and reports what is wrong. It never says more than
 * "all passed", so that a row it cannot vouch for always gets the full check. The SHA-256 is
 * hashlib's (``bind_hash``).
 */

static PyObject *sha256_fn = NULL;
static PyObject *one_object = NULL; /* the envelope's v, taken once in bind_hash or bind_fresh */

static PyObject *
bind_hash(PyObject *Py_UNUSED(module), PyObject *fn)
{
    if (!PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "bind_hash(fn): hashlib.sha256");
        return NULL;
    }
    Py_XSETREF(sha256_fn, Py_NewRef(fn));
    if (one_object == NULL && (one_object = PyLong_FromLong(1)) == NULL) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* -- SHA-256 ---------------------------------------------------------------------------------
 *
 * hashlib's ``sha256`` (bound above) costs a hash object, a context copy and a result object
 * per digest: on the short envelopes and payloads of most events, as much as the hashing. So
 * where hashlib runs on a shared OpenSSL libcrypto, ``bind_sha256(path)`` takes that library's
 * ``SHA256_Init``, ``SHA256_Update`` and ``SHA256_Final`` (dlopen with RTLD_NOLOAD: only a
 * library already loaded, never a new one) and, once they have given two known answers of
 * FIPS 180-2, the digests below use them over a context on the stack: the same SHA-256 as
 * hashlib's, without the objects. (OpenSSL 3's one-shot ``SHA256`` looks the algorithm up on
 * every call, which costs as much as hashlib.) ``bind_sha256(None)``, or a library without
 * them, leaves the digests to hashlib. Data of 2 KiB or more is hashed with the GIL released,
 * as hashlib does.
 */

typedef int (*sha256_init_fn)(void *);
typedef int (*sha256_update_fn)(void *, const void *, size_t);
typedef int (*sha256_final_fn)(unsigned char *, void *);

typedef struct {
    sha256_init_fn init;
    sha256_update_fn update;
    sha256_final_fn final;
} Sha256Api;

static Sha256Api sha256_api = {NULL, NULL, NULL}; /* all three, or none */
#ifdef HAVE_DLFCN
static void *sha256_handle = NULL; /* the library they came from, held while they are bound */
#endif
static PyObject *digest_name = NULL;              /* "digest", interned */

#define SHA256_GIL_MINSIZE 2048

/* SHA256_CTX is 112 bytes in OpenSSL (eight hash words, two length words, a 64-byte block,
   two counts), and in LibreSSL and BoringSSL alike: the context below has room to spare */
static int
sha256_finish(const Sha256Api *api, uint64_t *ctx, const unsigned char *d, size_t n,
              unsigned char *md)
{
    /* ``ctx`` goes on with ``d``, then gives its digest; the GIL is released from 2 KiB
       (``d`` is the bytes of an object the caller holds), as hashlib does */
    int ok;
    if (n >= SHA256_GIL_MINSIZE) {
        Py_BEGIN_ALLOW_THREADS
        ok = api->update(ctx, d, n) == 1 && api->final(md, ctx) == 1;
        Py_END_ALLOW_THREADS
    } else {
        ok = api->update(ctx, d, n) == 1 && api->final(md, ctx) == 1;
    }
    return ok;
}

static int
sha256_with(const Sha256Api *api, const unsigned char *d, size_t n, unsigned char *md)
{
    uint64_t ctx[32]; /* 256 bytes, aligned for the context's 32-bit words */
    return api->init(ctx) == 1 && sha256_finish(api, ctx, d, n, md);
}

#ifdef HAVE_DLFCN
static int
sha256_known_answers(const Sha256Api *api)
{
    static const unsigned char abc[32] = {
        0xba, 0x78, 0x16, 0xbf, 0x8f, 0x01, 0xcf, 0xea, 0x41, 0x41, 0x40, 0xde, 0x5d, 0xae, 0x22, 0x23,
        0xb0, 0x03, 0x61, 0xa3, 0x96, 0x17, 0x7a, 0x9c, 0xb4, 0x10, 0xff, 0x61, 0xf2, 0x00, 0x15, 0xad};
    static const unsigned char two_blocks[32] = {
        0x24, 0x8d, 0x6a, 0x61, 0xd2, 0x06, 0x38, 0xb8, 0xe5, 0xc0, 0x26, 0x93, 0x0c, 0x3e, 0x60, 0x39,
        0xa3, 0x3c, 0xe4, 0x59, 0x64, 0xff, 0x21, 0x67, 0xf6, 0xec, 0xed, 0xd4, 0x19, 0xdb, 0x06, 0xc1};
    static const char *long_text = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    unsigned char out[32];
    return sha256_with(api, (const unsigned char *)"abc", 3, out) && memcmp(out, abc, 32) == 0 &&
           sha256_with(api, (const unsigned char *)long_text, strlen(long_text), out) &&
           memcmp(out, two_blocks, 32) == 0;
}
#endif

static PyObject *
bind_sha256(PyObject *Py_UNUSED(module), PyObject *path)
{
    if (path == Py_None) {
        sha256_api = (Sha256Api){NULL, NULL, NULL};
#ifdef HAVE_DLFCN
        if (sha256_handle != NULL) {
            dlclose(sha256_handle);
            sha256_handle = NULL;
        }
#endif
        Py_RETURN_FALSE;
    }
    if (!PyUnicode_Check(path)) {
        PyErr_SetString(PyExc_TypeError, "bind_sha256(path): the libcrypto file, or None");
        return NULL;
    }
#ifdef HAVE_DLFCN
    PyObject *file = PyUnicode_EncodeFSDefault(path);
    if (file == NULL) {
        return NULL;
    }
    /* never loads a library, only finds one this process has (hashlib's) */
    void *handle = dlopen(PyBytes_AS_STRING(file), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    Py_DECREF(file);
    if (handle == NULL) {
        Py_RETURN_FALSE;
    }
    Sha256Api api = {
        (sha256_init_fn)dlsym(handle, "SHA256_Init"),
        (sha256_update_fn)dlsym(handle, "SHA256_Update"),
        (sha256_final_fn)dlsym(handle, "SHA256_Final"),
    };
    if (api.init == NULL || api.update == NULL || api.final == NULL ||
        !sha256_known_answers(&api)) {
        dlclose(handle);
        Py_RETURN_FALSE; /* the binding in place, if any, stays */
    }
    sha256_api = api;
    if (sha256_handle != NULL) {
        dlclose(sha256_handle); /* the library stays loaded: hashlib's, and this handle's */
    }
    sha256_handle = handle;
    Py_RETURN_TRUE;
#else
    Py_RETURN_FALSE;
#endif
}

/* SHA-256 of the bytes ``data`` into ``out``: 0, or -1 with an exception set */
static int
sha256_digest(PyObject *data, unsigned char out[32])
{
    Sha256Api api = sha256_api; /* a copy: bind_sha256 may run while the GIL is released */
    if (api.init != NULL && PyBytes_Check(data)) {
        if (!sha256_with(&api, (const unsigned char *)PyBytes_AS_STRING(data),
                         (size_t)PyBytes_GET_SIZE(data), out)) {
            PyErr_SetString(PyExc_RuntimeError, "OpenSSL's SHA-256 failed");
            return -1;
        }
        return 0;
    }
    if (digest_name == NULL && (digest_name = PyUnicode_InternFromString("digest")) == NULL) {
        return -1;
    }
    PyObject *h = PyObject_CallOneArg(sha256_fn, data);
    if (h == NULL) {
        return -1;
    }
    PyObject *d = PyObject_CallMethodNoArgs(h, digest_name);
    Py_DECREF(h);
    if (d == NULL) {
        return -1;
    }
    if (!PyBytes_Check(d) || PyBytes_GET_SIZE(d) != 32) {
        Py_DECREF(d);
        PyErr_SetString(PyExc_TypeError, "the bound sha256 must give a 32-byte digest");
        return -1;
    }
    memcpy(out, PyBytes_AS_STRING(d), 32);
    Py_DECREF(d);
    return 0;
}

static const char hex_digits[] = "0123456789abcdef";

/* the ``n`` bytes of ``d`` as 2n lowercase hex characters at ``w`` */
static void
hex_into(char *w, const unsigned char *d, int n)
{
    for (int i = 0; i < n; i++) {
        w[2 * i] = hex_digits[d[i] >> 4];
        w[2 * i + 1] = hex_digits[d[i] & 15];
    }
}

/* SHA-256 of ``head_size`` bytes at ``head`` then ``size`` bytes at ``data`` (buffers the
 * caller owns: no bytes object is made for them where OpenSSL is bound) into ``out``: 0, or
 * -1 with an exception set. */
static int
sha256_parts(const char *head, Py_ssize_t head_size, const char *data, Py_ssize_t size,
             unsigned char out[32])
{
    Sha256Api api = sha256_api;
    if (api.init != NULL) {
        uint64_t ctx[32];
        if (api.init(ctx) != 1 || api.update(ctx, head, (size_t)head_size) != 1 ||
            !sha256_finish(&api, ctx, (const unsigned char *)data, (size_t)size, out)) {
            PyErr_SetString(PyExc_RuntimeError, "OpenSSL's SHA-256 failed");
            return -1;
        }
        return 0;
    }
    PyObject *joined = PyBytes_FromStringAndSize(NULL, head_size + size);
    if (joined == NULL) {
        return -1;
    }
    memcpy(PyBytes_AS_STRING(joined), head, (size_t)head_size);
    memcpy(PyBytes_AS_STRING(joined) + head_size, data, (size_t)size);
    int rc = sha256_digest(joined, out);
    Py_DECREF(joined);
    return rc;
}

/* SHA-256 of the envelope of the 15 values ``args`` (SPEC order) into ``d``, hashed in the
 * buffer it is written into (no bytes object): 1, or 0 for a value not handled here (the
 * Python path decides), or -1 with an exception set. The GIL is held. */
static int
envelope_digest(PyObject *const *args, unsigned char d[32])
{
    Field fields[15];
    envelope_fields(args, fields);
    Buffer b;
    b.data = b.small;
    b.size = 0;
    b.capacity = (Py_ssize_t)sizeof b.small;
    int written = envelope_into(&b, fields);
    if (written < 0) {
        PyErr_NoMemory();
    }
    else if (written > 0 && sha256_parts("", 0, b.data, b.size, d) < 0) {
        written = -1;
    }
    if (b.data != b.small) {
        PyMem_RawFree(b.data);
    }
    return written;
}

/* -- the keyed hash of a call's key (seal._KeyHash) ------------------------------------------
 *
 * ``hmac_pads(key)``: RFC 2104's inner and outer SHA-256 contexts, each already fed ``key``
 * (the secret as one 64-byte block, as _KeyHash derives it) XOR its pad, as two bytes objects (opaque: only ``hmac16`` in this process reads them), or
 * None where OpenSSL's SHA-256 is not bound. ``hmac16(inner, outer, data)``: the first 16 hex
 * of HMAC-SHA256(secret, data) from them, or None where it is not bound (the caller then takes
 * hashlib's path). The same keying once per run as _KeyHash's, without a hash object per step.
 */

#define SHA256_CTX_ROOM ((Py_ssize_t)sizeof(uint64_t[32]))

static PyObject *
hmac_pads(PyObject *Py_UNUSED(module), PyObject *block)
{
    if (!PyBytes_Check(block) || PyBytes_GET_SIZE(block) != 64) {
        PyErr_SetString(PyExc_TypeError, "hmac_pads(key): the secret as a 64-byte block");
        return NULL;
    }
    Sha256Api api = sha256_api;
    if (api.init == NULL) {
        Py_RETURN_NONE;
    }
    const unsigned char *key = (const unsigned char *)PyBytes_AS_STRING(block);
    PyObject *pads[2] = {NULL, NULL};
    for (int which = 0; which < 2; which++) {
        unsigned char pad[64];
        for (int i = 0; i < 64; i++) {
            pad[i] = (unsigned char)(key[i] ^ (which == 0 ? 0x36 : 0x5c));
        }
        uint64_t ctx[32];
        if (api.init(ctx) != 1 || api.update(ctx, pad, 64) != 1) {
            Py_XDECREF(pads[0]);
            PyErr_SetString(PyExc_RuntimeError, "OpenSSL's SHA-256 failed");
            return NULL;
        }
        pads[which] = PyBytes_FromStringAndSize((const char *)ctx, SHA256_CTX_ROOM);
        if (pads[which] == NULL) {
            Py_XDECREF(pads[0]);
            return NULL;
        }
    }
    return Py_BuildValue("(NN)", pads[0], pads[1]);
}

/* HMAC-SHA256 over args[2] into ``out`` from hmac_pads' two contexts (args[0], args[1]): 1; 0
 * when no compiled SHA-256 is bound (the caller returns None); -1 with TypeError(``usage``)
 * when ``shape_ok`` (the caller's own checks) is false or the three are not bytes with contexts
 * of SHA256_CTX_ROOM, or with RuntimeError when OpenSSL fails. */
static int
hmac_of_args(PyObject *const *args, int shape_ok, const char *usage, unsigned char out[32])
{
    if (!shape_ok || !PyBytes_Check(args[0]) || !PyBytes_Check(args[1]) ||
        !PyBytes_Check(args[2]) || PyBytes_GET_SIZE(args[0]) != SHA256_CTX_ROOM ||
        PyBytes_GET_SIZE(args[1]) != SHA256_CTX_ROOM) {
        PyErr_SetString(PyExc_TypeError, usage);
        return -1;
    }
    Sha256Api api = sha256_api;
    if (api.init == NULL) {
        return 0;
    }
    uint64_t ctx[32];
    unsigned char inner[32];
    memcpy(ctx, PyBytes_AS_STRING(args[0]), sizeof ctx);
    int ok = sha256_finish(&api, ctx, (const unsigned char *)PyBytes_AS_STRING(args[2]),
                           (size_t)PyBytes_GET_SIZE(args[2]), inner);
    memcpy(ctx, PyBytes_AS_STRING(args[1]), sizeof ctx);
    ok = ok && sha256_finish(&api, ctx, inner, 32, out);
    if (!ok) {
        PyErr_SetString(PyExc_RuntimeError, "OpenSSL's SHA-256 failed");
        return -1;
    }
    return 1;
}

static PyObject *
hmac16(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    unsigned char outer[32];
    int done = hmac_of_args(args, nargs == 3,
                            "hmac16(inner, outer, data): hmac_pads' two, then bytes", outer);
    if (done <= 0) {
        return done < 0 ? NULL : Py_NewRef(Py_None);
    }
    PyObject *out = PyUnicode_New(16, 127);
    if (out != NULL) {
        hex_into((char *)PyUnicode_1BYTE_DATA(out), outer, 8);
    }
    return out;
}

/* sha256(data) -> the 32 bytes, by the path the digests above take (for the tests) */
static PyObject *
sha256_py(PyObject *Py_UNUSED(module), PyObject *data)
{
    if (!PyBytes_Check(data)) {
        PyErr_SetString(PyExc_TypeError, "sha256(data): bytes");
        return NULL;
    }
    if (sha256_fn == NULL && sha256_api.init == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "sha256(): bind_hash() was not called");
        return NULL;
    }
    unsigned char d[32];
    if (sha256_digest(data, d) < 0) {
        return NULL;
    }
    return PyBytes_FromStringAndSize((const char *)d, 32);
}

static int
hex_value(char c)
{
    return c <= '9' ? c - '0' : c - 'a' + 10;
}

/* -- the checks of one row, with or without the GIL --------------------------------------- */

#define V_PASS 1
#define V_BAIL 0      /* not vouched for: the Python path checks it again */
#define V_ERROR (-1)  /* an error is set (only with the GIL) */
#define V_NOMEM (-2)  /* out of memory, nothing set */
#define V_SHAFAIL (-3) /* OpenSSL's SHA-256 failed, nothing set */

/* 1 when "sha256:" + the digest ``d`` in lowercase hex is the text of ``want`` (a field
 * row_plain_ok has checked to be such a string), else 0 */
static int
digest_is_field(const unsigned char d[32], const Field *want)
{
    if (want->kind != F_ASCII || want->n != 71) {
        return 0;
    }
    char hex[64];
    hex_into(hex, d, 32);
    return memcmp(hex, want->s + 7, 64) == 0;
}

/* SHA-256 of ``hn`` bytes at ``head`` then ``n`` at ``data`` into ``out``: 0, or V_SHAFAIL, or
 * (with ``gil``, where ``api`` is not bound and hashlib's serves) V_ERROR with an error set.
 * Without the GIL ``api`` must be bound. */
static int
core_sha256(const Sha256Api *api, const char *head, Py_ssize_t hn, const char *data,
            Py_ssize_t n, unsigned char out[32], int gil)
{
    if (api->init != NULL) {
        uint64_t ctx[32];
        int ok = api->init(ctx) == 1 && api->update(ctx, head, (size_t)hn) == 1;
        if (ok && gil) {
            ok = sha256_finish(api, ctx, (const unsigned char *)data, (size_t)n, out);
        }
        else if (ok) {
            ok = api->update(ctx, data, (size_t)n) == 1 && api->final(out, ctx) == 1;
        }
        return ok ? 0 : V_SHAFAIL;
    }
    if (!gil) {
        return V_SHAFAIL;
    }
    return sha256_parts(head, hn, data, n, out) < 0 ? V_ERROR : 0;
}

/* verify_row's checks over the 17 fields of a stored row (StoredRow's order), read by
 * field_of: V_PASS when every check of ``_feed_plain``'s common case passes (see verify_row),
 * V_BAIL when the Python path must decide, or an error (V_ERROR only with ``gil``). Reads
 * nothing but the fields and the bytes they point into, so that it runs without the GIL when
 * ``gil`` is 0 (``api`` then bound). */
static int
verify_core(const Field *f, const Field *prev, Py_ssize_t pos, const Field *run_id,
            const Field *tenant, const Sha256Api *api, int gil)
{
    const Field *seq = &f[2], *digest = &f[12], *prev_hash = &f[13], *stored = &f[14];
    const Field *body = &f[15], *salt = &f[16];
    if (!row_plain_ok(f) || body->kind == F_NONE || salt->kind == F_NONE) {
        return V_BAIL;
    }
    if (seq->i != (long long)pos || (pos == 0 && prev_hash->kind != F_NONE)) {
        return V_BAIL;
    }
    if (!field_equal(prev_hash, prev) || !field_equal(&f[1], run_id) ||
        !field_equal(&f[0], tenant)) {
        return V_BAIL;
    }
    /* the envelope: v = 1, then the row's first 14 fields */
    Field fields[15];
    fields[0] = FIELD_ONE;
    memcpy(&fields[1], f, 14 * sizeof(Field));
    unsigned char d[32];
    Buffer b;
    b.data = b.small;
    b.size = 0;
    b.capacity = (Py_ssize_t)sizeof b.small;
    int written = envelope_into(&b, fields);
    int rc = written > 0 ? core_sha256(api, "", 0, b.data, b.size, d, gil)
                         : (written == 0 ? V_BAIL : V_NOMEM);
    if (b.data != b.small) {
        PyMem_RawFree(b.data);
    }
    if (rc != 0) {
        return rc; /* not handled here (the Python path decides), or an error */
    }
    if (!digest_is_field(d, stored)) {
        return V_BAIL;
    }
    /* the payload: SHA-256 of the salt's 16 bytes, then the JCS form of the stored bytes */
    char raw[16];
    for (int i = 0; i < 16; i++) {
        raw[i] = (char)(hex_value(salt->s[2 * i]) << 4 | hex_value(salt->s[2 * i + 1]));
    }
    JcsBuffer form;
    int formed = jcs_into((const unsigned char *)body->s, body->n, &form, gil);
    if (formed == JCS_OK) {
        rc = core_sha256(api, raw, 16, form.buf, form.len, d, gil);
    }
    else {
        /* None where jcs() steps aside (the Python path decides), or an error */
        rc = formed == JCS_BAIL ? V_BAIL : (gil ? V_ERROR : V_NOMEM);
    }
    PyMem_RawFree(form.buf);
    if (rc != 0) {
        return rc;
    }
    return digest_is_field(d, digest) ? V_PASS : V_BAIL;
}

/* verify_row's answer from verify_core's (the GIL held): the stored hash, None, or NULL */
static PyObject *
core_answer(int rc, PyObject *stored)
{
    switch (rc) {
    case V_PASS:
        return Py_NewRef(stored);
    case V_BAIL:
        Py_RETURN_NONE;
    case V_NOMEM:
        return PyErr_NoMemory();
    case V_SHAFAIL:
        PyErr_SetString(PyExc_RuntimeError, "OpenSSL's SHA-256 failed");
        return NULL;
    default:
        return NULL; /* V_ERROR: set */
    }
}

/* verify_row's checks over the 17 values of a stored row, in StoredRow's order */
static PyObject *
verify_fields(PyObject *const *values, PyObject *prev, Py_ssize_t pos, PyObject *run_id,
              PyObject *tenant)
{
    Field f[17], p, r, t;
    row_fields(values, f);
    field_of(prev, &p);
    field_of(run_id, &r);
    field_of(tenant, &t);
    Sha256Api api = sha256_api; /* a copy: bind_sha256 may run while the GIL is released */
    return core_answer(verify_core(f, &p, pos, &r, &t, &api, 1), values[14]);
}

static PyObject *
verify_row(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || !PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) != 17) {
        PyErr_SetString(PyExc_TypeError,
                        "verify_row(row, prev, pos, run_id, tenant): a 17-field stored row first");
        return NULL;
    }
    if (sha256_fn == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "verify_row(): bind_hash() was not called");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[2]);
    if (pos == -1 && PyErr_Occurred()) {
        return NULL;
    }
    return verify_fields(&PyTuple_GET_ITEM(args[0], 0), args[1], pos, args[3], args[4]);
}

/* The 17 values of a stored row from the slots of an event of the bound class (borrowed from
 * it): 1, or 0 when the Python path must decide (an unset slot, ``v`` other than the int 1,
 * no stored payload bytes: erased, or built in memory). */
static int
event_values(PyObject *event, PyObject **values)
{
    PyObject *slots[EVENT_FIELDS];
    for (int i = 0; i < EVENT_FIELDS; i++) {
        slots[i] = *(PyObject **)((char *)event + event_offsets[i]);
        if (slots[i] == NULL) {
            return 0; /* an unset slot: the Python path raises what it raises */
        }
    }
    /* v, then tenant .. hash (the row's first 15 fields), payload, salt, payload_bytes */
    int overflow = 0;
    if (!PyLong_CheckExact(slots[0]) || PyLong_AsLongAndOverflow(slots[0], &overflow) != 1 ||
        overflow != 0) {
        PyErr_Clear();
        return 0;
    }
    for (int i = 0; i < 15; i++) {
        values[i] = slots[i + 1];
    }
    values[15] = slots[18]; /* the stored bytes */
    values[16] = slots[17]; /* the salt */
    return values[15] != Py_None;
}

/* ``verify_event(event, prev, pos, run_id, tenant)``: ``verify_row`` of an instance of the
 * bound event class (bind_event), read from its slots, so that a loaded run is checked without
 * a row tuple built per event. None (the Python path decides) unless ``v`` is the int 1 and
 * the stored payload bytes are there. */
static PyObject *
verify_event_at(PyObject *event, PyObject *prev, Py_ssize_t pos, PyObject *run_id,
                PyObject *tenant)
{
    PyObject *values[17];
    if (!event_values(event, values)) {
        Py_RETURN_NONE;
    }
    return verify_fields(values, prev, pos, run_id, tenant);
}

static PyObject *
verify_event(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "verify_event(event, prev, pos, run_id, tenant)");
        return NULL;
    }
    if (sha256_fn == NULL || event_cls == NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "verify_event(): bind_hash() and bind_event() must be called first");
        return NULL;
    }
    if (!Py_IS_TYPE(args[0], event_cls)) {
        Py_RETURN_NONE;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[2]);
    if (pos == -1 && PyErr_Occurred()) {
        return NULL;
    }
    return verify_event_at(args[0], args[1], pos, args[3], args[4]);
}

/* The arguments ``(items, start, prev, pos, run_id, tenant)`` of ``name`` (verify_many,
 * verify_start): ``items`` a list, ``start`` and ``pos`` into ``*start`` and ``*pos``, neither
 * negative. 0, or -1 with an error set. */
static int
page_args(const char *name, PyObject *const *args, Py_ssize_t nargs, Py_ssize_t *start,
          Py_ssize_t *pos)
{
    if (nargs != 6 || !PyList_CheckExact(args[0])) {
        PyErr_Format(PyExc_TypeError,
                     "%s(items, start, prev, pos, run_id, tenant): a list first", name);
        return -1;
    }
    *start = PyLong_AsSsize_t(args[1]);
    if (*start == -1 && PyErr_Occurred()) {
        return -1;
    }
    *pos = PyLong_AsSsize_t(args[3]);
    if (*pos == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (*start < 0 || *pos < 0) {
        PyErr_Format(PyExc_ValueError, "%s(): start and pos must not be negative", name);
        return -1;
    }
    return 0;
}

/* ``verify_many(items, start, prev, pos, run_id, tenant)``: ``verify_row`` of each stored row
 * (a tuple of 17) and ``verify_event`` of each event of the bound class in ``items`` (a list),
 * from ``items[start]`` on, each at the next position and linked to the hash the one before
 * returned, up to the first item either leaves to the Python path, or the end. Returns
 * ``(count, last)``: how many passed, and the stored hash of the last of them (``prev`` when
 * none did). The Python path then takes the item after them: a run is checked in one compiled
 * call per page in the common case, not one per event. */
static PyObject *
verify_many(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t start, pos;
    if (page_args("verify_many", args, nargs, &start, &pos) < 0) {
        return NULL;
    }
    if (sha256_fn == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "verify_many(): bind_hash() was not called");
        return NULL;
    }
    PyObject *items = args[0];
    PyObject *prev = Py_NewRef(args[2]);
    Py_ssize_t count = 0;
    /* the size is read again each time: the list is the caller's */
    for (Py_ssize_t i = start; i < PyList_GET_SIZE(items); i++) {
        PyObject *item = Py_NewRef(PyList_GET_ITEM(items, i));
        PyObject *got;
        if (PyTuple_Check(item) && PyTuple_GET_SIZE(item) == 17) {
            got = verify_fields(&PyTuple_GET_ITEM(item, 0), prev, pos + count, args[4], args[5]);
        } else if (event_cls != NULL && Py_IS_TYPE(item, event_cls)) {
            got = verify_event_at(item, prev, pos + count, args[4], args[5]);
        } else {
            got = Py_NewRef(Py_None);
        }
        Py_DECREF(item);
        if (got == NULL) {
            Py_DECREF(prev);
            return NULL;
        }
        if (got == Py_None) {
            Py_DECREF(got);
            break;
        }
        Py_SETREF(prev, got);
        count++;
    }
    return Py_BuildValue("(nN)", count, prev);
}

/* -- a page checked on a thread of its own (verify_start) --------------------------------------
 *
 * ``verify_start(items, start, prev, pos, run_id, tenant)`` takes the items of ``items`` (a
 * list) that ``verify_many`` would check, from ``start`` up to the first it could not read
 * (not a 17-field row or an event of the bound class, or an event without its stored bytes),
 * reads their fields with the GIL held, holds a reference to every value the fields point
 * into, and starts a thread that runs verify_many's checks over them without the GIL: the
 * interpreter goes on (reading the next page) meanwhile. ``job.wait()`` waits for it, with the
 * GIL released, and gives verify_many's answer for those items: ``(count, last)``. It never
 * vouches for more than verify_many would: whatever it stops at (an item to decide in
 * Python, a number that needs Python's float conversions, out of memory) is the caller's to
 * check on the Python path, from ``start + count``; ``job.taken`` is how many items it read.
 * None where no thread can be started here (no OpenSSL SHA-256 bound, no POSIX threads, or
 * nothing to read): the caller then calls verify_many.
 */

/* the thread and wait() share ``next`` and ``stop`` while both run */
#if defined(__GNUC__) || defined(__clang__)
#define LOAD_SHARED(x) __atomic_load_n(&(x), __ATOMIC_ACQUIRE)
#define STORE_SHARED(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELEASE)
#else
#define LOAD_SHARED(x) (x)
#define STORE_SHARED(x, v) ((x) = (v))
#undef HAVE_PTHREAD /* no threads where the two cannot be shared safely */
#endif

typedef struct {
    PyObject_HEAD
    Py_ssize_t taken;  /* items read */
    Py_ssize_t capacity; /* items the two arrays below have room for (one block, fields first) */
    Field *fields;     /* 17 per item */
    PyObject **held;   /* the 17 values of each item, a reference each */
    PyObject *prev;    /* the hash before the first item, held */
    Field prev_field, run_id_field, tenant_field;
    PyObject *run_id, *tenant;
    Py_ssize_t pos;
    Sha256Api api;
    Py_ssize_t count; /* how many passed (once done) */
    Py_ssize_t next;  /* the item the thread checks now (read by wait() as it goes) */
    Py_ssize_t stop;  /* the thread checks items up to here (lowered by wait(), see there) */
#ifdef HAVE_PTHREAD
    pthread_t thread;
#endif
    int started; /* a thread runs it */
    int done;
} VerifyJobObject;

static PyTypeObject *verify_job_type = NULL;

/* The arrays of the last jobs freed, kept for the next ones (taken and given back with the
 * GIL held): a page's arrays are large enough that the allocator maps fresh pages for each,
 * and touching them cost a replay as much as reading the fields. As many as a verifier has
 * pages in flight (verify._IN_FLIGHT, and the one it begins), of up to SPARE_MOST items: 544
 * bytes an item on 64 bits, 1.6 MB at most in all. */
#define SPARES 3
#define SPARE_MOST 1024
static void *spare_block[SPARES];
static Py_ssize_t spare_capacity[SPARES];
static int spare_count = 0;

/* One block for a job's two arrays, of room for ``items`` at least (a spare where one is
 * big enough): its capacity in ``*capacity``, or NULL. */
static void *
job_block(Py_ssize_t items, Py_ssize_t *capacity)
{
    for (int i = spare_count - 1; i >= 0; i--) {
        if (spare_capacity[i] >= items) {
            void *block = spare_block[i];
            *capacity = spare_capacity[i];
            spare_count--;
            spare_block[i] = spare_block[spare_count];
            spare_capacity[i] = spare_capacity[spare_count];
            return block;
        }
    }
    *capacity = items;
    return PyMem_Malloc((size_t)items * 17 * (sizeof(Field) + sizeof(PyObject *)));
}

static void
job_block_free(void *block, Py_ssize_t capacity)
{
    if (block != NULL && spare_count < SPARES && capacity <= SPARE_MOST) {
        spare_block[spare_count] = block;
        spare_capacity[spare_count] = capacity;
        spare_count++;
        return;
    }
    PyMem_Free(block);
}

/* Items ``from`` up to ``stop`` (or the first that does not pass) checked, each linked to the
 * stored hash of the one before (``prev`` for the first): the index of the first not passed,
 * or ``stop``. With ``progress``, the index reached so far is published to ``job->next``. */
static Py_ssize_t
verify_job_span(VerifyJobObject *job, Py_ssize_t from, const Field *prev, int progress)
{
    /* no Python object is touched here: only the fields and the bytes they point into */
    Field link = *prev;
    Py_ssize_t i = from;
    for (; i < LOAD_SHARED(job->stop); i++) {
        const Field *f = job->fields + 17 * i;
        if (verify_core(f, &link, job->pos + i, &job->run_id_field, &job->tenant_field,
                        &job->api, 0) != V_PASS) {
            break;
        }
        link = f[14];
        if (progress) {
            STORE_SHARED(job->next, i + 1);
        }
    }
    return i;
}

static void
verify_job_run(VerifyJobObject *job)
{
    job->count = verify_job_span(job, 0, &job->prev_field, 1);
}

#ifdef HAVE_PTHREAD
static void *
verify_job_thread(void *arg)
{
    verify_job_run((VerifyJobObject *)arg);
    return NULL;
}
#endif

#define HELP_FROM 64 /* items left at least, for wait() to check half of them itself */

/* Wait for the thread, if one runs; else run it here. The GIL is released meanwhile. With
 * ``help`` and many items left, the thread is asked to stop halfway through what is left, and
 * this thread checks the second half meanwhile, from the stored hash before it: the items are
 * independent given the stored hashes, so the answer is the thread's count when it stopped
 * before the half (a failure there: this thread's work is dropped), else the end of this
 * thread's span (the thread may have gone on past the half before it saw the new stop: the
 * further of the two). */
static void
verify_job_finish(VerifyJobObject *job, int help)
{
    if (job->done) {
        return;
    }
    Py_BEGIN_ALLOW_THREADS
#ifdef HAVE_PTHREAD
    if (job->started) {
        Py_ssize_t at = LOAD_SHARED(job->next), half = -1, reached = -1;
        if (help && job->taken - at >= HELP_FROM) {
            half = at + (job->taken - at) / 2;
            STORE_SHARED(job->stop, half);
            Py_ssize_t end = job->taken;
            Py_ssize_t i = half;
            Field link = job->fields[17 * (half - 1) + 14];
            for (; i < end; i++) {
                const Field *f = job->fields + 17 * i;
                if (verify_core(f, &link, job->pos + i, &job->run_id_field,
                                &job->tenant_field, &job->api, 0) != V_PASS) {
                    break;
                }
                link = f[14];
            }
            reached = i;
        }
        pthread_join(job->thread, NULL);
        if (half >= 0 && job->count >= half) {
            job->count = job->count > reached ? job->count : reached;
        }
    }
    else
#endif
    {
        verify_job_run(job);
    }
    Py_END_ALLOW_THREADS
    job->done = 1;
}

static PyObject *
verify_job_wait(VerifyJobObject *job, PyObject *Py_UNUSED(ignored))
{
    verify_job_finish(job, 1);
    PyObject *last = job->count > 0 ? job->held[17 * (job->count - 1) + 14] : job->prev;
    return Py_BuildValue("(nO)", job->count, last);
}

static PyObject *
verify_job_taken(VerifyJobObject *job, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(job->taken);
}

static void
verify_job_dealloc(VerifyJobObject *job)
{
    PyTypeObject *type = Py_TYPE(job);
    if (job->started && !job->done) {
        /* the thread reads what is held below: it ends first (it never takes the GIL) */
        verify_job_finish(job, 0);
    }
    if (job->held != NULL) {
        for (Py_ssize_t i = 0; i < 17 * job->taken; i++) {
            Py_XDECREF(job->held[i]);
        }
    }
    job_block_free(job->fields, job->capacity);
    Py_XDECREF(job->prev);
    Py_XDECREF(job->run_id);
    Py_XDECREF(job->tenant);
    type->tp_free((PyObject *)job);
    Py_DECREF(type);
}

static PyMethodDef verify_job_methods[] = {
    {"wait", (PyCFunction)verify_job_wait, METH_NOARGS,
     "Wait for the checks: (how many passed, the stored hash of the last of them)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef verify_job_getset[] = {
    {"taken", (getter)verify_job_taken, NULL, "How many items the job read.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot verify_job_slots[] = {
    {Py_tp_dealloc, verify_job_dealloc},
    {Py_tp_methods, verify_job_methods},
    {Py_tp_getset, verify_job_getset},
    {Py_tp_doc, "verify_many's checks of a page, run on a thread of their own (verify_start)."},
    {0, NULL},
};

static PyType_Spec verify_job_spec = {
    "tachograph.record.native.VerifyJob",
    sizeof(VerifyJobObject),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    verify_job_slots,
};

static PyObject *
verify_start(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t start, pos;
    if (page_args("verify_start", args, nargs, &start, &pos) < 0) {
        return NULL;
    }
    PyObject *items = args[0];
    Sha256Api api = sha256_api;
#ifndef HAVE_PTHREAD
    Py_RETURN_NONE;
#endif
    if (api.init == NULL || verify_job_type == NULL) {
        Py_RETURN_NONE; /* hashlib's SHA-256 needs the GIL: verify_many serves */
    }
    Py_ssize_t size = PyList_GET_SIZE(items);
    Py_ssize_t most = size > start ? size - start : 0;
    if (most == 0) {
        Py_RETURN_NONE;
    }
    VerifyJobObject *job = PyObject_New(VerifyJobObject, verify_job_type);
    if (job == NULL) {
        return NULL;
    }
    job->taken = 0;
    job->fields = job_block(most, &job->capacity);
    job->held = job->fields != NULL ? (PyObject **)(job->fields + 17 * job->capacity) : NULL;
    job->prev = Py_NewRef(args[2]);
    job->run_id = Py_NewRef(args[4]);
    job->tenant = Py_NewRef(args[5]);
    job->pos = pos;
    job->api = api;
    job->count = 0;
    job->next = 0;
    job->stop = 0;
    job->started = 0;
    job->done = 0;
    if (job->fields == NULL || job->held == NULL) {
        Py_DECREF(job);
        return PyErr_NoMemory();
    }
    field_of(job->prev, &job->prev_field);
    field_of(job->run_id, &job->run_id_field);
    field_of(job->tenant, &job->tenant_field);
    for (Py_ssize_t i = start; i < size; i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        PyObject *values[17];
        if (PyTuple_Check(item) && PyTuple_GET_SIZE(item) == 17) {
            memcpy(values, &PyTuple_GET_ITEM(item, 0), sizeof values);
        }
        else if (event_cls == NULL || !Py_IS_TYPE(item, event_cls) ||
                 !event_values(item, values)) {
            break;
        }
        PyObject **held = job->held + 17 * job->taken;
        for (int k = 0; k < 17; k++) {
            held[k] = Py_NewRef(values[k]);
        }
        row_fields(values, job->fields + 17 * job->taken);
        job->taken++;
    }
    if (job->taken == 0) {
        Py_DECREF(job);
        Py_RETURN_NONE;
    }
    job->stop = job->taken;
#ifdef HAVE_PTHREAD
    job->started = pthread_create(&job->thread, NULL, verify_job_thread, job) == 0;
#endif
    /* not started (no thread to be had): wait() runs the checks itself */
    return (PyObject *)job;
}


/* -- whether any of a set of words occurs in bytes (redactor._Engine.clean) ------------------
 *
 * ``contains_any(data, table)``: True when one of the words occurs in ``data``. ``table`` holds
 * the words by their first byte: 256 entries, each None or a tuple of the (non-empty) bytes
 * words that start with that byte. One pass over ``data``; at each position only the words of
 * its byte are compared. The same answer as a regular expression alternating the words
 * (``redactor._any_of``), at a fraction of its cost on the short payloads of most events.
 */

/* The table the pairs below were read from (held, so that its address names it while it is
 * cached), and which pairs of bytes begin one of its words: 65,536 bits. The redactor hands
 * the same table to every call, so it is read and checked once, and a byte whose next byte
 * begins no word with it costs one bit test. */
static PyObject *ca_table = NULL;
static uint64_t ca_pairs[1024];

static int
ca_prepare(PyObject *table)
{
    if (table == ca_table) {
        return 0;
    }
    uint64_t pairs[1024];
    memset(pairs, 0, sizeof pairs);
    for (int first = 0; first < 256; first++) {
        PyObject *words = PyTuple_GET_ITEM(table, first);
        if (words == Py_None) {
            continue;
        }
        if (!PyTuple_CheckExact(words)) {
            PyErr_SetString(PyExc_TypeError, "contains_any: each entry is None or a tuple");
            return -1;
        }
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(words); j++) {
            PyObject *word = PyTuple_GET_ITEM(words, j);
            if (!PyBytes_CheckExact(word) || PyBytes_GET_SIZE(word) < 1 ||
                (unsigned char)PyBytes_AS_STRING(word)[0] != first) {
                PyErr_SetString(PyExc_ValueError,
                                "contains_any: a word filed under another first byte");
                return -1;
            }
            if (PyBytes_GET_SIZE(word) == 1) { /* one byte: every pair it begins */
                for (int i = 0; i < 4; i++) {
                    pairs[first * 4 + i] = ~(uint64_t)0;
                }
            }
            else {
                unsigned int pair = (unsigned int)first << 8 |
                                    (unsigned char)PyBytes_AS_STRING(word)[1];
                pairs[pair >> 6] |= (uint64_t)1 << (pair & 63);
            }
        }
    }
    memcpy(ca_pairs, pairs, sizeof pairs);
    Py_XSETREF(ca_table, Py_NewRef(table));
    return 0;
}

static PyObject *
contains_any(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyBytes_Check(args[0]) || !PyTuple_CheckExact(args[1]) ||
        PyTuple_GET_SIZE(args[1]) != 256) {
        PyErr_SetString(PyExc_TypeError,
                        "contains_any(data, table): bytes, and 256 entries of words by first byte");
        return NULL;
    }
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
    PyObject *table = args[1];
    if (ca_prepare(table) < 0) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < size; i++) {
        if (i + 1 < size) {
            unsigned int pair = (unsigned int)data[i] << 8 | data[i + 1];
            if (!(ca_pairs[pair >> 6] >> (pair & 63) & 1)) {
                continue;
            }
        }
        PyObject *words = PyTuple_GET_ITEM(table, data[i]);
        if (words == Py_None) {
            continue;
        }
        Py_ssize_t left = size - i;
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(words); j++) {
            PyObject *word = PyTuple_GET_ITEM(words, j); /* checked by ca_prepare */
            Py_ssize_t length = PyBytes_GET_SIZE(word);
            if (length <= left && memcmp(data + i, PyBytes_AS_STRING(word), (size_t)length) == 0) {
                Py_RETURN_TRUE;
            }
        }
    }
    Py_RETURN_FALSE;
}


/* -- the clock and the ids of new events (event._format_ts, event._UlidSource) ----------------
 *
 * ``format_ts(ns)``: ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` of ``ns`` nanoseconds since the epoch
 * (UTC, microseconds truncated), as ``event._format_ts``.
 *
 * ``UlidSource(draw)``: monotonic ULIDs as ``event._UlidSource``, whose ``next(ms)`` counts the
 * 80-bit random part up by one within a millisecond (or a clock that steps back) and draws a
 * new one, ``draw(10)`` shifted right by one bit, for a new millisecond. The draw is the only
 * call into Python; the state is read and written with no call in between, under the GIL, so
 * threads never see it half written.
 */

static char ts_prefix[80];
static long long ts_prefix_secs = -1;

static PyObject *
format_ts_ns(long long ns)
{
    if (ns < 0) { /* a clock before 1970: refused here for format_ts and fresh alike */
        PyErr_SetString(PyExc_ValueError, "format_ts() takes nanoseconds since 1970");
        return NULL;
    }
    long long secs = ns / 1000000000LL;
    long long micros = (ns % 1000000000LL) / 1000;
    if (secs != ts_prefix_secs) {
        time_t t = (time_t)secs;
        struct tm tm;
        if (gmtime_r(&t, &tm) == NULL || tm.tm_year + 1900 > 9999) {
            PyErr_SetString(PyExc_OverflowError, "timestamp out of range");
            return NULL;
        }
        snprintf(ts_prefix, sizeof(ts_prefix), "%04d-%02d-%02dT%02d:%02d:%02d.",
                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
        ts_prefix_secs = secs;
    }
    PyObject *out = PyUnicode_New(27, 127);
    if (out == NULL) {
        return NULL;
    }
    char *w = (char *)PyUnicode_1BYTE_DATA(out);
    memcpy(w, ts_prefix, 20);
    for (int i = 25; i >= 20; i--) {
        w[i] = (char)('0' + micros % 10);
        micros /= 10;
    }
    w[26] = 'Z';
    return out;
}

static PyObject *
format_ts(PyObject *Py_UNUSED(module), PyObject *arg)
{
    long long ns = PyLong_AsLongLong(arg);
    if (ns == -1 && PyErr_Occurred()) {
        return NULL;
    }
    return format_ts_ns(ns);
}

static const char crockford[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

typedef struct {
    PyObject_HEAD
    PyObject *draw;
    long long ms;
    uint64_t hi; /* the random part's top 16 bits */
    uint64_t lo; /* its low 64 bits */
} UlidSourceObject;

static int
ulid_draw(UlidSourceObject *self, uint64_t *hi, uint64_t *lo)
{
    PyObject *got = PyObject_CallFunction(self->draw, "i", 10);
    if (got == NULL) {
        return -1;
    }
    if (!PyBytes_Check(got) || PyBytes_GET_SIZE(got) != 10) {
        Py_DECREF(got);
        PyErr_SetString(PyExc_TypeError, "the draw must return 10 bytes");
        return -1;
    }
    const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(got);
    uint64_t h = ((uint64_t)b[0] << 8) | b[1], l = 0;
    for (int i = 2; i < 10; i++) {
        l = (l << 8) | b[i];
    }
    Py_DECREF(got);
    /* the top bit stays clear, so that the count has room to grow within the millisecond */
    *lo = (l >> 1) | (h << 63);
    *hi = h >> 1;
    return 0;
}

static void
ulid_encode(char *w, long long ms, uint64_t hi, uint64_t lo)
{
    for (int i = 0; i < 10; i++) {
        w[i] = crockford[(ms >> (45 - 5 * i)) & 31];
    }
    for (int i = 0; i < 16; i++) {
        int shift = 75 - 5 * i;
        uint64_t bits;
        if (shift >= 64) {
            bits = hi >> (shift - 64);
        }
        else if (shift > 59) {
            bits = (hi << (64 - shift)) | (lo >> shift);
        }
        else {
            bits = lo >> shift;
        }
        w[10 + i] = crockford[bits & 31];
    }
}

static PyObject *
ulid_next_ms(UlidSourceObject *self, long long ms)
{
    if (ms < 0 || ms >= (1LL << 48)) {
        PyErr_SetString(PyExc_ValueError, "next() takes milliseconds since 1970 (48 bits)");
        return NULL;
    }
    PyObject *out = PyUnicode_New(26, 127);
    if (out == NULL) {
        return NULL;
    }
    if (ms > self->ms) {
        uint64_t hi, lo;
        if (ulid_draw(self, &hi, &lo) < 0) { /* the draw may let another thread run */
            Py_DECREF(out);
            return NULL;
        }
        if (ms > self->ms) { /* still the first of its millisecond */
            self->ms = ms;
            self->hi = hi;
            self->lo = lo;
            ulid_encode((char *)PyUnicode_1BYTE_DATA(out), ms, hi, lo);
            return out;
        }
    }
    /* the same millisecond, or a clock that stepped back: count up in the last one seen */
    uint64_t lo = self->lo + 1, hi = self->hi + (lo == 0);
    if (hi >> 16) { /* past 2^80 ids in one millisecond: on into the next one */
        self->ms += 1;
        hi = lo = 0;
    }
    self->hi = hi;
    self->lo = lo;
    ulid_encode((char *)PyUnicode_1BYTE_DATA(out), self->ms, hi, lo);
    return out;
}

static PyObject *
ulid_next(UlidSourceObject *self, PyObject *arg)
{
    long long ms = PyLong_AsLongLong(arg);
    if (ms == -1 && PyErr_Occurred()) {
        return NULL;
    }
    return ulid_next_ms(self, ms);
}

static PyObject *
ulid_forget(UlidSourceObject *self, PyObject *Py_UNUSED(arg))
{
    self->ms = -1; /* a forked child draws anew rather than count on from its parent */
    Py_RETURN_NONE;
}

static PyObject *
ulid_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *draw;
    static char *names[] = {"draw", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O:UlidSource", names, &draw)) {
        return NULL;
    }
    if (!PyCallable_Check(draw)) {
        PyErr_SetString(PyExc_TypeError, "UlidSource(draw): draw must be callable");
        return NULL;
    }
    UlidSourceObject *self = (UlidSourceObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->draw = Py_NewRef(draw);
    self->ms = -1;
    self->hi = self->lo = 0;
    return (PyObject *)self;
}

static int
ulid_traverse(UlidSourceObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->draw);
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static int
ulid_clear(UlidSourceObject *self)
{
    Py_CLEAR(self->draw);
    return 0;
}

static void
ulid_dealloc(UlidSourceObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    ulid_clear(self);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyMethodDef ulid_methods[] = {
    {"next", (PyCFunction)ulid_next, METH_O, "The next ULID, given the clock in milliseconds."},
    {"forget", (PyCFunction)ulid_forget, METH_NOARGS,
     "Draw a new random part on the next call (for a forked child)."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot ulid_slots[] = {
    {Py_tp_new, ulid_new},
    {Py_tp_dealloc, ulid_dealloc},
    {Py_tp_traverse, ulid_traverse},
    {Py_tp_clear, ulid_clear},
    {Py_tp_methods, ulid_methods},
    {Py_tp_doc, "Monotonic ULIDs (event._UlidSource), drawing with draw(10)."},
    {0, NULL},
};

static PyType_Spec ulid_spec = {
    "tachograph.record.native.UlidSource",
    sizeof(UlidSourceObject),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    ulid_slots,
};

/* -- the repeats of a run's default idempotency keys (keycount.U64Set) ------------------------
 *
 * ``U64Set()``: a set of integers in [0, 2^64), as ``keycount.U64Set`` (the same layout and the
 * same steps: sorted blocks of at most U64SET_BLOCK values, found through their first values;
 * a full block hands values to a neighbour with room, else splits in two; a lone first block
 * starts at U64SET_START values and doubles), so that a value costs about 9 bytes here too and
 * the set never holds two copies of itself: a hash table doubling to a new table held the old
 * and the new at once, 12 MB at the peak for 500,000 keys. No Python object is held, so the
 * type takes no part in the cyclic collector.
 */

#define U64SET_BLOCK 512
#define U64SET_START 16

typedef struct {
    PyObject_HEAD
    uint64_t **blocks; /* each sorted, U64SET_BLOCK long (the first alone: cap0 long) */
    uint64_t *firsts;  /* firsts[b] == blocks[b][0] for b > 0 (a search's bounds) */
    Py_ssize_t *counts;
    Py_ssize_t n, room; /* blocks in use, index entries allocated */
    Py_ssize_t cap0;
    Py_ssize_t size;
} U64SetObject;

static PyObject *
u64set_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0)) {
        PyErr_SetString(PyExc_TypeError, "U64Set() takes no arguments");
        return NULL;
    }
    U64SetObject *self = (U64SetObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->room = 4;
    self->blocks = PyMem_Calloc((size_t)self->room, sizeof(uint64_t *));
    self->firsts = PyMem_Calloc((size_t)self->room, sizeof(uint64_t));
    self->counts = PyMem_Calloc((size_t)self->room, sizeof(Py_ssize_t));
    if (self->blocks == NULL || self->firsts == NULL || self->counts == NULL) {
        Py_DECREF(self); /* dealloc frees what was allocated */
        return PyErr_NoMemory();
    }
    self->n = 1; /* its block NULL until allocated: dealloc frees it either way */
    self->blocks[0] = PyMem_Malloc(U64SET_START * sizeof(uint64_t));
    if (self->blocks[0] == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    self->cap0 = U64SET_START;
    self->size = 0;
    return (PyObject *)self;
}

/* The first of count sorted values that is >= x (count if none), without a branch a step
 * that the processor could mispredict: the values are hashes, so every step is a coin toss. */
static inline Py_ssize_t
u64set_lower_bound(const uint64_t *values, Py_ssize_t count, uint64_t x)
{
    if (count == 0) {
        return 0;
    }
    const uint64_t *base = values;
    while (count > 1) {
        Py_ssize_t half = count / 2;
        base = base[half] < x ? base + half : base;
        count -= half;
    }
    return (base - values) + (*base < x);
}

/* The block that holds x or would: the last whose first value is <= x (block 0 below all),
 * bisect_right(firsts, x, 1) - 1. */
static inline Py_ssize_t
u64set_block_of(const U64SetObject *self, uint64_t x)
{
    Py_ssize_t count = self->n - 1;
    if (count == 0) {
        return 0;
    }
    const uint64_t *values = self->firsts + 1, *base = values;
    while (count > 1) {
        Py_ssize_t half = count / 2;
        base = base[half] <= x ? base + half : base;
        count -= half;
    }
    return (base - values) + (*base <= x);
}

/* Make room in the full block b: move values to a neighbour with room for two or more (half
 * the difference), else split b in two. 0, or -1 with MemoryError and nothing changed. */
static int
u64set_make_room(U64SetObject *self, Py_ssize_t b)
{
    uint64_t *block = self->blocks[b];
    if (b + 1 < self->n && self->counts[b + 1] < U64SET_BLOCK - 1) {
        uint64_t *next = self->blocks[b + 1];
        Py_ssize_t k = (U64SET_BLOCK - self->counts[b + 1]) / 2;
        memmove(next + k, next, (size_t)self->counts[b + 1] * sizeof(uint64_t));
        memcpy(next, block + U64SET_BLOCK - k, (size_t)k * sizeof(uint64_t));
        self->counts[b + 1] += k;
        self->counts[b] -= k;
        self->firsts[b + 1] = next[0];
        return 0;
    }
    if (b > 0 && self->counts[b - 1] < U64SET_BLOCK - 1) {
        uint64_t *prev = self->blocks[b - 1];
        Py_ssize_t k = (U64SET_BLOCK - self->counts[b - 1]) / 2;
        memcpy(prev + self->counts[b - 1], block, (size_t)k * sizeof(uint64_t));
        memmove(block, block + k, (size_t)(U64SET_BLOCK - k) * sizeof(uint64_t));
        self->counts[b - 1] += k;
        self->counts[b] -= k;
        self->firsts[b] = block[0];
        return 0;
    }
    if (self->n == self->room) {
        Py_ssize_t room = self->room * 2;
        uint64_t **blocks = PyMem_Realloc(self->blocks, (size_t)room * sizeof(uint64_t *));
        if (blocks == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->blocks = blocks;
        uint64_t *firsts = PyMem_Realloc(self->firsts, (size_t)room * sizeof(uint64_t));
        if (firsts == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->firsts = firsts;
        Py_ssize_t *counts = PyMem_Realloc(self->counts, (size_t)room * sizeof(Py_ssize_t));
        if (counts == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->counts = counts;
        self->room = room;
    }
    uint64_t *upper = PyMem_Malloc(U64SET_BLOCK * sizeof(uint64_t));
    if (upper == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t half = U64SET_BLOCK / 2, after = self->n - b - 1;
    memcpy(upper, block + half, (size_t)half * sizeof(uint64_t));
    memmove(self->blocks + b + 2, self->blocks + b + 1, (size_t)after * sizeof(uint64_t *));
    memmove(self->firsts + b + 2, self->firsts + b + 1, (size_t)after * sizeof(uint64_t));
    memmove(self->counts + b + 2, self->counts + b + 1, (size_t)after * sizeof(Py_ssize_t));
    self->blocks[b + 1] = upper;
    self->firsts[b + 1] = upper[0];
    self->counts[b + 1] = half;
    self->counts[b] = half;
    self->n += 1;
    return 0;
}

/* Add x; 1 if it was not there yet, 0 if it was, -1 with an exception set (nothing added). */
static int
u64set_insert(U64SetObject *self, uint64_t x)
{
    Py_ssize_t b = u64set_block_of(self, x);
    Py_ssize_t i = u64set_lower_bound(self->blocks[b], self->counts[b], x);
    if (i < self->counts[b] && self->blocks[b][i] == x) {
        return 0;
    }
    if (self->counts[b] == (self->n == 1 ? self->cap0 : U64SET_BLOCK)) {
        if (self->n == 1 && self->cap0 < U64SET_BLOCK) {
            uint64_t *grown =
                PyMem_Realloc(self->blocks[0], (size_t)self->cap0 * 2 * sizeof(uint64_t));
            if (grown == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            self->blocks[0] = grown;
            self->cap0 *= 2;
        }
        else {
            if (u64set_make_room(self, b) < 0) {
                return -1;
            }
            b = u64set_block_of(self, x);
            i = u64set_lower_bound(self->blocks[b], self->counts[b], x);
        }
    }
    uint64_t *block = self->blocks[b];
    memmove(block + i + 1, block + i, (size_t)(self->counts[b] - i) * sizeof(uint64_t));
    block[i] = x;
    self->counts[b] += 1;
    if (i == 0) {
        self->firsts[b] = x;
    }
    self->size += 1;
    return 1;
}

static PyObject *
u64set_add(U64SetObject *self, PyObject *arg)
{
    if (!PyLong_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "U64Set.add() takes an int, not %.80s",
                     Py_TYPE(arg)->tp_name);
        return NULL;
    }
    uint64_t x = PyLong_AsUnsignedLongLong(arg); /* OverflowError outside [0, 2^64) */
    if (x == (uint64_t)-1 && PyErr_Occurred()) {
        return NULL;
    }
    int added = u64set_insert(self, x);
    return added < 0 ? NULL : PyBool_FromLong(added);
}

/* ``hmac_key(inner, outer, data, prefix)``: a default call key in one call (seal.KeyDeriver's
 * common step). h, the first 16 hex of HMAC-SHA256 over ``data`` from hmac_pads' two, is added
 * to this set as the integer it spells; when it was not there yet, the key ``prefix + h`` is
 * returned. None: h was there already (a repeat, which the caller numbers, the set unchanged),
 * or OpenSSL's SHA-256 is not bound (nothing added; the caller takes hashlib's path). No Python
 * code runs inside, so two threads cannot interleave in it. */
static PyObject *
u64set_hmac_key(U64SetObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    unsigned char outer[32];
    int done = hmac_of_args(args, nargs == 4 && PyUnicode_Check(args[3]),
                            "hmac_key(inner, outer, data, prefix): hmac_pads' two, bytes, then str",
                            outer);
    if (done <= 0) {
        return done < 0 ? NULL : Py_NewRef(Py_None);
    }
    uint64_t x = 0;
    for (int i = 0; i < 8; i++) {
        x = (x << 8) | outer[i]; /* int(h, 16): the first eight bytes, big-endian */
    }
    int added = u64set_insert(self, x);
    if (added < 0) {
        return NULL;
    }
    if (added == 0) {
        Py_RETURN_NONE;
    }
    PyObject *prefix = args[3];
    if (PyUnicode_IS_ASCII(prefix)) {
        Py_ssize_t n = PyUnicode_GET_LENGTH(prefix);
        PyObject *out = PyUnicode_New(n + 16, 127);
        if (out != NULL) {
            char *w = (char *)PyUnicode_1BYTE_DATA(out);
            memcpy(w, PyUnicode_1BYTE_DATA(prefix), (size_t)n);
            hex_into(w + n, outer, 8);
        }
        return out;
    }
    PyObject *h = PyUnicode_New(16, 127);
    if (h == NULL) {
        return NULL;
    }
    hex_into((char *)PyUnicode_1BYTE_DATA(h), outer, 8);
    PyObject *out = PyUnicode_Concat(prefix, h);
    Py_DECREF(h);
    return out;
}

static PyObject *
u64set_nbytes(U64SetObject *self, PyObject *Py_UNUSED(arg))
{
    Py_ssize_t values = self->n == 1 ? self->cap0 : self->n * U64SET_BLOCK;
    return PyLong_FromSsize_t(values * (Py_ssize_t)sizeof(uint64_t));
}

static Py_ssize_t
u64set_len(U64SetObject *self)
{
    return self->size;
}

static void
u64set_dealloc(U64SetObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    if (self->blocks != NULL) {
        for (Py_ssize_t b = 0; b < self->n; b++) {
            PyMem_Free(self->blocks[b]);
        }
    }
    PyMem_Free(self->blocks);
    PyMem_Free(self->firsts);
    PyMem_Free(self->counts);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyMethodDef u64set_methods[] = {
    {"add", (PyCFunction)u64set_add, METH_O, "Add x; True if it was not there yet."},
    {"hmac_key", (PyCFunction)(void (*)(void))u64set_hmac_key, METH_FASTCALL,
     "hmac_key(inner, outer, data, prefix): prefix + h when h is new here, else None."},
    {"nbytes", (PyCFunction)u64set_nbytes, METH_NOARGS, "The bytes of the blocks."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot u64set_slots[] = {
    {Py_tp_new, u64set_new},
    {Py_tp_dealloc, u64set_dealloc},
    {Py_tp_methods, u64set_methods},
    {Py_sq_length, u64set_len},
    {Py_tp_doc, "A set of integers in [0, 2**64) in sorted blocks (keycount.U64Set)."},
    {0, NULL},
};

static PyType_Spec u64set_spec = {
    "tachograph.record.native.U64Set",
    sizeof(U64SetObject),
    0,
    Py_TPFLAGS_DEFAULT,
    u64set_slots,
};

/* -- new events (event.fresh_event) ---------------------------------------------------------
 *
 * ``bind_fresh(sha256, dumps, ulids)``, then ``fresh(tenant, run_id, seq, type, actor,
 * trace_id, span_id, idempotency_key, model, seed, prev_hash, payload, jcs, salt)``: the rest
 * of ``event.fresh_event`` once the caller has checked the fields, taken the payload's JCS
 * form and drawn the salt. The payload's bytes as given (``dumps(payload)``, copied into an
 * object of their own size), one reading of the clock (CLOCK_REALTIME, which time.time_ns
 * reads) for the timestamp and the ULID (``ulids``, a UlidSource), the salted digest, the
 * envelope, its SHA-256 (hashlib's), and the event (bind_event's class): the same steps in the
 * same order as the Python path, without a Python frame for each. None where the envelope
 * holds a value ``envelope`` leaves to orjson: the Python path then builds the event.
 */

/* fresh() hashes with verify_row's sha256_fn and writes v as its one_object (above) */
static PyObject *fresh_dumps = NULL;
static UlidSourceObject *fresh_ulids = NULL;

static PyObject *
bind_fresh(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyCallable_Check(args[0]) || !PyCallable_Check(args[1]) ||
        Py_TYPE(args[2])->tp_dealloc != (destructor)ulid_dealloc) {
        PyErr_SetString(PyExc_TypeError,
                        "bind_fresh(sha256, dumps, ulids): hashlib.sha256, orjson.dumps and a "
                        "UlidSource");
        return NULL;
    }
    if (one_object == NULL && (one_object = PyLong_FromLong(1)) == NULL) {
        return NULL;
    }
    Py_XSETREF(sha256_fn, Py_NewRef(args[0]));
    Py_XSETREF(fresh_dumps, Py_NewRef(args[1]));
    Py_XSETREF(fresh_ulids, (UlidSourceObject *)Py_NewRef(args[2]));
    Py_RETURN_NONE;
}

/* "sha256:" + the digest ``d`` in lowercase hex, or NULL on error */
static PyObject *
digest_text(const unsigned char d[32])
{
    PyObject *out = PyUnicode_New(71, 127);
    if (out != NULL) {
        char *w = (char *)PyUnicode_1BYTE_DATA(out);
        memcpy(w, "sha256:", 7);
        hex_into(w + 7, d, 32);
    }
    return out;
}

static PyObject *
fresh(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 14) {
        PyErr_SetString(PyExc_TypeError, "fresh() takes its 14 arguments in order");
        return NULL;
    }
    if (fresh_ulids == NULL || event_cls == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "fresh(): bind_fresh and bind_event come first");
        return NULL;
    }
    PyObject *tenant = args[0], *run_id = args[1], *seq = args[2], *type = args[3];
    PyObject *actor = args[4], *trace_id = args[5], *span_id = args[6], *key = args[7];
    PyObject *model = args[8], *seed = args[9], *prev_hash = args[10], *payload = args[11];
    PyObject *jcs = args[12], *salt = args[13];
    if (!PyBytes_Check(jcs) || !PyBytes_Check(salt) || PyBytes_GET_SIZE(salt) != 16) {
        PyErr_SetString(PyExc_TypeError, "fresh(): jcs must be bytes and salt 16 bytes");
        return NULL;
    }
    PyObject *body = NULL, *ts = NULL, *event_id = NULL, *digest = NULL;
    PyObject *hash = NULL, *salt_hex = NULL, *result = NULL;

    /* the payload's bytes as given, in an object of their own size (orjson's own holds its
       whole buffer, at least 4 KiB) */
    PyObject *dumped = PyObject_CallOneArg(fresh_dumps, payload);
    if (dumped == NULL) {
        goto done;
    }
    if (!PyBytes_Check(dumped)) {
        Py_DECREF(dumped);
        PyErr_SetString(PyExc_TypeError, "the bound dumps must return bytes");
        goto done;
    }
    body = PyBytes_FromStringAndSize(PyBytes_AS_STRING(dumped), PyBytes_GET_SIZE(dumped));
    Py_DECREF(dumped);
    if (body == NULL) {
        goto done;
    }
    /* the clock, read once for both */
    struct timespec now;
    if (clock_gettime(CLOCK_REALTIME, &now) != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    long long ns = (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
    if ((ts = format_ts_ns(ns)) == NULL) {
        goto done;
    }
    if ((event_id = ulid_next_ms(fresh_ulids, ns / 1000000LL)) == NULL) {
        goto done;
    }
    /* the digest: SHA-256 of the salt's 16 bytes, then the payload's JCS form */
    unsigned char d[32];
    if (sha256_parts(PyBytes_AS_STRING(salt), 16, PyBytes_AS_STRING(jcs), PyBytes_GET_SIZE(jcs),
                     d) < 0 ||
        (digest = digest_text(d)) == NULL) {
        goto done;
    }
    PyObject *fields[19] = {one_object, tenant, run_id, seq, event_id, ts, type, actor,
                            trace_id, span_id, key, model, seed, digest, prev_hash};
    int hashed = envelope_digest(fields, d);
    if (hashed == 0) {
        result = Py_NewRef(Py_None); /* a value left to orjson: the Python path decides */
        goto done;
    }
    if (hashed < 0 || (hash = digest_text(d)) == NULL) {
        goto done;
    }
    if ((salt_hex = PyUnicode_New(32, 127)) == NULL) {
        goto done;
    }
    static const char hexdigits[] = "0123456789abcdef";
    const unsigned char *raw = (const unsigned char *)PyBytes_AS_STRING(salt);
    char *w = (char *)PyUnicode_1BYTE_DATA(salt_hex);
    for (int i = 0; i < 16; i++) {
        w[2 * i] = hexdigits[raw[i] >> 4];
        w[2 * i + 1] = hexdigits[raw[i] & 15];
    }
    fields[15] = hash;
    fields[16] = payload;
    fields[17] = salt_hex;
    fields[18] = body;
    result = make_event(NULL, fields, 19);
done:
    Py_XDECREF(body);
    Py_XDECREF(ts);
    Py_XDECREF(event_id);
    Py_XDECREF(digest);
    Py_XDECREF(hash);
    Py_XDECREF(salt_hex);
    return result;
}

/* -- a payload dict of our own, out of the cycle collector's sight (capture.boundary) --------
 *
 * ``untrack(d)`` takes an exact dict out of the set the cycle collector walks, as CPython does
 * itself for a dict that holds no container, and returns None. For the dicts the recording
 * path builds around a call's arguments or answer ({"tool": ..., "args": ...}, {"tool": ...,
 * "result": ...}): no one else holds them, so no reference cycle can pass through them, and
 * the recorded events keep them alive until the writer thread has stored them. Tracked, those
 * that waited for the writer survived the young collections into the oldest generation, and a
 * long recording paid for collections that walk the whole heap. Inserting a container into the
 * dict later tracks it again (CPython's dict does that on every insert). */
static PyObject *
untrack(PyObject *Py_UNUSED(module), PyObject *obj)
{
    if (PyDict_CheckExact(obj)) {
        PyObject_GC_UnTrack(obj);
    }
    Py_RETURN_NONE;
}

static int
native_exec(PyObject *module)
{
    init_char_class();
    PyObject *type = PyType_FromModuleAndSpec(module, &ulid_spec, NULL);
    if (type == NULL) {
        return -1;
    }
    if (PyModule_AddObject(module, "UlidSource", type) < 0) {
        Py_DECREF(type);
        return -1;
    }
    type = PyType_FromModuleAndSpec(module, &verify_job_spec, NULL);
    if (type == NULL) {
        return -1;
    }
    verify_job_type = (PyTypeObject *)Py_NewRef(type);
    if (PyModule_AddObject(module, "VerifyJob", type) < 0) {
        Py_DECREF(type);
        return -1;
    }
    type = PyType_FromModuleAndSpec(module, &u64set_spec, NULL);
    if (type == NULL) {
        return -1;
    }
    if (PyModule_AddObject(module, "U64Set", type) < 0) {
        Py_DECREF(type);
        return -1;
    }
    return 0;
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
    {"bind_hash", bind_hash, METH_O, "Bind verify_row() to hashlib.sha256."},
    {"bind_sha256", bind_sha256, METH_O,
     "Take SHA256 from the libcrypto file already loaded (True), or return to hashlib (None)."},
    {"sha256", sha256_py, METH_O, "The SHA-256 of bytes, as the compiled digests take it."},
    {"hmac_pads", hmac_pads, METH_O,
     "HMAC-SHA256's inner and outer contexts for a 64-byte block key, or None (not bound)."},
    {"hmac16", (PyCFunction)(void (*)(void))hmac16, METH_FASTCALL,
     "The first 16 hex of HMAC-SHA256 from hmac_pads' contexts, or None (not bound)."},
    {"verify_row", (PyCFunction)(void (*)(void))verify_row, METH_FASTCALL,
     "The stored hash when every check of verify._feed_plain's common case passes, else None."},
    {"verify_event", (PyCFunction)(void (*)(void))verify_event, METH_FASTCALL,
     "verify_row of an event of the bound class, read from its slots."},
    {"verify_many", (PyCFunction)(void (*)(void))verify_many, METH_FASTCALL,
     "verify_row / verify_event of a list's items in turn: (how many passed, the last hash)."},
    {"verify_start", (PyCFunction)(void (*)(void))verify_start, METH_FASTCALL,
     "verify_many's checks of a list's items on a thread of their own: a job, or None."},
    {"bind_fresh", (PyCFunction)(void (*)(void))bind_fresh, METH_FASTCALL,
     "Bind fresh() to hashlib.sha256, orjson.dumps and a UlidSource."},
    {"fresh", (PyCFunction)(void (*)(void))fresh, METH_FASTCALL,
     "A new event from its checked fields, JCS form and salt (event.fresh_event), or None."},
    {"format_ts", format_ts, METH_O,
     "YYYY-MM-DDTHH:MM:SS.ffffffZ of nanoseconds since 1970 (event._format_ts)."},
    {"contains_any", (PyCFunction)(void (*)(void))contains_any, METH_FASTCALL,
     "Whether one of the words (filed by first byte) occurs in the bytes."},
    {"untrack", untrack, METH_O,
     "Take an exact dict the recording path built out of the cycle collector's sight."},
    {"jcs", jcs, METH_O,
     "canonical(orjson.loads(data)) from the bytes in one pass, or None where not certain."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef_Slot slots[] = {
    {Py_mod_exec, native_exec},
#if PY_VERSION_HEX >= 0x030C0000
    /* one bound event class per process (bind_event): not for several interpreters */
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
    {0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT,
    "tachograph.record.native",
    "Compiled helpers of tachograph.record: the profile scan, the row check, the envelope, "
    "events, JCS from stored bytes, a stored row verified, the clock, the ULIDs and the key sets.",
    0,
    methods,
    slots,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit_native(void)
{
    return PyModuleDef_Init(&moduledef);
}
