/* A small recursive-descent JSON reader and compact printer with cJSON's API subset (see
 * cjson/cJSON.h). It accepts what libcjson accepts on the inputs the tests compare (numbers are
 * read by strtod as cJSON does; text after the value is an error only when require_null_terminated
 * is set); \u escapes including surrogate pairs become UTF-8; nesting limited to 1000 levels. */
#include "cjson/cJSON.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct {
    const char *s;
    size_t n, i;
    int depth;
} rd;

static void
ws(rd *r)
{
    while (r->i < r->n && (r->s[r->i] == ' ' || r->s[r->i] == '\t' || r->s[r->i] == '\n' ||
                           r->s[r->i] == '\r'))
        r->i++;
}

static cJSON *
node(int type)
{
    cJSON *c = calloc(1, sizeof *c);
    if (c != NULL)
        c->type = type;
    return c;
}

static int
hex4(rd *r, unsigned *out)
{
    if (r->i + 4 > r->n)
        return -1;
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        char ch = r->s[r->i++];
        v <<= 4;
        if (ch >= '0' && ch <= '9')
            v |= (unsigned)(ch - '0');
        else if (ch >= 'a' && ch <= 'f')
            v |= (unsigned)(ch - 'a' + 10);
        else if (ch >= 'A' && ch <= 'F')
            v |= (unsigned)(ch - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

static size_t
utf8(unsigned cp, char *o)
{
    if (cp < 0x80)
        return o[0] = (char)cp, 1;
    if (cp < 0x800)
        return o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000)
        return o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | ((cp >> 6) & 0x3F)),
               o[2] = (char)(0x80 | (cp & 0x3F)), 3;
    return o[0] = (char)(0xF0 | cp >> 18), o[1] = (char)(0x80 | ((cp >> 12) & 0x3F)),
           o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), o[3] = (char)(0x80 | (cp & 0x3F)), 4;
}

/* At the opening quote; returns a malloc'd string or NULL. */
static char *
str(rd *r)
{
    r->i++;
    size_t j = r->i;
    while (j < r->n && r->s[j] != '"')
        j += r->s[j] == '\\' ? 2 : 1;
    if (j >= r->n)
        return NULL;
    char *out = malloc(j - r->i + 1), *o = out; /* escapes never grow the text */
    if (out == NULL)
        return NULL;
    while (r->i < j) {
        unsigned char ch = (unsigned char)r->s[r->i++];
        if (ch < 0x20)
            goto bad;
        if (ch != '\\') {
            *o++ = (char)ch;
            continue;
        }
        char e = r->s[r->i++];
        switch (e) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (hex4(r, &cp) != 0)
                goto bad;
            if (cp >= 0xD800 && cp < 0xDC00) {
                if (r->i + 6 > j || r->s[r->i] != '\\' || r->s[r->i + 1] != 'u')
                    goto bad;
                r->i += 2;
                if (hex4(r, &lo) != 0 || lo < 0xDC00 || lo >= 0xE000)
                    goto bad;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp < 0xE000) {
                goto bad;
            }
            o += utf8(cp, o);
            break;
        }
        default: goto bad;
        }
    }
    if (r->i != j)
        goto bad;
    r->i = j + 1;
    *o = '\0';
    return out;
bad:
    free(out);
    return NULL;
}

static cJSON *value(rd *r);

