/* The safetensors header parser shared by the model loader and the trainer bridge (see
 * common/safetensors.h). Bounded: never reads outside the given bytes, every number is an exact
 * integer of at most 2^53, every size product is checked before it can overflow. Uses only the
 * cJSON subset that tests/gpu/cjson_min provides (GPU-only builds). */
#include "common/safetensors.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;
} dtypes[GRPO__ST_N_DTYPES] = {
    {"BOOL", 1}, {"U8", 1},   {"I8", 1},  {"I16", 2},     {"U16", 2},
    {"F16", 2},  {"BF16", 2}, {"I32", 4}, {"U32", 4},     {"F32", 4},
    {"F64", 8},  {"I64", 8},  {"U64", 8}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
};

size_t
grpo__st_dtype_size(grpo__st_dtype d)
{
    return dtypes[d].size;
}

const char *
grpo__st_dtype_name(grpo__st_dtype d)
{
    return dtypes[d].name;
}

uint64_t
grpo__st_get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

void
grpo__st_header_fini(grpo__st_header *h)
{
    if (h == NULL)
        return;
    for (size_t i = 0; i < h->n; i++)
        free(h->t[i].name);
    for (size_t i = 0; i < h->n_meta; i++) {
        free(h->meta_keys[i]);
        free(h->meta_vals[i]);
    }
    free(h->meta_keys);
    free(h->meta_vals);
    free(h->t);
    memset(h, 0, sizeof *h);
}

/* A JSON number that is an exact integer in [0, max] (max <= 2^53, so exact as a double). */
static bool
json_uint(const cJSON *v, uint64_t max, uint64_t *out)
{
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= (double)max) || d != (double)(uint64_t)d)
        return false;
    *out = (uint64_t)d;
    return true;
}

static grpo_err
parse_meta(const cJSON *m, const char *where, const grpo__st_opts *o, grpo__st_header *h)
{
    if (!cJSON_IsObject(m))
        return grpo__fail(GRPO_EFORMAT, "%s: __metadata__ is not an object", where);
    if (!o->strict_meta)
        return GRPO_OK;
    size_t n = (size_t)cJSON_GetArraySize(m);
    h->meta_keys = calloc(n ? n : 1, sizeof *h->meta_keys);
    h->meta_vals = calloc(n ? n : 1, sizeof *h->meta_vals);
    if (!h->meta_keys || !h->meta_vals)
        return grpo__fail(GRPO_ENOMEM, "%s: out of memory", where);
    const cJSON *it;
    cJSON_ArrayForEach(it, m)
    {
        if (!cJSON_IsString(it) || it->valuestring == NULL)
            return grpo__fail(GRPO_EFORMAT, "%s: __metadata__ \"%s\" is not a string", where,
                              it->string);
        h->meta_keys[h->n_meta] = strdup(it->string);
        h->meta_vals[h->n_meta] = strdup(it->valuestring);
        h->n_meta++; /* counted before the check: fini frees what was allocated */
        if (!h->meta_keys[h->n_meta - 1] || !h->meta_vals[h->n_meta - 1])
            return grpo__fail(GRPO_ENOMEM, "%s: out of memory", where);
    }
    return GRPO_OK;
}

