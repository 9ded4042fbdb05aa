/* safetensors model files: the read-only memory mapping of a file and its header, parsed by the
 * shared parser (common/safetensors.c: bounded, every offset checked, no overlaps) into the
 * model's tensor table. Tensor data is never copied here: pointers point into the mapping. */
#include "rollout/model/model_int.h"
#include "common/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(GRPO_ST_MAX_DIMS >= GRPO__ST_MAX_DIMS, "model tensors hold every parsed shape");

/* The safetensors dtypes the kernels compute in; every other valid one maps to -1. */
static int
model_dtype(grpo__st_dtype d)
{
    switch (d) {
    case GRPO__ST_F32:
        return GRPO_DT_F32;
    case GRPO__ST_BF16:
        return GRPO_DT_BF16;
    case GRPO__ST_F16:
        return GRPO_DT_F16;
    case GRPO__ST_F8_E4M3:
        return GRPO_DT_F8E4M3;
    default:
        return -1;
    }
}

/* Model files: header up to GRPO_ST_MAX_HEADER, any names, metadata not kept, gaps allowed. */
static const grpo__st_opts model_opts = {
    .max_header = GRPO_ST_MAX_HEADER,
    .max_int = 9000000000000000ull, /* 9e15 */
    .max_elems = UINT64_MAX / 16,
    .max_name = 0,
    .strict_json = false,
    .strict_meta = false,
    .no_gaps = false,
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

grpo_err
grpo_model__st_parse(const uint8_t *buf, size_t len, const char *where, grpo_st_header *out)
{
    memset(out, 0, sizeof *out);
    grpo__st_header c;
    grpo_err err = grpo__st_parse(buf, len, where, &model_opts, &c);
    if (err != GRPO_OK)
        return err;
    if (c.n > (size_t)INT32_MAX || (out->t = calloc(c.n > 0 ? c.n : 1, sizeof *out->t)) == NULL) {
        grpo__st_header_fini(&c);
        return grpo__fail(GRPO_ENOMEM, "%s: out of memory", where);
    }
    out->data_off = c.data_off;
    for (size_t i = 0; i < c.n; i++) {
        const grpo__st_tensor *s = &c.t[i];
        grpo_st_tensor *t = &out->t[out->n++];
        t->name = c.t[i].name; /* taken over */
        c.t[i].name = NULL;
        t->dtype = model_dtype(s->dtype);
        snprintf(t->dtype_name, sizeof t->dtype_name, "%s", grpo__st_dtype_name(s->dtype));
        t->ndim = (int)s->ndim;
        for (size_t d = 0; d < s->ndim; d++)
            t->shape[d] = (int64_t)s->shape[d]; /* <= 2^53 */
        t->begin = s->begin;
        t->end = s->end;
        t->data = buf + out->data_off + t->begin;
    }
    grpo__st_header_fini(&c);
    return GRPO_OK;
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