static cJSON *
list(rd *r, int obj)
{
    cJSON *c = node(obj ? cJSON_Object : cJSON_Array), *last = NULL;
    if (c == NULL || ++r->depth > 1000)
        goto bad;
    r->i++;
    ws(r);
    if (r->i < r->n && r->s[r->i] == (obj ? '}' : ']')) {
        r->i++;
        r->depth--;
        return c;
    }
    for (;;) {
        char *key = NULL;
        ws(r);
        if (obj) {
            if (r->i >= r->n || r->s[r->i] != '"' || (key = str(r)) == NULL)
                goto bad;
            ws(r);
            if (r->i >= r->n || r->s[r->i] != ':') {
                free(key);
                goto bad;
            }
            r->i++;
        }
        cJSON *v = value(r);
        if (v == NULL) {
            free(key);
            goto bad;
        }
        v->string = key;
        if (last == NULL)
            c->child = v;
        else
            last->next = v, v->prev = last;
        last = v;
        ws(r);
        if (r->i < r->n && r->s[r->i] == ',') {
            r->i++;
            continue;
        }
        if (r->i < r->n && r->s[r->i] == (obj ? '}' : ']')) {
            r->i++;
            r->depth--;
            return c;
        }
        goto bad;
    }
bad:
    cJSON_Delete(c);
    return NULL;
}

/* As cJSON: the longest run of number characters, read by strtod (so "01" and "1." read as 1). */
static cJSON *
number(rd *r)
{
    char buf[512];
    size_t j = r->i, k = 0;
    while (j < r->n && k + 1 < sizeof buf && strchr("0123456789+-eE.", r->s[j]) != NULL && r->s[j])
        buf[k++] = r->s[j++];
    buf[k] = '\0';
    char *end = NULL;
    double d = strtod(buf, &end);
    if (end == buf)
        return NULL;
    cJSON *c = node(cJSON_Number);
    if (c == NULL)
        return NULL;
    c->valuedouble = d;
    c->valueint = d >= 2147483647.0 ? 2147483647 : d <= -2147483648.0 ? (-2147483647 - 1) : (int)d;
    r->i += (size_t)(end - buf);
    return c;
}

static cJSON *
word(rd *r, const char *w, int type)
{
    size_t n = strlen(w);
    if (r->i + n > r->n || memcmp(r->s + r->i, w, n) != 0)
        return NULL;
    r->i += n;
    cJSON *c = node(type);
    if (c != NULL && type == cJSON_True)
        c->valueint = 1, c->valuedouble = 1;
    return c;
}

static cJSON *
value(rd *r)
{
    ws(r);
    if (r->i >= r->n)
        return NULL;
    switch (r->s[r->i]) {
    case '{': return list(r, 1);
    case '[': return list(r, 0);
    case '"': {
        char *s = str(r);
        cJSON *c = s != NULL ? node(cJSON_String) : NULL;
        if (c == NULL)
            free(s);
        else
            c->valuestring = s;
        return c;
    }
    case 't': return word(r, "true", cJSON_True);
    case 'f': return word(r, "false", cJSON_False);
    case 'n': return word(r, "null", cJSON_NULL);
    default: return r->s[r->i] == '-' || isdigit((unsigned char)r->s[r->i]) ? number(r) : NULL;
    }
}

cJSON *
cJSON_ParseWithLengthOpts(const char *value_, size_t buffer_length, const char **return_parse_end,
                          cJSON_bool require_null_terminated)
{
    rd r = {value_, buffer_length, 0, 0};
    if (return_parse_end != NULL)
        *return_parse_end = value_;
    if (value_ == NULL)
        return NULL;
    cJSON *c = value(&r);
    ws(&r);
    if (c != NULL && require_null_terminated && (r.i >= r.n || r.s[r.i] != '\0')) {
        cJSON_Delete(c);
        c = NULL;
    }
    if (return_parse_end != NULL)
        *return_parse_end = value_ + r.i;
    return c;
}

cJSON *
cJSON_Parse(const char *value_)
{
    return value_ != NULL ? cJSON_ParseWithLengthOpts(value_, strlen(value_), NULL, 0) : NULL;
}

void
cJSON_Delete(cJSON *item)
{
    while (item != NULL) {
        cJSON *next = item->next;
        cJSON_Delete(item->child);
        free(item->valuestring);
        free(item->string);
        free(item);
        item = next;
    }
}

typedef struct {
    char *p;
    size_t n, cap;
    int bad;
} pb;

