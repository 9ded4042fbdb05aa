/* Row dequantization of weights for the CPU GEMMs: BF16 and F16 to fp32, and FP8 E4M3 with its
 * block scale by the exponent-rebias trick (exact: the same bits as table lookup times scale). */
#include "kernels/cpu/cpu_int.h"

#include <math.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define GRPO_HAVE_F16C_PATH 1
#endif

static float e4m3_lut[256];
static int e4m3_ready;

static void
lut_init(void)
{
    if (__atomic_load_n(&e4m3_ready, __ATOMIC_ACQUIRE))
        return;
    for (int i = 0; i < 256; i++)
        e4m3_lut[i] = grpo_e4m3_to_f32((uint8_t)i);
    __atomic_store_n(&e4m3_ready, 1, __ATOMIC_RELEASE);
}

/* One E4M3 byte as an exact float, built without denormals (which cost a microcode assist per
 * operation on x86): normal codes get their exponent rebased by +120, subnormal codes (exponent 0)
 * are m * 2^-9. Identical to the table for every code but the two NaNs (which decode to +-480 here;
 * checkpoints hold none). */
static inline float
e4m3_exact(uint32_t b)
{
    uint32_t sign = (b & 0x80) << 24;
    uint32_t un = (((b & 0x7f) + (120u << 3)) << 20) | sign; /* normal: exponent + 120 */
    uint32_t um = 0x3f800000u | ((b & 7) << 20);             /* 1 + m/8 */
    uint32_t us = 0x3c800000u | sign;                        /* +-2^-6 */
    float fn, fm, fs;
    memcpy(&fn, &un, 4);
    memcpy(&fm, &um, 4);
    memcpy(&fs, &us, 4);
    float sub = (fm - 1.0f) * fs; /* m/8 * 2^-6, exact */
    return (b & 0x78) != 0 ? fn : sub;
}

/* out[i] = e4m3(s[i]) * sc for n values: one rounding, as table value times scale. */
GRPO_CPU_CLONES static void
fp8_row(const uint8_t *s, int32_t n, float sc, float *out)
{
    for (int32_t i = 0; i < n; i++)
        out[i] = e4m3_exact(s[i]) * sc;
}

typedef uint32_t v8u __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

/* The common case, one whole 128-wide block, written with explicit 8-lane vectors (the same
 * arithmetic as e4m3_exact, branch-free) because compilers keep the scalar select as a branch. */
GRPO_CPU_CLONES static void
fp8_block128(const uint8_t *s, float sc, float *out)
{
    uint32_t wide[128];
    for (int i = 0; i < 128; i++)
        wide[i] = s[i];
    for (int i = 0; i < 128; i += 8) {
        v8u b;
        memcpy(&b, wide + i, sizeof b);
        v8u sign = (b & 0x80) << 24;
        v8u un = (((b & 0x7f) + (120u << 3)) << 20) | sign;
        v8u um = 0x3f800000u | ((b & 7) << 20);
        v8u us = 0x3c800000u | sign;
        grpo_v8f sub = ((grpo_v8f)um - 1.0f) * (grpo_v8f)us;
        v8u normal = (v8u)((b & 0x78) != 0); /* all ones where the exponent is nonzero */
        v8u bits = (un & normal) | ((v8u)sub & ~normal);
        grpo_v8_store(out + i, (grpo_v8f)bits * sc);
    }
}

static int portable;

void
grpo_kernels_cpu_set_portable(int on)
{
    __atomic_store_n(&portable, on, __ATOMIC_RELAXED);
}

int
grpo_cpu__portable(void)
{
    return __atomic_load_n(&portable, __ATOMIC_RELAXED);
}

#ifdef GRPO_HAVE_F16C_PATH
/* E4M3 -> FP16 is a shift ((b & 0x7f) << 7 | sign << 8) giving the value times 2^-8 exactly,
 * subnormals included; F16C converts 8 at a time to fp32 (exactly, no denormal penalty); one
 * multiply by scale * 256 then rounds once, as table value times scale. */
