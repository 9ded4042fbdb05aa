/* Routing record: the forward hands each MoE layer's router choices to the items that asked for
 * them (grpo_fwd_item.routes), so a trainer can replay the rollout's experts. */
#include "rollout/model/model_int.h"

#include <string.h>

int
grpo_model_route_bytes(const grpo_model_config *c)
{
    return c->n_routed_experts <= 256 ? 1 : 2;
}

size_t
grpo_model_route_row_bytes(const grpo_model_config *c)
{
    if (c->n_routed_experts <= 0 || c->n_moe_layers <= 0)
        return 0;
    return (size_t)c->n_moe_layers * (size_t)c->num_experts_per_tok *
           (size_t)grpo_model_route_bytes(c);
}

void
grpo_model__routes_put(const grpo_model *m, const grpo_fwd_item *items, int n_items,
                       const int32_t *t0_of, int moe_layer, const int32_t *ri, void *const *routes)
{
    const grpo_model_config *c = &m->cfg;
    int K = c->num_experts_per_tok, L = c->n_moe_layers, wide = grpo_model_route_bytes(c) == 2;
    for (int i = 0; i < n_items; i++) {
        if (routes[i] == NULL)
            continue;
        for (int j = 0; j < items[i].n; j++) {
            const int32_t *src = ri + (size_t)(t0_of[i] + j) * K;
            size_t at = ((size_t)j * L + (size_t)moe_layer) * K;
            if (wide) {
                int16_t *dst = (int16_t *)routes[i] + at;
                for (int k = 0; k < K; k++)
                    dst[k] = (int16_t)src[k];
            } else {
                uint8_t *dst = (uint8_t *)routes[i] + at;
                for (int k = 0; k < K; k++)
                    dst[k] = (uint8_t)src[k];
            }
        }
    }
}
