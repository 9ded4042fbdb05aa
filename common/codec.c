/* The little-endian binary codec shared by the wire protocols (see common/codec.h). Byte order is
 * spelled out with shifts, so an encoding is the same on any host. */
#include "common/codec.h"

#include <stdlib.h>
#include <string.h>

/* Appends n bytes unless the writer has already failed. */
static void
put(grpo_wr *w, const void *p, size_t n)
{
    if (!w->oom && n > 0 && grpo__buf_append(&w->b, p, n) != GRPO_OK)
        w->oom = true;
}

void
grpo__put_u32(grpo_wr *w, uint32_t v)
{
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    put(w, b, 4);
}

void
grpo__put_u64(grpo_wr *w, uint64_t v)
{
    grpo__put_u32(w, (uint32_t)v);
    grpo__put_u32(w, (uint32_t)(v >> 32));
}

void
grpo__put_i32(grpo_wr *w, int32_t v)
{
    grpo__put_u32(w, (uint32_t)v);
}

void
grpo__put_f32(grpo_wr *w, float v)
{
    grpo__put_u32(w, (grpo_f32_bits){.f = v}.u);
}

void
grpo__put_f64(grpo_wr *w, double v)
{
    grpo__put_u64(w, (grpo_f64_bits){.f = v}.u);
}

void
grpo__put_bytes(grpo_wr *w, const void *p, size_t n)
{
    if (n >= GRPO_CODEC_NULL && !w->oom) {
        grpo__fail(GRPO_EINVAL, "codec: a field of %zu bytes is over the u32 length limit", n);
        w->oom = true;
    }
    grpo__put_u32(w, (uint32_t)n);
    put(w, p, n);
}

void
grpo__put_strn(grpo_wr *w, const char *s, size_t n)
{
    if (s == NULL)
        grpo__put_u32(w, GRPO_CODEC_NULL);
    else
        grpo__put_bytes(w, s, n);
}

void
grpo__put_str(grpo_wr *w, const char *s)
{
    grpo__put_strn(w, s, s ? strlen(s) : 0);
}

const char *
grpo__get_raw(grpo_rd *r, size_t n)
{
    if (r->bad || n > r->len - r->off) {
        r->bad = true;
        return NULL;
    }
    if (n == 0) /* r->p may be NULL for an empty buffer */
        return "";
    r->off += n;
    return r->p + r->off - n;
}

static uint32_t
le32(const unsigned char *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

uint32_t
grpo__get_u32(grpo_rd *r)
{
    const unsigned char *b = (const unsigned char *)grpo__get_raw(r, 4);
    return b ? le32(b) : 0;
}

uint64_t
grpo__get_u64(grpo_rd *r)
{
    const unsigned char *b = (const unsigned char *)grpo__get_raw(r, 8);
    return b ? (uint64_t)le32(b) | (uint64_t)le32(b + 4) << 32 : 0;
}

int32_t
grpo__get_i32(grpo_rd *r)
{
    return (int32_t)grpo__get_u32(r);
}

float
grpo__get_f32(grpo_rd *r)
{
    return (grpo_f32_bits){.u = grpo__get_u32(r)}.f;
}

double
grpo__get_f64(grpo_rd *r)
{
    return (grpo_f64_bits){.u = grpo__get_u64(r)}.f;
}

const char *
grpo__get_bytes(grpo_rd *r, size_t *n)
{
    uint32_t len = grpo__get_u32(r);
    const char *p = NULL;
    *n = 0;
    if (r->bad || len == GRPO_CODEC_NULL)
        return NULL;
    if ((p = grpo__get_raw(r, len)) != NULL)
        *n = len;
    return p;
}

char *
grpo__get_str(grpo_rd *r, size_t *n)
{
    size_t len = 0;
    const char *p = grpo__get_bytes(r, &len);
    char *s = p ? malloc(len + 1) : NULL;
    if (n)
        *n = 0;
    if (p == NULL)
        return NULL;
    if (s == NULL) {
        r->bad = true;
        return NULL;
    }
    memcpy(s, p, len);
    s[len] = '\0';
    if (n)
        *n = len;
    return s;
}

size_t
grpo__rd_left(const grpo_rd *r)
{
    return r->len - r->off;
}
