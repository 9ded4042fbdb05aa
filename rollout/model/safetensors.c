/* safetensors: the header parser (bounded, every offset checked, no overlaps) and the read-only
 * memory mapping of a file. Tensor data is never copied here: pointers point into the mapping. */
#include "rollout/model/model_int.h"
#include "common/json.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    const char *name;
    int dtype; /* grpo_dtype or -1 */
    int size;
} dtype_info;

static const dtype_info dtypes[] = {
    {"F32", GRPO_DT_F32, 4}, {"BF16", GRPO_DT_BF16, 2},
    {"F16", GRPO_DT_F16, 2}, {"F8_E4M3", GRPO_DT_F8E4M3, 1},
    {"F64", -1, 8},          {"F8_E5M2", -1, 1},
    {"I64", -1, 8},          {"I32", -1, 4},
    {"I16", -1, 2},          {"I8", -1, 1},
    {"U64", -1, 8},          {"U32", -1, 4},
    {"U16", -1, 2},          {"U8", -1, 1},
    {"BOOL", -1, 1},
};

void
grpo_model__st_header_fini(grpo_st_header *h)
{
    if (h == NULL)
        return;
    for (int i = 0; i < h->n; i++)
        free(h->t[i].name);
    free(h->t);
    memset(h, 0, sizeof *h);
}

static int
cmp_begin(const void *a, const void *b)
{
    const grpo_st_tensor *x = *(grpo_st_tensor *const *)a, *y = *(grpo_st_tensor *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : 0;
}

/* One "name": {"dtype", "shape", "data_offsets"} entry. */
static grpo_err
parse_entry(const cJSON *e, const char *where, uint64_t data_len, grpo_st_tensor *t)
{
    if (!cJSON_IsObject(e))
        return grpo__fail(GRPO_EFORMAT, "%s: tensor \"%s\": expected an object", where, t->name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(off) ||
        cJSON_GetArraySize(off) != 2)
        return grpo__fail(GRPO_EFORMAT,
                          "%s: tensor \"%s\": needs \"dtype\" (string), \"shape\" "
                          "(list) and \"data_offsets\" ([begin, end])",
                          where, t->name);
    size_t di = 0, nd = sizeof dtypes / sizeof dtypes[0];
    while (di < nd && strcmp(dtypes[di].name, dt->valuestring) != 0)
        di++;
    if (di == nd)
        return grpo__fail(GRPO_EFORMAT, "%s: tensor \"%s\": unknown dtype \"%.16s\"", where,
                          t->name, dt->valuestring);
    t->dtype = dtypes[di].dtype;
    snprintf(t->dtype_name, sizeof t->dtype_name, "%s", dtypes[di].name);
    int n = cJSON_GetArraySize(sh);
    if (n > GRPO_ST_MAX_DIMS)
        return grpo__fail(GRPO_EFORMAT, "%s: tensor \"%s\": %d dimensions (at most %d)", where,
                          t->name, n, GRPO_ST_MAX_DIMS);
    t->ndim = n;
    uint64_t count = 1;
    for (int i = 0; i < n; i++) {
        const cJSON *d = cJSON_GetArrayItem(sh, i);
        if (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble > 9.0e15 ||
            d->valuedouble != (double)(int64_t)d->valuedouble)
            return grpo__fail(GRPO_EFORMAT, "%s: tensor \"%s\": shape[%d] is not a dimension",
                              where, t->name, i);
        t->shape[i] = (int64_t)d->valuedouble;
        if (t->shape[i] != 0 && count > UINT64_MAX / 16 / (uint64_t)t->shape[i])
            return grpo__fail(GRPO_EFORMAT, "%s: tensor \"%s\": shape overflows", where, t->name);
        count *= (uint64_t)t->shape[i];
    }
    double ob = cJSON_GetArrayItem(off, 0)->valuedouble,
           oe = cJSON_GetArrayItem(off, 1)->valuedouble;
    if (!cJSON_IsNumber(cJSON_GetArrayItem(off, 0)) ||
        !cJSON_IsNumber(cJSON_GetArrayItem(off, 1)) || ob < 0 || oe < ob || oe > 9.0e15 ||
        ob != (double)(uint64_t)ob || oe != (double)(uint64_t)oe)
        return grpo__fail(GRPO_EFORMAT, "%s: tensor \"%s\": bad data_offsets", where, t->name);
    t->begin = (uint64_t)ob;
    t->end = (uint64_t)oe;
    uint64_t want = count * (uint64_t)dtypes[di].size;
    if (t->end - t->begin != want)
        return grpo__fail(GRPO_EFORMAT,
                          "%s: tensor \"%s\": data_offsets span %llu bytes; dtype "
                          "and shape need %llu",
                          where, t->name, (unsigned long long)(t->end - t->begin),
                          (unsigned long long)want);
    if (t->end > data_len)
        return grpo__fail(GRPO_EFORMAT,
                          "%s: tensor \"%s\": data [%llu, %llu) runs past the end "
                          "of the file (%llu data bytes): truncated file?",
                          where, t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                          (unsigned long long)data_len);
    return GRPO_OK;
}

static grpo_err
check_overlaps(grpo_st_header *h, const char *where)
{
    if (h->n < 2)
        return GRPO_OK;
    grpo_st_tensor **v = malloc((size_t)h->n * sizeof *v);
    if (v == NULL)
        return grpo__fail(GRPO_ENOMEM, "%s: out of memory", where);
    for (int i = 0; i < h->n; i++)
        v[i] = &h->t[i];
    qsort(v, (size_t)h->n, sizeof *v, cmp_begin);
    grpo_err err = GRPO_OK;
    for (int i = 1; i < h->n && err == GRPO_OK; i++)
        if (v[i]->begin < v[i - 1]->end)
            err = grpo__fail(GRPO_EFORMAT, "%s: tensors \"%s\" and \"%s\" overlap", where,
                             v[i - 1]->name, v[i]->name);
    free(v);
    return err;
}

grpo_err
grpo_model__st_parse(const uint8_t *buf, size_t len, const char *where, grpo_st_header *out)
{
    memset(out, 0, sizeof *out);
    if (len < 8)
        return grpo__fail(GRPO_EFORMAT, "%s: %zu bytes; too short for a safetensors file", where,
                          len);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | buf[i];
    if (hl < 2 || hl > GRPO_ST_MAX_HEADER || hl > len - 8)
        return grpo__fail(GRPO_EFORMAT,
                          "%s: header length %llu is not in [2, min(%u, file size "
                          "- 8 = %zu)]: not safetensors or truncated",
                          where, (unsigned long long)hl, GRPO_ST_MAX_HEADER, len - 8);
    cJSON *j = NULL;
    grpo_err err = grpo__json_parse((const char *)buf + 8, (size_t)hl, where, &j);
    if (err != GRPO_OK)
        return err;
    if (!cJSON_IsObject(j)) {
        err = grpo__fail(GRPO_EFORMAT, "%s: header is not a JSON object", where);
        goto done;
    }
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, j) n++;
    out->t = calloc((size_t)(n > 0 ? n : 1), sizeof *out->t);
    if (out->t == NULL) {
        err = grpo__fail(GRPO_ENOMEM, "%s: out of memory", where);
        goto done;
    }
    out->data_off = 8 + hl;
    uint64_t data_len = len - out->data_off;
    cJSON_ArrayForEach(e, j)
    {
        if (strcmp(e->string, "__metadata__") == 0) {
            if (!cJSON_IsObject(e)) {
                err = grpo__fail(GRPO_EFORMAT, "%s: __metadata__ must be an object", where);
                goto done;
            }
            continue;
        }
        grpo_st_tensor *t = &out->t[out->n];
        if ((t->name = strdup(e->string)) == NULL) {
            err = grpo__fail(GRPO_ENOMEM, "%s: out of memory", where);
            goto done;
        }
        out->n++;
        if ((err = parse_entry(e, where, data_len, t)) != GRPO_OK)
            goto done;
        t->data = buf + out->data_off + t->begin;
    }
    err = check_overlaps(out, where);
done:
    cJSON_Delete(j);
    if (err != GRPO_OK)
        grpo_model__st_header_fini(out);
    return err;
}

