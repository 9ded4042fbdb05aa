/* kernels/cuda/kv_body.h: the KV cache row formats of kernels.h (grpo_kv_fmt: F32; BF16; FP8 =
 * E4M3 values with one fp32 scale per block after them, then a BF16 tail: FlashMLA's 656-byte
 * latent row) as the CUDA kernels read and write them, written once for the kernels and for the
 * host simulations in CI (tests/cuda_host_ops_test.cpp, cuda_host_mla_test.cpp), with the
 * arithmetic of kernels/kv_row.c: a block's scale amax / 448 (0 for an all-zero block, whose
 * bytes are then 0), a byte e4m3(v / scale) to nearest even and saturating, read back as
 * e4m3_value * scale; BF16 to nearest even. A row's bits never depend on another row. */
#ifndef GRPO_KERNELS_CUDA_KV_BODY_H
#define GRPO_KERNELS_CUDA_KV_BODY_H

#include "kernels/cuda/gemm_body.h"

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#endif

/* A row format: dt (grpo_dtype: 0 F32, 1 BF16, 3 E4M3), n values, the first nq of them E4M3 in
 * blocks of blk (FP8 only), bytes per row. */
struct cu_kvf {
    int dt, n, nq, blk, bytes;
};

inline cu_kvf
cu_kvf_of(const grpo_kv_fmt *f)
{
    cu_kvf k;
    k.dt = (int)f->dt, k.n = f->n, k.nq = f->nq, k.blk = f->blk > 0 ? f->blk : 128;
    k.bytes = f->bytes;
    return k;
}

/* An aligned load or store of a T (the formats keep them aligned: rows of 4-byte multiples, nq a
 * multiple of 4); memcpy on the host, which knows no such promise. */
template <class T>
GB_FN T
kb_ld(const uint8_t *p)
{
#ifdef __CUDA_ARCH__
    return *(const T *)p;
#else
    T v;
    memcpy(&v, p, sizeof v);
    return v;
#endif
}

template <class T>
GB_FN void
kb_st(uint8_t *p, T v)
{
#ifdef __CUDA_ARCH__
    *(T *)p = v;
#else
    memcpy(p, &v, sizeof v);
#endif
}

GB_FN float
kb_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

GB_FN uint16_t
kb_to_bf16(float v)
{
#ifdef __CUDA_ARCH__
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
#else
    return grpo_f32_to_bf16(v);
#endif
}

GB_FN uint8_t
kb_to_e4m3(float v)
{
#ifdef __CUDA_ARCH__
    return __nv_fp8_e4m3(v).__x; /* cvt.rn.satfinite */
#else
    return grpo_f32_to_e4m3(v);
#endif
}

/* Value d of a row. */
GB_FN float
kb_val(const uint8_t *row, const cu_kvf &f, int d)
{
    if (f.dt == 0)
        return kb_ld<float>(row + 4 * (size_t)d);
    if (f.dt == 1)
        return kb_bf16(kb_ld<uint16_t>(row + 2 * (size_t)d));
    if (d < f.nq)
        return cu_e4m3(row[d]) * kb_ld<float>(row + f.nq + 4 * (size_t)(d / f.blk));
    int nb = (f.nq + f.blk - 1) / f.blk;
    return kb_bf16(kb_ld<uint16_t>(row + f.nq + 4 * (size_t)nb + 2 * (size_t)(d - f.nq)));
}

/* The units of encoding one row: an FP8 row's latent blocks, then its tail values; else its
 * values. */
GB_FN int
kb_units(const cu_kvf &f)
{
    return f.dt == 3 ? (f.nq + f.blk - 1) / f.blk + (f.n - f.nq) : f.n;
}

/* Unit t of encoding M rows of x (F32, leading dimension ldx) into the rows at dst[r] + off (off:
 * a layer's offset in the pages, for tables made once for every layer). */
GB_FN void
kb_encode_unit(size_t t, int M, const cu_kvf &f, const float *x, int ldx, uint8_t *const *dst,
               size_t off)
{
    size_t per = (size_t)kb_units(f);
    if (t >= (size_t)M * per)
        return;
    int r = (int)(t / per), u = (int)(t % per);
    const float *xr = x + (size_t)r * ldx;
    uint8_t *row = dst[r] + off;
    if (f.dt == 0) {
        kb_st<float>(row + 4 * (size_t)u, xr[u]);
        return;
    }
    if (f.dt == 1) {
        kb_st<uint16_t>(row + 2 * (size_t)u, kb_to_bf16(xr[u]));
        return;
    }
    int nb = (f.nq + f.blk - 1) / f.blk;
    if (u >= nb) { /* a tail value */
        int c = f.nq + (u - nb);
        kb_st<uint16_t>(row + f.nq + 4 * (size_t)nb + 2 * (size_t)(c - f.nq), kb_to_bf16(xr[c]));
        return;
    }
    int c0 = u * f.blk, c1 = c0 + f.blk < f.nq ? c0 + f.blk : f.nq;
    float amax = 0.0f;
    for (int c = c0; c < c1; c++)
        amax = fabsf(xr[c]) > amax ? fabsf(xr[c]) : amax;
    float s = amax / 448.0f;
    for (int c = c0; c < c1; c++)
        row[c] = s > 0.0f ? kb_to_e4m3(xr[c] / s) : 0;
    kb_st<float>(row + f.nq + 4 * (size_t)u, s);
}

/* Element t of decoding the rows at src[r] into M rows of y (leading dimension ldy). */
GB_FN void
kb_decode_elem(size_t t, int M, const cu_kvf &f, const uint8_t *const *src, float *y, int ldy)
{
    if (t >= (size_t)M * f.n)
        return;
    size_t r = t / f.n;
    int c = (int)(t % f.n);
    y[r * ldy + c] = kb_val(src[r], f, c);
}

#endif
