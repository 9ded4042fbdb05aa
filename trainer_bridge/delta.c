/* Weight deltas (schemas/weights_delta.md): a safetensors file holding the result's header, the
 * tensors that changed (whole, or as 2-D blocks) and the versions and hashes it goes between. The
 * result is built beside the base in fresh memory; the caller swaps only a result whose sha256 is
 * the one the trainer sent. Every field is untrusted. */
#include "trainer_bridge/bridge_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BLOCK_MAX ((uint64_t)1 << 20)

static grpo_err
parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    if (s == NULL || *s == '\0' || (*s != '-' && (*s < '0' || *s > '9')))
        return GRPO_EFORMAT;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi)
        return GRPO_EFORMAT;
    *out = v;
    return GRPO_OK;
}

static int
is_hex64(const char *s)
{
    if (s == NULL || strlen(s) != 64)
        return 0;
    for (const char *c = s; *c; c++)
        if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f')))
            return 0;
    return 1;
}

/* The metadata every delta carries. */
static grpo_err
read_info(const st_file *f, const char *where, grpo_weights_delta_info *in)
{
    const char *fmt = grpo_bridge__st_meta(f, "format");
    const char *bv = grpo_bridge__st_meta(f, "base_version");
    const char *rv = grpo_bridge__st_meta(f, "result_version");
    const char *bs = grpo_bridge__st_meta(f, "base_sha256");
    const char *rs = grpo_bridge__st_meta(f, "result_sha256");
    const char *rb = grpo_bridge__st_meta(f, "result_bytes");
    int64_t b = 0;
    if (fmt == NULL || strcmp(fmt, GRPO_WEIGHTS_DELTA_FORMAT) != 0)
        return grpo__fail(GRPO_EFORMAT, "%s: __metadata__ format is not \"%s\"", where,
                          GRPO_WEIGHTS_DELTA_FORMAT);
    if (parse_i64(bv, 0, INT64_MAX, &in->base_version) != GRPO_OK ||
        parse_i64(rv, 0, INT64_MAX, &in->result_version) != GRPO_OK ||
        in->result_version <= in->base_version)
        return grpo__fail(GRPO_EFORMAT, "%s: base_version / result_version are not integers "
                                        "0 <= base < result", where);
    if (!is_hex64(bs) || !is_hex64(rs))
        return grpo__fail(GRPO_EFORMAT, "%s: base_sha256 / result_sha256 are not 64 lowercase hex",
                          where);
    if (parse_i64(rb, 10, INT64_MAX, &b) != GRPO_OK)
        return grpo__fail(GRPO_EFORMAT, "%s: result_bytes is not an integer >= 10", where);
    memcpy(in->base_sha256, bs, 65);
    memcpy(in->result_sha256, rs, 65);
    in->result_bytes = (uint64_t)b;
    return GRPO_OK;
}

grpo_err
grpo_bridge_delta_peek(const void *delta, size_t len, const char *where,
                       grpo_weights_delta_info *info)
{
    st_file f;
    grpo_err err = grpo_bridge__st_parse(delta, len, where, &f);
    if (err != GRPO_OK)
        return err;
    err = read_info(&f, where, info);
    grpo_bridge__st_free(&f);
    return err;
}

/* Which delta tensor carries what: "full/X", "ids/X", "data/X" or "header". */
typedef struct {
    const st_tensor *full, *ids, *data;
    uint64_t br, bc; /* block shape from "block:X" */
} source;