grpo_err
grpo_model__st_open(grpo_st_file *f, const char *path)
{
    memset(f, 0, sizeof *f);
    if ((f->path = strdup(path)) == NULL)
        return grpo__fail(GRPO_ENOMEM, "%s: out of memory", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return grpo__fail_errno(
            grpo__err_from_errno(errno) == GRPO_EIO ? GRPO_ENOTFOUND : grpo__err_from_errno(errno),
            errno, "%s: cannot open", path);
    struct stat st;
    grpo_err err = GRPO_OK;
    if (fstat(fd, &st) != 0) {
        err = grpo__fail_errno(GRPO_EIO, errno, "%s: cannot stat", path);
        goto done;
    }
    f->size = (size_t)st.st_size;
    if (f->size < 8) {
        err =
            grpo__fail(GRPO_EFORMAT, "%s: %zu bytes; too short for a safetensors file (truncated?)",
                       path, f->size);
        goto done;
    }
    f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        err = grpo__fail_errno(GRPO_EIO, errno, "%s: cannot map", path);
        goto done;
    }
    err = grpo_model__st_parse(f->map, f->size, path, &f->h);
done:
    close(fd);
    return err;
}

void
grpo_model__st_close(grpo_st_file *f)
{
    if (f == NULL)
        return;
    grpo_model__st_header_fini(&f->h);
    if (f->map != NULL)
        munmap(f->map, f->size);
    free(f->path);
    memset(f, 0, sizeof *f);
}
