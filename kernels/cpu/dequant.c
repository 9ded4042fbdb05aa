/* Row dequantization of weights for the CPU GEMMs: BF16 and F16 to fp32, and FP8 E4M3 with its
 * block scale by the exponent-rebias trick (exact: the same bits as table lookup times scale). */
#include "kernels/cpu/cpu_int.h"

#include <math.h>
#include <string.h>

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

/* out[i] = e4m3(s[i]) * sc for n values. (b & 0x7f) << 20 puts E4M3's exponent and mantissa in
 * an fp32's low exponent/high mantissa bits: that float is the E4M3 value times 2^-120 exactly
 * (subnormals included), so one multiply by sc * 2^120 rounds once, like value * sc. */
GRPO_CPU_CLONES static void
fp8_row(const uint8_t *s, int32_t n, float sc, float *out)
{
    float big = sc * 0x1p120f;
    int32_t i = 0;
    if (isfinite(big) && big != 0.0f) {
        for (; i < n; i++) {
            uint32_t b = s[i], u = ((b & 0x7f) << 20) | ((b & 0x80) << 24);
            float f;
            memcpy(&f, &u, 4);
            out[i] = f * big;
        }
    }
    for (; i < n; i++)
        out[i] = e4m3_lut[s[i]] * sc;
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
            fp8_row(s + i, end - i, srow[blk], out + i);
            i = end;
        }
        break;
    }
    }
}
