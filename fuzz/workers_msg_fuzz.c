/* libFuzzer target: grpo_wmsg_decode on arbitrary bytes. Invariants beyond "no crash, no leak":
 * a decoded message encodes again, and that encoding decodes to the same bytes once more
 * (decode o encode is a fixed point), so nothing the decoder accepts is lost or invented. */
#include "grpo/workers.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    grpo_wmsg m, m2;
    if (grpo_wmsg_decode(&m, data, size) == GRPO_OK) {
        void *b1 = NULL, *b2 = NULL;
        size_t l1 = 0, l2 = 0;
        if (grpo_wmsg_encode(&m, &b1, &l1) != GRPO_OK)
            abort();
        if (grpo_wmsg_decode(&m2, b1, l1) != GRPO_OK)
            abort();
        if (grpo_wmsg_encode(&m2, &b2, &l2) != GRPO_OK || l1 != l2 || memcmp(b1, b2, l1) != 0)
            abort();
        grpo_wmsg_fini(&m2);
        free(b1), free(b2);
    }
    grpo_wmsg_fini(&m);
    return 0;
}
