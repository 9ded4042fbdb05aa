/* A strict safetensors header parser for untrusted bytes: used by the batch decoder and by the
 * weight-update check. It validates what the format promises (dtype names, shapes, byte sizes,
 * offsets inside the data section, no overlaps, no gaps) and never reads out of bounds. */
#include "trainer_bridge/bridge_int.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;
} dtypes[ST_N_DTYPES] = {
    {"BOOL", 1}, {"U8", 1},   {"I8", 1},  {"I16", 2},     {"U16", 2},
    {"F16", 2},  {"BF16", 2}, {"I32", 4}, {"U32", 4},     {"F32", 4},
    {"F64", 8},  {"I64", 8},  {"U64", 8}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
};

size_t
grpo_bridge__st_dtype_size(st_dtype d)
{
    return dtypes[d].size;
}

const char *
grpo_bridge__st_dtype_name(st_dtype d)
{
    return dtypes[d].name;
}

void
grpo_bridge__put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

uint64_t
grpo_bridge__get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

void
grpo_bridge__st_free(st_file *f)
{
    if (f == NULL)
        return;
    for (size_t i = 0; i < f->n_meta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_vals[i]);
    }
    free(f->meta_keys);
    free(f->meta_vals);
    free(f->t);
    memset(f, 0, sizeof *f);
}

/* A JSON number that is an exact non-negative integer below 2^53. */
static bool
json_u53(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= 9007199254740992.0) || d != (double)(uint64_t)d)
        return false;
    *out = (uint64_t)d;
    return true;
}

static grpo_err
parse_meta(const cJSON *m, const char *where, st_file *f)
{
    if (!cJSON_IsObject(m))
        return grpo__fail(GRPO_EFORMAT, "%s: __metadata__ is not an object", where);
    size_t n = (size_t)cJSON_GetArraySize(m);
    f->meta_keys = calloc(n ? n : 1, sizeof *f->meta_keys);
    f->meta_vals = calloc(n ? n : 1, sizeof *f->meta_vals);
    if (!f->meta_keys || !f->meta_vals)
        return grpo__fail(GRPO_ENOMEM, "%s: out of memory", where);
    const cJSON *it;
    cJSON_ArrayForEach(it, m)
    {
        if (!cJSON_IsString(it))
            return grpo__fail(GRPO_EFORMAT, "%s: __metadata__ \"%s\" is not a string", where,
                              it->string);
        f->meta_keys[f->n_meta] = strdup(it->string);
        f->meta_vals[f->n_meta] = strdup(it->valuestring);
        if (!f->meta_keys[f->n_meta] || !f->meta_vals[f->n_meta])
            return grpo__fail(GRPO_ENOMEM, "%s: out of memory", where);
        f->n_meta++;
    }
    return GRPO_OK;
}

static grpo_err
parse_dtype(const cJSON *v, const char *where, const char *name, st_dtype *out)
{
    if (cJSON_IsString(v))
        for (int d = 0; d < ST_N_DTYPES; d++)
            if (strcmp(v->valuestring, dtypes[d].name) == 0) {
                *out = (st_dtype)d;
                return GRPO_OK;
            }
    return grpo__fail(GRPO_EFORMAT, "%s: tensor \"%s\": missing or unknown dtype", where, name);
}

static grpo_err
parse_tensor(const cJSON *v, const char *where, uint64_t data_len, st_tensor *t)
{
    grpo_err err;
    const char *name = v->string;
    if (strlen(name) >= ST_MAX_NAME || name[0] == '\0')
        return grpo__fail(GRPO_EFORMAT, "%s: a tensor name is empty or longer than %d bytes", where,
                          ST_MAX_NAME - 1);
    strcpy(t->name, name);
    if (!cJSON_IsObject(v))
        return grpo__fail(GRPO_EFORMAT, "%s: tensor \"%s\" is not an object", where, name);
    if ((err = parse_dtype(cJSON_GetObjectItemCaseSensitive(v, "dtype"), where, name, &t->dtype)) !=
        GRPO_OK)
        return err;
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(v, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(v, "data_offsets");
    if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) > ST_MAX_DIMS)
        return grpo__fail(GRPO_EFORMAT, "%s: tensor \"%s\": shape missing or over %d dims", where,
                          name, ST_MAX_DIMS);
    uint64_t nel = 1, lim = (uint64_t)1 << 53;
    const cJSON *it;
    cJSON_ArrayForEach(it, shape)
    {
        uint64_t d;
        if (!json_u53(it, &d))
            return grpo__fail(GRPO_EFORMAT, "%s: tensor \"%s\": bad dimension", where, name);
        t->shape[t->ndim++] = d;
        if (d != 0 && nel > lim / d)
            return grpo__fail(GRPO_EFORMAT, "%s: tensor \"%s\": too many elements", where, name);
        nel *= d;
    }
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
        !json_u53(cJSON_GetArrayItem(offs, 0), &t->begin) ||
        !json_u53(cJSON_GetArrayItem(offs, 1), &t->end) || t->begin > t->end || t->end > data_len)
        return grpo__fail(GRPO_EFORMAT,
                          "%s: tensor \"%s\": data_offsets missing or outside the "
                          "%llu data bytes",
                          where, name, (unsigned long long)data_len);
    if (nel > lim / 8 || t->end - t->begin != nel * dtypes[t->dtype].size)
        return grpo__fail(GRPO_EFORMAT, "%s: tensor \"%s\": %llu bytes for %llu elements of %s",
                          where, name, (unsigned long long)(t->end - t->begin),
                          (unsigned long long)nel, dtypes[t->dtype].name);
    return GRPO_OK;
}

