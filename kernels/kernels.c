/* Backend-neutral helpers of the op table: dtype names and sizes, scalar conversions, weight views
 * and the row dequantizer the CPU GEMMs and the embedding lookup share. */
#include "kernels/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

size_t
grpo_dtype_size(grpo_dtype dt)
{
    switch (dt) {
    case GRPO_DT_F32:
        return 4;
    case GRPO_DT_BF16:
    case GRPO_DT_F16:
        return 2;
    case GRPO_DT_F8E4M3:
    case GRPO_DT_Q8:
        return 1;
    }
    return 0;
}

const char *
grpo_dtype_name(grpo_dtype dt)
{
    switch (dt) {
    case GRPO_DT_F32:
        return "F32";
    case GRPO_DT_BF16:
        return "BF16";
    case GRPO_DT_F16:
        return "F16";
    case GRPO_DT_F8E4M3:
        return "F8_E4M3";
    case GRPO_DT_Q8:
        return "Q8";
    }
    return "?";
}

float
grpo_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t
grpo_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN stays NaN */
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float
grpo_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalize */
            int e = -1;
            do {
                man <<= 1;
                e++;
            } while ((man & 0x400) == 0);
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* E4M3 "fn" (as torch.float8_e4m3fn and the DeepSeek checkpoints): bias 7, no infinities,
 * S.1111.111 is NaN, max 448. */
float
grpo_e4m3_to_f32(uint8_t b)
{
    int sign = b >> 7, exp = (b >> 3) & 0xf, man = b & 7;
    float v;
    if (exp == 0xf && man == 7)
        return NAN;
    if (exp == 0)
        v = ldexpf((float)man, -9); /* subnormal: man/8 * 2^-6 */
    else
        v = ldexpf(1.0f + (float)man / 8.0f, exp - 7);
    return sign ? -v : v;
}

void
grpo_act_fp8_round(int M, int K, const float *x, int ldx, float *out)
{
    for (int m = 0; m < M; m++)
        for (int c0 = 0; c0 < K; c0 += 128) {
            const float *xr = x + (size_t)m * ldx;
            float *o = out + (size_t)m * K;
            int c1 = c0 + 128 < K ? c0 + 128 : K;
            float amax = 0.0f;
            for (int c = c0; c < c1; c++)
                amax = fmaxf(amax, fabsf(xr[c]));
            float sc = amax > 0.0f ? amax / 448.0f : 1.0f;
            for (int c = c0; c < c1; c++)
                o[c] = grpo_e4m3_to_f32(grpo_f32_to_e4m3(xr[c] / sc)) * sc;
        }
}

int
grpo_kw_act_round(const grpo_kw *w)
{
    if (w->dt == GRPO_DT_F8E4M3 && w->br == 128 && w->bc == 128)
        return GRPO_ACT_FP8;
    return w->dt == GRPO_DT_BF16 ? GRPO_ACT_BF16 : 0;
}

void
grpo_act_round(const grpo_kw *w, int M, int K, const float *x, int ldx, float *out)
{
    int how = grpo_kw_act_round(w);
    if (how == GRPO_ACT_FP8) {
        grpo_act_fp8_round(M, K, x, ldx, out);
        return;
    }
    for (int m = 0; m < M; m++)
        for (int c = 0; c < K; c++) {
            float v = x[(size_t)m * ldx + c];
            out[(size_t)m * K + c] =
                how == GRPO_ACT_BF16 ? grpo_bf16_to_f32(grpo_f32_to_bf16(v)) : v;
        }
}

grpo_kw
grpo_kw_rows(const grpo_kw *w, int32_t r0, int32_t n)
{
    grpo_kw v = *w;
    if (w->dt == GRPO_DT_Q8) { /* whole groups of the packed layout */
        if (r0 % GRPO_Q8_GROUP != 0)
            abort(); /* never asked: attention's per-head views are of FP8 kv_b */
        v.data = (const int8_t *)w->data + grpo_q8_bytes(r0, w->cols);
        v.scale = w->scale + grpo_q8_scales(r0, w->cols);
        v.rows = n;
        return v;
    }
    v.data = (const char *)w->data + (size_t)r0 * (size_t)w->cols * grpo_dtype_size(w->dt);
    v.rows = n;
    v.row0 = w->row0 + r0;
    return v;
}

void
grpo_kernels_gemm_batch(grpo_kernels *k, int n, const grpo_gemm_job *jobs)
{
    if (k->gemm_batch != NULL) {
        k->gemm_batch(k, n, jobs);
        return;
    }
    for (int j = 0; j < n; j++)
        if (jobs[j].M > 0)
            k->gemm(k, jobs[j].M, jobs[j].x, jobs[j].ldx, jobs[j].w, jobs[j].y, jobs[j].ldy);
}