static int
same_layout(const st_tensor *a, const st_tensor *b)
{
    if (a->dtype != b->dtype || a->ndim != b->ndim)
        return 0;
    for (size_t i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            return 0;
    return 1;
}

static grpo_err
parse_block(const char *s, uint64_t *br, uint64_t *bc)
{
    char *end;
    if (s == NULL || *s < '1' || *s > '9')
        return GRPO_EFORMAT;
    unsigned long long r = strtoull(s, &end, 10);
    if (*end != 'x' || end[1] < '1' || end[1] > '9')
        return GRPO_EFORMAT;
    unsigned long long c = strtoull(end + 1, &end, 10);
    if (*end != '\0' || r > BLOCK_MAX || c > BLOCK_MAX)
        return GRPO_EFORMAT;
    *br = r, *bc = c;
    return GRPO_OK;
}

/* Binds every delta tensor and "block:" key to a tensor of the result; anything else is an error. */
static grpo_err
bind_sources(const st_file *d, const st_file *r, const char *where, source *src,
             const st_tensor **header)
{
    *header = NULL;
    for (size_t i = 0; i < d->n; i++) {
        const st_tensor *t = &d->t[i];
        const char *slash = strchr(t->name, '/');
        if (strcmp(t->name, "header") == 0) {
            *header = t;
            continue;
        }
        const st_tensor *x = slash ? grpo_bridge__st_find(r, slash + 1) : NULL;
        if (x == NULL)
            return grpo__fail(GRPO_EFORMAT, "%s: tensor %s names no tensor of the result", where,
                              t->name);
        source *s = &src[x - r->t];
        size_t pl = (size_t)(slash - t->name);
        const st_tensor **slot = pl == 4 && memcmp(t->name, "full", 4) == 0   ? &s->full
                                 : pl == 3 && memcmp(t->name, "ids", 3) == 0  ? &s->ids
                                 : pl == 4 && memcmp(t->name, "data", 4) == 0 ? &s->data
                                                                              : NULL;
        if (slot == NULL)
            return grpo__fail(GRPO_EFORMAT, "%s: tensor %s: expected full/, ids/ or data/", where,
                              t->name);
        *slot = t; /* names are unique, so each slot is set once */
    }
    for (size_t i = 0; i < d->n_meta; i++) {
        const char *k = d->meta_keys[i];
        if (strncmp(k, "block:", 6) != 0)
            continue;
        const st_tensor *x = grpo_bridge__st_find(r, k + 6);
        if (x == NULL)
            return grpo__fail(GRPO_EFORMAT, "%s: __metadata__ %s names no tensor of the result",
                              where, k);
        source *s = &src[x - r->t];
        if (parse_block(d->meta_vals[i], &s->br, &s->bc) != GRPO_OK)
            return grpo__fail(GRPO_EFORMAT, "%s: __metadata__ %s is \"%s\"; expected RxC, 1..%llu",
                              where, k, d->meta_vals[i], (unsigned long long)BLOCK_MAX);
    }
    if (*header == NULL || (*header)->dtype != ST_U8 || (*header)->ndim != 1)
        return grpo__fail(GRPO_EFORMAT, "%s: no 1-D U8 tensor \"header\"", where);
    return GRPO_OK;
}

/* Copies the base tensor and overwrites the listed blocks with the delta's data. */
static grpo_err
patch_blocks(uint8_t *dst, const st_tensor *x, const source *s, const uint8_t *ddata,
             const char *where)
{
    size_t es = grpo_bridge__st_dtype_size(x->dtype);
    if (x->ndim != 2 || s->br == 0 || s->ids->dtype != ST_I64 || s->ids->ndim != 1 ||
        s->data->dtype != x->dtype || s->data->ndim != 1)
        return grpo__fail(GRPO_EFORMAT, "%s: %s: blocks need a 2-D tensor, block:%s, I64 ids/ "
                                        "and 1-D data/ of its dtype", where, x->name, x->name);
    uint64_t rows = x->shape[0], cols = x->shape[1];
    uint64_t gr = (rows + s->br - 1) / s->br, gc = (cols + s->bc - 1) / s->bc;
    uint64_t k = s->ids->shape[0], used = 0, dn = s->data->shape[0];
    const uint8_t *ids = ddata + s->ids->begin, *src = ddata + s->data->begin;
    int64_t prev = -1;
    for (uint64_t i = 0; i < k; i++) {
        int64_t id = (int64_t)grpo_bridge__get_u64(ids + 8 * i);
        if (id <= prev || (uint64_t)id >= gr * gc)
            return grpo__fail(GRPO_EFORMAT, "%s: %s: block id %" PRId64 " at %" PRIu64
                              " is out of range [0, %" PRIu64 ") or not increasing",
                              where, x->name, id, i, gr * gc);
        prev = id;
        uint64_t r0 = (uint64_t)id / gc * s->br, c0 = (uint64_t)id % gc * s->bc;
        uint64_t h = rows - r0 < s->br ? rows - r0 : s->br;
        uint64_t w = cols - c0 < s->bc ? cols - c0 : s->bc;
        if (h * w > dn - used)
            return grpo__fail(GRPO_EFORMAT, "%s: %s: data/ ends inside block %" PRId64, where,
                              x->name, id);
        for (uint64_t y = 0; y < h; y++)
            memcpy(dst + ((r0 + y) * cols + c0) * es, src + (used + y * w) * es, w * es);
        used += h * w;
    }
    if (used != dn)
        return grpo__fail(GRPO_EFORMAT, "%s: %s: data/ holds %" PRIu64 " elements; the blocks "
                          "take %" PRIu64, where, x->name, dn, used);
    return GRPO_OK;
}

/* One result tensor from its source: the delta's whole tensor, the base patched, or the base. */
static grpo_err
fill_tensor(uint8_t *out, const st_tensor *x, const source *s, const uint8_t *ddata,
            const st_file *b, const uint8_t *bdata, const char *where)
{
    uint8_t *dst = out + x->begin;
    if (s->full != NULL) {
        if (s->ids || s->data || s->br || !same_layout(s->full, x))
            return grpo__fail(GRPO_EFORMAT, "%s: %s: full/ needs the result's dtype and shape, "
                                            "and no blocks beside it", where, x->name);
        memcpy(dst, ddata + s->full->begin, x->end - x->begin);
        return GRPO_OK;
    }
    const st_tensor *bt = grpo_bridge__st_find(b, x->name);
    if (bt == NULL || !same_layout(bt, x))
        return grpo__fail(GRPO_EFORMAT, "%s: %s is not in the delta and the base has no tensor "
                                        "of that name, dtype and shape", where, x->name);
    memcpy(dst, bdata + bt->begin, x->end - x->begin);
    if (s->ids == NULL && s->data == NULL && s->br == 0)
        return GRPO_OK;
    if (s->ids == NULL || s->data == NULL)
        return grpo__fail(GRPO_EFORMAT, "%s: %s: ids/, data/ and block: come together", where,
                          x->name);
    return patch_blocks(dst, x, s, ddata, where);
}

static grpo_err
build(const st_file *d, const uint8_t *ddata, const st_file *b, const uint8_t *bdata,
      const grpo_weights_delta_info *in, uint64_t max_bytes, const char *where, uint8_t **out)
{
    st_file r = {0};
    source *src = NULL;
    const st_tensor *h = NULL;
    grpo_err err = GRPO_OK;
    uint8_t *o = NULL;
    const st_tensor *ht = NULL;
    for (size_t i = 0; i < d->n && ht == NULL; i++)
        if (strcmp(d->t[i].name, "header") == 0)
            ht = &d->t[i];
    uint64_t hl = ht ? ht->end - ht->begin : 0;
    if (ht == NULL || hl + 8 > in->result_bytes || in->result_bytes > max_bytes ||
        in->result_bytes > SIZE_MAX)
        return grpo__fail(GRPO_EFORMAT, "%s: no header, or result_bytes %" PRIu64 " is not in "
                          "[8 + header, %" PRIu64 "]", where, in->result_bytes, max_bytes);
    if ((err = grpo_bridge__st_parse_header((const char *)ddata + ht->begin, (size_t)hl,
                                            in->result_bytes - 8 - hl, where, &r)) != GRPO_OK)
        return err;
    src = calloc(r.n ? r.n : 1, sizeof *src);
    o = malloc((size_t)in->result_bytes);
    if (src == NULL || o == NULL) {
        err = grpo__fail(GRPO_ENOMEM, "%s: out of memory for a %" PRIu64 "-byte result", where,
                         in->result_bytes);
        goto done;
    }
    if ((err = bind_sources(d, &r, where, src, &h)) != GRPO_OK)
        goto done;
    grpo_bridge__put_u64(o, hl);
    memcpy(o + 8, ddata + h->begin, (size_t)hl);
    for (size_t i = 0; i < r.n && err == GRPO_OK; i++)
        err = fill_tensor(o + 8 + hl, &r.t[i], &src[i], ddata, b, bdata, where);
done:
    free(src);
    grpo_bridge__st_free(&r);
    if (err != GRPO_OK) {
        free(o);
        o = NULL;
    }
    *out = o;
    return err;
}

grpo_err
grpo_bridge_delta_apply(const void *delta, size_t len, const void *base, size_t base_len,
                        uint64_t max_bytes, const char *where, void **out, size_t *out_len)
{
    st_file d, b;
    grpo_weights_delta_info in;
    char hex[65];
    uint8_t *o = NULL;
    *out = NULL, *out_len = 0;
    grpo_err err = grpo_bridge__st_parse(delta, len, where, &d);
    if (err != GRPO_OK)
        return err;
    if ((err = read_info(&d, where, &in)) != GRPO_OK)
        goto free_d;
    grpo_sha256_hex(base, base_len, hex);
    if (strcmp(hex, in.base_sha256) != 0) {
        err = grpo__fail(GRPO_ESTATE, "%s: the base's sha256 is %s; the delta is against %s",
                         where, hex, in.base_sha256);
        goto free_d;
    }
    if ((err = grpo_bridge__st_parse(base, base_len, "delta base", &b)) != GRPO_OK)
        goto free_d;
    err = build(&d, (const uint8_t *)delta + d.data_off, &b, (const uint8_t *)base + b.data_off,
                &in, max_bytes, where, &o);
    grpo_bridge__st_free(&b);
    if (err == GRPO_OK) {
        grpo_sha256_hex(o, (size_t)in.result_bytes, hex);
        if (strcmp(hex, in.result_sha256) != 0)
            err = grpo__fail(GRPO_EFORMAT, "%s: the result's sha256 is %s; expected %s", where,
                             hex, in.result_sha256);
    }
    if (err == GRPO_OK)
        *out = o, *out_len = (size_t)in.result_bytes;
    else
        free(o);
free_d:
    grpo_bridge__st_free(&d);
    return err;
}

static grpo_err
read_all(const char *path, uint64_t max, void **out, size_t *len)
{
    struct stat st;
    *out = NULL, *len = 0;
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return grpo__fail_errno(grpo__err_from_errno(errno), errno, "%s", path);
    if (fstat(fileno(f), &st) != 0 || (uint64_t)st.st_size > max) {
        fclose(f);
        return grpo__fail(GRPO_EFORMAT, "%s: larger than %" PRIu64 " bytes", path, max);
    }
    void *b = malloc(st.st_size ? (size_t)st.st_size : 1);
    size_t n = b ? fread(b, 1, (size_t)st.st_size, f) : 0;
    fclose(f);
    if (b == NULL || n != (size_t)st.st_size) {
        free(b);
        return grpo__fail(b ? GRPO_EIO : GRPO_ENOMEM, "%s: cannot read it whole", path);
    }
    *out = b, *len = n;
    return GRPO_OK;
}

static grpo_err
write_atomic(const char *path, const void *b, size_t n)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.partial", path);
    FILE *f = fopen(tmp, "wb");
    if (f == NULL)
        return grpo__fail_errno(grpo__err_from_errno(errno), errno, "%s", tmp);
    int bad = fwrite(b, 1, n, f) != n || fflush(f) != 0 || fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        unlink(tmp);
        return grpo__fail(GRPO_EIO, "%s: cannot write it", path);
    }
    return GRPO_OK;
}

grpo_err
grpo_bridge_delta_apply_file(const char *delta_path, const char *base_path, const char *out_path,
                             uint64_t max_bytes, grpo_weights_delta_info *info)
{
    void *d = NULL, *b = NULL, *o = NULL;
    size_t dn = 0, bn = 0, on = 0;
    grpo_err err = read_all(delta_path, max_bytes, &d, &dn);
    if (err == GRPO_OK)
        err = grpo_bridge_delta_peek(d, dn, delta_path, info);
    if (err == GRPO_OK)
        err = read_all(base_path, max_bytes, &b, &bn);
    if (err == GRPO_OK)
        err = grpo_bridge_delta_apply(d, dn, b, bn, max_bytes, delta_path, &o, &on);
    free(d);
    free(b);
    if (err == GRPO_OK)
        err = write_atomic(out_path, o, on);
    free(o);
    return err;
}
