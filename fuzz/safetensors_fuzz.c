/* libFuzzer target: arbitrary bytes as a whole safetensors file image through the header parser
 * (length prefix, JSON, dtypes, shapes, offsets, overlaps), and as a config.json. Every tensor it
 * accepts must lie inside the image with the byte size its dtype and shape say. Seeds: the tiny
 * models'
 * *.safetensors (tests/data/tiny_models). Run:
 *   CC=clang CXX=clang++ cmake -S . -B build-fuzz -DGRPO_FUZZ=ON -DGRPO_CUDA=OFF
 *   ninja -C build-fuzz safetensors_fuzz && build-fuzz/fuzz/safetensors_fuzz -max_len=65536 */
#include "rollout/model/model_int.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    grpo_model_config cfg; /* the same bytes as a config.json: refused or parsed, never a crash */
    (void)grpo_model_config_parse(&cfg, (const char *)data, size, "fuzz/config.json");
    grpo_st_header h;
    if (grpo_model__st_parse(data, size, "fuzz", &h) != GRPO_OK)
        return 0;
    for (int i = 0; i < h.n; i++) {
        const grpo_st_tensor *t = &h.t[i];
        if (t->end < t->begin || h.data_off + t->end > size ||
            (const uint8_t *)t->data != data + h.data_off + t->begin)
            abort();
    }
    grpo_model__st_header_fini(&h);
    return 0;
}