/* One "name": {"dtype", "shape", "data_offsets"} entry; t->name is already set. */
static grpo_err
parse_tensor(const cJSON *v, const char *where, const grpo__st_opts *o, uint64_t data_len,
             grpo__st_tensor *t)
{
    const char *name = t->name;
    if (!cJSON_IsObject(v))
        return grpo__fail(GRPO_EFORMAT, "%s: tensor \"%s\": expected an object", where, name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(v, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(v, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(v, "data_offsets");
    if (!cJSON_IsString(dt) || dt->valuestring == NULL)
        return grpo__fail(GRPO_EFORMAT, "%s: tensor \"%s\": missing \"dtype\" (a string)", where,
                          name);
    int d = 0;
    while (d < GRPO__ST_N_DTYPES && strcmp(dtypes[d].name, dt->valuestring) != 0)
        d++;
    if (d == GRPO__ST_N_DTYPES)
        return grpo__fail(GRPO_EFORMAT, "%s: tensor \"%s\": unknown dtype \"%.16s\"", where, name,
                          dt->valuestring);
    t->dtype = (grpo__st_dtype)d;
    if (!cJSON_IsArray(shape))
        return grpo__fail(GRPO_EFORMAT, "%s: tensor \"%s\": missing \"shape\" (a list)", where,
                          name);
    int nd = cJSON_GetArraySize(shape);
    if (nd > GRPO__ST_MAX_DIMS)
        return grpo__fail(GRPO_EFORMAT, "%s: tensor \"%s\": shape has %d dimensions (at most %d)",
                          where, name, nd, GRPO__ST_MAX_DIMS);
    uint64_t nel = 1;
    const cJSON *it;
    cJSON_ArrayForEach(it, shape)
    {
        uint64_t dim;
        if (!json_uint(it, o->max_int, &dim))
            return grpo__fail(GRPO_EFORMAT, "%s: tensor \"%s\": shape[%zu] is not a dimension",
                              where, name, t->ndim);
        t->shape[t->ndim++] = dim;
        if (dim != 0 && nel > o->max_elems / dim)
            return grpo__fail(GRPO_EFORMAT,
                              "%s: tensor \"%s\": shape overflows (more than %llu elements)", where,
                              name, (unsigned long long)o->max_elems);
        nel *= dim;
    }
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
        !json_uint(cJSON_GetArrayItem(offs, 0), o->max_int, &t->begin) ||
        !json_uint(cJSON_GetArrayItem(offs, 1), o->max_int, &t->end) || t->begin > t->end)
        return grpo__fail(GRPO_EFORMAT,
                          "%s: tensor \"%s\": missing or bad \"data_offsets\" (need [begin, end] "
                          "with begin <= end)",
                          where, name);
    uint64_t want = nel * dtypes[d].size; /* nel <= UINT64_MAX / 8, size <= 8 */
    if (t->end - t->begin != want)
        return grpo__fail(GRPO_EFORMAT,
                          "%s: tensor \"%s\": data_offsets span %llu bytes; %llu elements of %s "
                          "need %llu",
                          where, name, (unsigned long long)(t->end - t->begin),
                          (unsigned long long)nel, dtypes[d].name, (unsigned long long)want);
    if (t->end > data_len)
        return grpo__fail(GRPO_EFORMAT,
                          "%s: tensor \"%s\": data [%llu, %llu) runs past the end of the %llu "
                          "data bytes: truncated?",
                          where, name, (unsigned long long)t->begin, (unsigned long long)t->end,
                          (unsigned long long)data_len);
    return GRPO_OK;
}

static int
cmp_name(const void *a, const void *b)
{
    return strcmp((*(const grpo__st_tensor *const *)a)->name,
                  (*(const grpo__st_tensor *const *)b)->name);
}

static int
cmp_begin(const void *a, const void *b)
{
    const grpo__st_tensor *x = *(const grpo__st_tensor *const *)a,
                          *y = *(const grpo__st_tensor *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* Unique names; sorted by (begin, end) no tensor starts before the previous one ends; with
 * no_gaps each starts exactly there (zero-size tensors anywhere in between) and the last one
 * ends at data_len. */
static grpo_err
check_layout(const grpo__st_header *h, const char *where, const grpo__st_opts *o)
{
    const grpo__st_tensor **s = malloc((h->n ? h->n : 1) * sizeof *s);
    if (s == NULL)
        return grpo__fail(GRPO_ENOMEM, "%s: out of memory", where);
    for (size_t i = 0; i < h->n; i++)
        s[i] = &h->t[i];
    grpo_err err = GRPO_OK;
    qsort(s, h->n, sizeof *s, cmp_name);
    for (size_t i = 1; i < h->n && err == GRPO_OK; i++)
        if (strcmp(s[i]->name, s[i - 1]->name) == 0)
            err = grpo__fail(GRPO_EFORMAT, "%s: tensor \"%s\" appears twice", where, s[i]->name);
    qsort(s, h->n, sizeof *s, cmp_begin);
    uint64_t pos = 0;
    for (size_t i = 0; i < h->n && err == GRPO_OK; i++) {
        if (i > 0 && s[i]->begin < pos)
            err = grpo__fail(GRPO_EFORMAT, "%s: tensors \"%s\" and \"%s\" overlap", where,
                             s[i - 1]->name, s[i]->name);
        else if (o->no_gaps && s[i]->begin != pos)
            err = grpo__fail(GRPO_EFORMAT,
                             "%s: tensor \"%s\" starts at %llu; expected %llu (a gap)", where,
                             s[i]->name, (unsigned long long)s[i]->begin, (unsigned long long)pos);
        pos = s[i]->end;
    }
    if (err == GRPO_OK && o->no_gaps && pos != h->data_len)
        err = grpo__fail(GRPO_EFORMAT, "%s: tensors cover %llu of %llu data bytes", where,
                         (unsigned long long)pos, (unsigned long long)h->data_len);
    free(s);
    return err;
}

static grpo_err
parse_root(const cJSON *root, const char *where, const grpo__st_opts *o, grpo__st_header *h)
{
    grpo_err err;
    if (!cJSON_IsObject(root))
        return grpo__fail(GRPO_EFORMAT, "%s: header is not a JSON object", where);
    size_t n = (size_t)cJSON_GetArraySize(root);
    h->t = calloc(n ? n : 1, sizeof *h->t);
    if (h->t == NULL)
        return grpo__fail(GRPO_ENOMEM, "%s: out of memory", where);
    const cJSON *it;
    bool have_meta = false;
    cJSON_ArrayForEach(it, root)
    {
        if (strcmp(it->string, "__metadata__") == 0) {
            if (have_meta && o->strict_meta)
                return grpo__fail(GRPO_EFORMAT, "%s: __metadata__ appears twice", where);
            have_meta = true;
            if ((err = parse_meta(it, where, o, h)) != GRPO_OK)
                return err;
            continue;
        }
        size_t nl = strlen(it->string);
        if (o->max_name != 0 && (nl == 0 || nl >= o->max_name))
            return grpo__fail(GRPO_EFORMAT, "%s: a tensor name is empty or longer than %zu bytes",
                              where, o->max_name - 1);
        grpo__st_tensor *t = &h->t[h->n];
        if ((t->name = strdup(it->string)) == NULL)
            return grpo__fail(GRPO_ENOMEM, "%s: out of memory", where);
        h->n++;
        if ((err = parse_tensor(it, where, o, h->data_len, t)) != GRPO_OK)
            return err;
    }
    return check_layout(h, where, o);
}

grpo_err
grpo__st_parse_header(const char *json, size_t json_len, uint64_t data_len, const char *where,
                      const grpo__st_opts *o, grpo__st_header *out)
{
    memset(out, 0, sizeof *out);
    out->header_len = json_len;
    out->data_off = 8 + (uint64_t)json_len;
    out->data_len = data_len;
    if (o->strict_json && (json_len == 0 || json[0] != '{'))
        return grpo__fail(GRPO_EFORMAT, "%s: header does not start with '{'", where);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, json_len, &end, 0);
    if (root == NULL)
        return grpo__fail(GRPO_EFORMAT, "%s: header is not valid JSON (near byte %zu)", where,
                          end != NULL && end >= json && end <= json + json_len
                              ? (size_t)(end - json)
                              : (size_t)0);
    grpo_err err = GRPO_OK;
    if (o->strict_json && end != NULL) /* only the format's space padding after the object */
        for (const char *p = end; p < json + json_len && err == GRPO_OK; p++)
            if (*p != ' ')
                err = grpo__fail(GRPO_EFORMAT, "%s: bytes after the header object", where);
    if (err == GRPO_OK)
        err = parse_root(root, where, o, out);
    cJSON_Delete(root);
    if (err != GRPO_OK)
        grpo__st_header_fini(out);
    return err;
}

grpo_err
grpo__st_parse(const void *bytes, size_t len, const char *where, const grpo__st_opts *o,
               grpo__st_header *out)
{
    memset(out, 0, sizeof *out);
    if (len < 8)
        return grpo__fail(GRPO_EFORMAT, "%s: %zu bytes; too short for a safetensors file", where,
                          len);
    uint64_t hl = grpo__st_get_u64(bytes);
    if (hl < 2 || hl > o->max_header || hl > len - 8)
        return grpo__fail(GRPO_EFORMAT,
                          "%s: header length %llu is not in [2, min(%llu, %zu bytes after the "
                          "length)]: not safetensors or truncated",
                          where, (unsigned long long)hl, (unsigned long long)o->max_header,
                          len - 8);
    return grpo__st_parse_header((const char *)bytes + 8, (size_t)hl, len - 8 - hl, where, o, out);
}
