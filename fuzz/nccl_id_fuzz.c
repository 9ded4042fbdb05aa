/* libFuzzer target: grpo_nccl_id_decode on arbitrary bytes. Invariants beyond "no crash": bytes
 * accepted as an id (of this launch or another) encode again to exactly the same bytes, so the
 * parser accepts nothing but the files grpo_nccl_id_publish writes; an id of this launch is only
 * taken at the size asked for. The nonce of "this launch" is drawn from the input's first byte,
 * so both verdicts get coverage. Seeds: fuzz/seeds/nccl_id_fuzz (an id of 128 bytes, the size
 * of an ncclUniqueId). */
#include "kernels/cuda/plan.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    enum { N = 128 };
    unsigned char id[N], again[GRPO_NCCL_ID_HEADER + N];
    uint64_t nonce = size > 0 && (data[0] & 1) ? 0x0123456789abcdefull : 0x1122334455667788ull;
    uint64_t theirs = 0;
    int r = grpo_nccl_id_decode(data, size, nonce, id, N, &theirs);
    if (r < -1 || r > 1)
        abort();
    if (r == 0) {
        if (size != sizeof again)
            abort();
        grpo_nccl_id_encode(nonce, id, N, again);
        if (memcmp(again, data, size) != 0)
            abort();
    }
    if (r == 1 && (theirs == nonce || size < GRPO_NCCL_ID_HEADER))
        abort();
    return 0;
}