__attribute__((target("avx2,f16c"))) static void
fp8_f16c(const uint8_t *s, int n, float sc256, float *out)
{
    __m256 vs = _mm256_set1_ps(sc256);
    __m256i m7f = _mm256_set1_epi16(0x7f), m80 = _mm256_set1_epi16(0x80);
    for (int i = 0; i < n; i += 16) {
        __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(s + i)));
        __m256i h = _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(w, m7f), 7),
                                    _mm256_slli_epi16(_mm256_and_si256(w, m80), 8));
        __m256 lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
        __m256 hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(lo, vs));
        _mm256_storeu_ps(out + i + 8, _mm256_mul_ps(hi, vs));
    }
}

/* The fused GEMMs' register route (grpo_cpu__e4m3x16) for a staged tile: fewer instructions than
 * the F16C route, the same bits. */
__attribute__((target("avx2"))) static void
fp8_shuffle(const uint8_t *s, int n, float sc120, float *out)
{
    __m256 vs = _mm256_set1_ps(sc120);
    for (int i = 0; i < n; i += 16) {
        __m256 a, b;
        grpo_cpu__e4m3x16(s + i, vs, &a, &b);
        _mm256_storeu_ps(out + i, a);
        _mm256_storeu_ps(out + i + 8, b);
    }
}

static int
have_f16c(void)
{
    static int have = -1;
    int h = __atomic_load_n(&have, __ATOMIC_RELAXED);
    if (h < 0) {
        __builtin_cpu_init();
        h = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
        __atomic_store_n(&have, h, __ATOMIC_RELAXED);
    }
    return h;
}
#endif

/* n values of one block with its scale. */
static void
fp8_block(const uint8_t *s, int n, float sc, float *out)
{
#ifdef GRPO_HAVE_F16C_PATH
    float sc256 = sc * 256.0f, sc120 = sc * 0x1p120f;
    if (n % 16 == 0 && !__atomic_load_n(&portable, __ATOMIC_RELAXED) && have_f16c() &&
        isfinite(sc256)) {
        if (isfinite(sc120))
            fp8_shuffle(s, n, sc120, out);
        else
            fp8_f16c(s, n, sc256, out);
        return;
    }
#endif
    if (n == 128)
        fp8_block128(s, sc, out);
    else
        fp8_row(s, n, sc, out);
}

GRPO_CPU_CLONES static void
bf16_row(const uint16_t *s, int32_t n, float *out)
{
    int32_t i = 0;
    for (; i < n; i++) {
        uint32_t u = (uint32_t)s[i] << 16;
        memcpy(&out[i], &u, 4);
    }
}

void
grpo_kw_dequant_row(const grpo_kw *w, int32_t r, int32_t c0, int32_t n, float *out)
{
    size_t base = (size_t)r * (size_t)w->cols + (size_t)c0;
    switch (w->dt) {
    case GRPO_DT_F32:
        memcpy(out, (const float *)w->data + base, (size_t)n * 4);
        break;
    case GRPO_DT_BF16:
        bf16_row((const uint16_t *)w->data + base, n, out);
        break;
    case GRPO_DT_F16: {
        const uint16_t *s = (const uint16_t *)w->data + base;
        for (int32_t i = 0; i < n; i++)
            out[i] = grpo_f16_to_f32(s[i]);
        break;
    }
    case GRPO_DT_F8E4M3: {
        lut_init();
        const uint8_t *s = (const uint8_t *)w->data + base;
        const float *srow = w->scale + (size_t)((w->row0 + r) / w->br) * (size_t)w->scale_cols;
        int32_t i = 0;
        while (i < n) {
            int32_t c = c0 + i, blk = c / w->bc, end = (blk + 1) * w->bc - c0;
            if (end > n)
                end = n;
            fp8_block(s + i, end - i, srow[blk], out + i);
            i = end;
        }
        break;
    }
    case GRPO_DT_Q8:
        for (int32_t i = 0; i < n; i++)
            out[i] = grpo_q8_value(w, r, c0 + i);
        break;
    }
}