static int
cmp_name(const void *a, const void *b)
{
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

static int
cmp_begin(const void *a, const void *b)
{
    const st_tensor *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* The data section must be covered exactly: sorted by offset, each tensor starts where the
 * previous ended (zero-size tensors anywhere in between), the last one ends at data_len. */
static grpo_err
check_layout(st_file *f, const char *where)
{
    st_tensor *s = malloc((f->n ? f->n : 1) * sizeof *s);
    if (s == NULL)
        return grpo__fail(GRPO_ENOMEM, "%s: out of memory", where);
    memcpy(s, f->t, f->n * sizeof *s);
    grpo_err err = GRPO_OK;
    qsort(s, f->n, sizeof *s, cmp_name);
    for (size_t i = 1; i < f->n && err == GRPO_OK; i++)
        if (strcmp(s[i].name, s[i - 1].name) == 0)
            err = grpo__fail(GRPO_EFORMAT, "%s: tensor \"%s\" appears twice", where, s[i].name);
    qsort(s, f->n, sizeof *s, cmp_begin);
    uint64_t pos = 0;
    for (size_t i = 0; i < f->n && err == GRPO_OK; i++) {
        if (s[i].begin != pos)
            err = grpo__fail(GRPO_EFORMAT,
                             "%s: tensor \"%s\" starts at %llu; expected %llu "
                             "(overlap or gap)",
                             where, s[i].name, (unsigned long long)s[i].begin,
                             (unsigned long long)pos);
        pos = s[i].end;
    }
    if (err == GRPO_OK && pos != f->data_len)
        err = grpo__fail(GRPO_EFORMAT, "%s: tensors cover %llu of %llu data bytes", where,
                         (unsigned long long)pos, (unsigned long long)f->data_len);
    free(s);
    return err;
}

static grpo_err
parse_root(const cJSON *root, const char *where, st_file *f)
{
    grpo_err err;
    if (!cJSON_IsObject(root))
        return grpo__fail(GRPO_EFORMAT, "%s: header is not a JSON object", where);
    size_t n = (size_t)cJSON_GetArraySize(root);
    f->t = calloc(n ? n : 1, sizeof *f->t);
    if (f->t == NULL)
        return grpo__fail(GRPO_ENOMEM, "%s: out of memory", where);
    const cJSON *it;
    bool have_meta = false;
    cJSON_ArrayForEach(it, root)
    {
        if (strcmp(it->string, "__metadata__") == 0) {
            if (have_meta)
                return grpo__fail(GRPO_EFORMAT, "%s: __metadata__ appears twice", where);
            have_meta = true;
            if ((err = parse_meta(it, where, f)) != GRPO_OK)
                return err;
            continue;
        }
        if ((err = parse_tensor(it, where, f->data_len, &f->t[f->n])) != GRPO_OK)
            return err;
        f->n++;
    }
    return check_layout(f, where);
}

grpo_err
grpo_bridge__st_parse_header(const char *json, size_t json_len, uint64_t data_len,
                             const char *where, st_file *out)
{
    memset(out, 0, sizeof *out);
    out->header_len = json_len;
    out->data_off = 8 + json_len;
    out->data_len = data_len;
    if (json_len == 0 || json[0] != '{')
        return grpo__fail(GRPO_EFORMAT, "%s: header does not start with '{'", where);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, json_len, &end, 0);
    if (root == NULL)
        return grpo__fail(GRPO_EFORMAT, "%s: header is not valid JSON (near byte %zu)", where,
                          (size_t)(cJSON_GetErrorPtr() && cJSON_GetErrorPtr() >= json &&
                                           cJSON_GetErrorPtr() <= json + json_len
                                       ? cJSON_GetErrorPtr() - json
                                       : 0));
    /* Only trailing spaces (the format's padding) may follow the object. */
    for (const char *p = end; p < json + json_len; p++)
        if (*p != ' ') {
            cJSON_Delete(root);
            return grpo__fail(GRPO_EFORMAT, "%s: bytes after the header object", where);
        }
    grpo_err err = parse_root(root, where, out);
    cJSON_Delete(root);
    if (err != GRPO_OK)
        grpo_bridge__st_free(out);
    return err;
}

grpo_err
grpo_bridge__st_parse(const void *bytes, size_t len, const char *where, st_file *out)
{
    memset(out, 0, sizeof *out);
    if (len < 8)
        return grpo__fail(GRPO_EFORMAT, "%s: %zu bytes; too short for safetensors", where, len);
    uint64_t hl = grpo_bridge__get_u64(bytes);
    if (hl > GRPO_BATCH_MAX_HEADER || hl > len - 8)
        return grpo__fail(GRPO_EFORMAT,
                          "%s: header length %llu exceeds the %zu bytes given "
                          "(or the %llu limit)",
                          where, (unsigned long long)hl, len - 8,
                          (unsigned long long)GRPO_BATCH_MAX_HEADER);
    return grpo_bridge__st_parse_header((const char *)bytes + 8, (size_t)hl, len - 8 - hl, where,
                                        out);
}

const st_tensor *
grpo_bridge__st_find(const st_file *f, const char *name)
{
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0)
            return &f->t[i];
    return NULL;
}

const char *
grpo_bridge__st_meta(const st_file *f, const char *key)
{
    for (size_t i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_keys[i], key) == 0)
            return f->meta_vals[i];
    return NULL;
}
