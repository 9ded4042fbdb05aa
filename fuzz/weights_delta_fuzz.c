/* libFuzzer target: grpo_bridge_delta_apply on arbitrary delta bytes against a fixed small base
 * must never crash, leak or read out of bounds; whatever it accepts has the size and sha256 the
 * delta's metadata names. The input's first byte picks a base (so base_sha256 can match: the
 * seeds are deltas made against these very bases by tools/make_delta_seeds.py). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpo/bridge.h"
#include "grpo/common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A safetensors image: a (3, 5) U8 tensor "w" and a 1-D F32 "b" of 2. */
static size_t
make_base(uint8_t *out, int which)
{
    const char *h = "{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                    "\"w\":{\"dtype\":\"U8\",\"shape\":[3,5],\"data_offsets\":[8,23]}}";
    size_t hl = strlen(h), n = 0;
    for (int i = 0; i < 8; i++)
        out[n++] = (uint8_t)(hl >> (8 * i));
    memcpy(out + n, h, hl);
    n += hl;
    for (int i = 0; i < 23; i++)
        out[n++] = (uint8_t)(i * 7 + which);
    return n;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t base[512];
    if (size < 1)
        return 0;
    size_t bn = make_base(base, data[0] & 1);
    void *out = NULL;
    size_t on = 0;
    grpo_weights_delta_info in;
    if (grpo_bridge_delta_apply(data + 1, size - 1, base, bn, 1 << 20, "fuzz", &out, &on) !=
        GRPO_OK) {
        if (out != NULL)
            abort(); /* nothing is handed out on failure */
        return 0;
    }
    char hex[65];
    grpo_sha256_hex(out, on, hex);
    if (grpo_bridge_delta_peek(data + 1, size - 1, "fuzz", &in) != GRPO_OK ||
        in.result_bytes != on || strcmp(hex, in.result_sha256) != 0)
        abort();
    free(out);
    return 0;
}
