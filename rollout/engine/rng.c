/* Counter-based randomness: Philox4x32-10 and the keyed uniform draw the sampler uses. Every draw
 * is a pure function of (seed, prompt key, sample index, position), so no RNG state is carried
 * between tokens, threads or batches. */
#include "common/common_int.h"
#include "grpo/rollout.h"

#include <string.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u /* golden ratio */
#define PHILOX_W1 0xBB67AE85u /* sqrt(3) - 1 */

static void
philox_round(uint32_t c[4], const uint32_t k[2])
{
    uint64_t p0 = (uint64_t)PHILOX_M0 * c[0];
    uint64_t p1 = (uint64_t)PHILOX_M1 * c[2];
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    uint32_t n0 = hi1 ^ c[1] ^ k[0];
    uint32_t n2 = hi0 ^ c[3] ^ k[1];
    c[0] = n0;
    c[1] = lo1;
    c[2] = n2;
    c[3] = lo0;
}

void
grpo_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
    uint32_t k[2] = {key[0], key[1]};
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k[0] += PHILOX_W0;
            k[1] += PHILOX_W1;
        }
        philox_round(c, k);
    }
    memcpy(out, c, sizeof c);
}

double
grpo_rng_uniform(grpo_rng_key key)
{
    uint32_t ctr[4] = {key.pos, key.sample, (uint32_t)key.prompt_id,
                       (uint32_t)(key.prompt_id >> 32)};
    uint32_t k[2] = {(uint32_t)key.seed, (uint32_t)(key.seed >> 32)};
    uint32_t out[4];
    grpo_philox4x32_10(ctr, k, out);
    uint64_t bits = ((uint64_t)out[1] << 32 | out[0]) >> 11; /* 53 bits */
    return (double)bits * (1.0 / 9007199254740992.0);        /* / 2^53 */
}

uint64_t
grpo_rollout_prompt_key(const char *prompt_id)
{
    grpo_sha256 s;
    uint8_t d[32];
    grpo_sha256_init(&s);
    grpo_sha256_update(&s, prompt_id, strlen(prompt_id));
    grpo_sha256_final(&s, d);
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | d[i];
    return v;
}
