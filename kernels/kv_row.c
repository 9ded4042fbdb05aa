/* KV cache rows in F32, BF16 or FP8 (E4M3 with per-block fp32 scales, a BF16 tail): the format,
 * and the conversions the cache writes with and the attention kernels read with (kernels.h).
 * Shared by the backends; every conversion is per value, rounding to nearest even. */
#include "kernels/kernels.h"

#include <math.h>
#include <string.h>

uint8_t
grpo_f32_to_e4m3(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN */
        return sign | 0x7f;
    if (a >= 0x43e00000u) /* >= 448 (and infinity): 448 */
        return sign | 0x7e;
    if (a < 0x3c800000u) { /* below 2^-6: a multiple of the subnormal step 2^-9 */
        float af;
        memcpy(&af, &a, 4);
        /* af * 512 is exact; rintf rounds to nearest even; 8 is code 0x08 = 2^-6 */
        return sign | (uint8_t)rintf(af * 512.0f);
    }
    /* drop 20 of the 23 mantissa bits, to nearest even; a carry moves into the exponent */
    uint32_t r = (a + 0x7ffffu + ((a >> 20) & 1u)) >> 20;
    uint32_t code = r - (120u << 3); /* exponent bias 127 -> 7 */
    return sign | (uint8_t)(code > 0x7e ? 0x7e : code);
}

static float e4m3_lut[256];
static int e4m3_ready;

static const float *
lut(void)
{
    if (!__atomic_load_n(&e4m3_ready, __ATOMIC_ACQUIRE)) {
        for (int i = 0; i < 256; i++) /* every thread writes the same values */
            e4m3_lut[i] = grpo_e4m3_to_f32((uint8_t)i);
        __atomic_store_n(&e4m3_ready, 1, __ATOMIC_RELEASE);
    }
    return e4m3_lut;
}

grpo_kv_fmt
grpo_kv_fmt_make(grpo_dtype dt, int32_t n, int32_t nq, int32_t blk)
{
    grpo_kv_fmt f = {dt, n, 0, 0, 4 * n};
    if (dt == GRPO_DT_BF16) {
        f.bytes = 2 * n;
    } else if (dt == GRPO_DT_F8E4M3) {
        f.nq = nq < n ? nq : n;
        f.blk = blk > 0 ? blk : 128;
        f.bytes = f.nq + 4 * ((f.nq + f.blk - 1) / f.blk) + 2 * (n - f.nq);
    }
    return f;
}

static inline uint16_t
bf16_at(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return h;
}

static void
encode_fp8(const grpo_kv_fmt *f, const float *x, uint8_t *dst)
{
    int32_t nb = (f->nq + f->blk - 1) / f->blk;
    uint8_t *sc = dst + f->nq, *tail = sc + 4 * (size_t)nb;
    for (int32_t b = 0; b < nb; b++) {
        int32_t c0 = b * f->blk, c1 = c0 + f->blk < f->nq ? c0 + f->blk : f->nq;
        float amax = 0.0f;
        for (int32_t c = c0; c < c1; c++)
            amax = fabsf(x[c]) > amax ? fabsf(x[c]) : amax;
        float s = amax / 448.0f;
        for (int32_t c = c0; c < c1; c++)
            dst[c] = s > 0.0f ? grpo_f32_to_e4m3(x[c] / s) : 0;
        memcpy(sc + 4 * (size_t)b, &s, 4);
    }
    for (int32_t c = f->nq; c < f->n; c++) {
        uint16_t h = grpo_f32_to_bf16(x[c]);
        memcpy(tail + 2 * (size_t)(c - f->nq), &h, 2);
    }
}

void
grpo_kv_row_encode(const grpo_kv_fmt *f, const float *x, void *dst)
{
    uint8_t *d = dst;
    if (f->dt == GRPO_DT_F32) {
        memcpy(d, x, (size_t)f->n * sizeof(float));
    } else if (f->dt == GRPO_DT_BF16) {
        for (int32_t c = 0; c < f->n; c++) {
            uint16_t h = grpo_f32_to_bf16(x[c]);
            memcpy(d + 2 * (size_t)c, &h, 2);
        }
    } else {
        encode_fp8(f, x, d);
    }
}

static void
decode_bf16(const uint8_t *p, int32_t n, float *out)
{
    for (int32_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)bf16_at(p + 2 * (size_t)i) << 16;
        memcpy(&out[i], &u, 4);
    }
}

static void
decode_fp8(const grpo_kv_fmt *f, const uint8_t *row, int32_t c0, int32_t n, float *out)
{
    const float *t = lut();
    const uint8_t *sc = row + f->nq;
    int32_t c = c0, c1 = c0 + n;
    while (c < c1 && c < f->nq) { /* block by block */
        int32_t b = c / f->blk, e = (b + 1) * f->blk;
        e = e < f->nq ? e : f->nq;
        e = e < c1 ? e : c1;
        float s;
        memcpy(&s, sc + 4 * (size_t)b, 4);
        for (; c < e; c++)
            *out++ = t[row[c]] * s;
    }
    if (c < c1) {
        const uint8_t *tail = sc + 4 * (size_t)((f->nq + f->blk - 1) / f->blk);
        decode_bf16(tail + 2 * (size_t)(c - f->nq), c1 - c, out);
    }
}

void
grpo_kv_row_decode(const grpo_kv_fmt *f, const void *row, int32_t c0, int32_t n, float *out)
{
    const uint8_t *r = row;
    if (f->dt == GRPO_DT_F32)
        memcpy(out, r + 4 * (size_t)c0, (size_t)n * sizeof(float));
    else if (f->dt == GRPO_DT_BF16)
        decode_bf16(r + 2 * (size_t)c0, n, out);
    else
        decode_fp8(f, r, c0, n, out);
}
