/* libFuzzer target: grpo_batch_decode on arbitrary bytes must never crash, leak or read out of
 * bounds; whatever it accepts must re-encode to bytes that decode to the same batch. */
#include <stdlib.h>
#include <string.h>

#include "grpo/bridge.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    grpo_batch *b = NULL, *c = NULL;
    if (grpo_batch_decode(&b, data, size) != GRPO_OK)
        return 0;
    void *bytes = NULL;
    size_t len = 0;
    if (grpo_batch_encode(b, &bytes, &len) != GRPO_OK)
        abort(); /* a decoded batch is valid, so it must encode */
    if (grpo_batch_decode(&c, bytes, len) != GRPO_OK || c->n_tok != b->n_tok ||
        c->n_seq != b->n_seq || c->batch_id != b->batch_id ||
        (b->n_tok && memcmp(c->tokens, b->tokens, b->n_tok * 4) != 0))
        abort();
    size_t row = (size_t)b->route_layers * (size_t)b->route_k * (size_t)b->route_bytes;
    if (c->flags != b->flags || c->n_route_prompt != b->n_route_prompt ||
        c->n_route_completion != b->n_route_completion ||
        (b->route_prompt && memcmp(c->route_prompt, b->route_prompt, b->n_route_prompt * row)) ||
        (b->route_completion &&
         memcmp(c->route_completion, b->route_completion, b->n_route_completion * row)))
        abort(); /* routes survive the round trip */
    int64_t id;
    grpo_batch_info info;
    if (grpo_batch_peek(data, size, &id, NULL, NULL, 0) != GRPO_OK || id != b->batch_id ||
        grpo_batch_peek_info(data, size, &info) != GRPO_OK || info.n_tok != b->n_tok)
        abort();
    free(bytes);
    grpo_batch_destroy(b);
    grpo_batch_destroy(c);
    return 0;
}