static void
put(pb *b, const char *s, size_t n)
{
    if (b->bad)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *p = realloc(b->p, cap);
        if (p == NULL) {
            b->bad = 1;
            return;
        }
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void
put_str(pb *b, const char *s)
{
    put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        char esc[8];
        if (ch == '"' || ch == '\\')
            esc[0] = '\\', esc[1] = (char)ch, put(b, esc, 2);
        else if (ch < 0x20)
            snprintf(esc, sizeof esc, "\\u%04x", ch), put(b, esc, 6);
        else
            put(b, (const char *)s, 1);
    }
    put(b, "\"", 1);
}

static void
print(pb *b, const cJSON *c)
{
    char num[64];
    switch (c->type & 0xFF) {
    case cJSON_False: put(b, "false", 5); break;
    case cJSON_True: put(b, "true", 4); break;
    case cJSON_NULL: put(b, "null", 4); break;
    case cJSON_Number:
        if (!isfinite(c->valuedouble))
            put(b, "null", 4);
        else if (c->valuedouble == (double)(long long)c->valuedouble &&
                 fabs(c->valuedouble) < 1e15)
            put(b, num, (size_t)snprintf(num, sizeof num, "%lld", (long long)c->valuedouble));
        else
            put(b, num, (size_t)snprintf(num, sizeof num, "%.17g", c->valuedouble));
        break;
    case cJSON_String: put_str(b, c->valuestring != NULL ? c->valuestring : ""); break;
    case cJSON_Array:
    case cJSON_Object: {
        int obj = (c->type & 0xFF) == cJSON_Object;
        put(b, obj ? "{" : "[", 1);
        for (const cJSON *e = c->child; e != NULL; e = e->next) {
            if (e != c->child)
                put(b, ",", 1);
            if (obj) {
                put_str(b, e->string != NULL ? e->string : "");
                put(b, ":", 1);
            }
            print(b, e);
        }
        put(b, obj ? "}" : "]", 1);
        break;
    }
    default: b->bad = 1;
    }
}

char *
cJSON_PrintUnformatted(const cJSON *item)
{
    pb b = {NULL, 0, 0, 0};
    if (item == NULL)
        return NULL;
    print(&b, item);
    if (b.bad) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

int
cJSON_GetArraySize(const cJSON *array)
{
    int n = 0;
    for (const cJSON *c = array != NULL ? array->child : NULL; c != NULL; c = c->next)
        n++;
    return n;
}

cJSON *
cJSON_GetArrayItem(const cJSON *array, int index)
{
    cJSON *c = array != NULL && index >= 0 ? array->child : NULL;
    for (; c != NULL && index > 0; index--)
        c = c->next;
    return c;
}

static cJSON *
get(const cJSON *object, const char *key, int cs)
{
    if (object == NULL || key == NULL)
        return NULL;
    for (cJSON *c = object->child; c != NULL; c = c->next)
        if (c->string != NULL && (cs ? strcmp(c->string, key) : strcasecmp(c->string, key)) == 0)
            return c;
    return NULL;
}

cJSON *
cJSON_GetObjectItem(const cJSON *object, const char *string)
{
    return get(object, string, 0);
}

cJSON *
cJSON_GetObjectItemCaseSensitive(const cJSON *object, const char *string)
{
    return get(object, string, 1);
}

#define IS(name, t)                                                                                \
    cJSON_bool cJSON_Is##name(const cJSON *item) { return item != NULL && (item->type & 0xFF) == (t); }
IS(Invalid, cJSON_Invalid)
IS(False, cJSON_False)
IS(True, cJSON_True)
IS(Null, cJSON_NULL)
IS(Number, cJSON_Number)
IS(String, cJSON_String)
IS(Array, cJSON_Array)
IS(Object, cJSON_Object)

cJSON_bool
cJSON_IsBool(const cJSON *item)
{
    return item != NULL && (item->type & (cJSON_True | cJSON_False)) != 0;
}
