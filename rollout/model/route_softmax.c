/* The softmax gates of deepseek_v2 (DeepseekV2MoEGate: greedy or group_limited_greedy) and
 * qwen3_moe (top-k, norm_topk_prob) on the host: the forward's route where its backend has no
 * router_softmax (kernels.h), and the reference the CUDA kernel's body is checked against. Plain
 * C with no dependencies but libm, so the GPU tests compile it in. */
#include "rollout/model/model_int.h"

#include <math.h>

/* Drops every group but the topk_group of n_group with the largest maximum probability
 * (DeepseekV2MoEGate's group_limited_greedy; ties to the lower group), marking their experts
 * taken (-1) so the top-k below skips them, as transformers' masked 0.0 does for positive
 * probabilities. */
static void
group_limit(float *p, int E, int n_group, int topk_group)
{
    int per = E / n_group;
    float gmax[256];
    unsigned char keep[256] = {0};
    for (int g = 0; g < n_group; g++) {
        gmax[g] = p[g * per];
        for (int i = 1; i < per; i++)
            gmax[g] = p[g * per + i] > gmax[g] ? p[g * per + i] : gmax[g];
    }
    for (int r = 0; r < topk_group; r++) {
        int best = -1;
        for (int g = 0; g < n_group; g++)
            if (!keep[g] && (best < 0 || gmax[g] > gmax[best]))
                best = g;
        keep[best] = 1;
    }
    for (int g = 0; g < n_group; g++)
        if (!keep[g])
            for (int i = 0; i < per; i++)
                p[g * per + i] = -1.0f;
}

/* One row: p (E), the logits, becomes the softmax; the top_k chosen by repeated arg-max (lower id
 * on ties); their sum taken in that (descending) order, as torch.topk's output is summed. */
static void
route_row(float *p, int E, int n_group, int topk_group, int top_k, int norm, float scale,
          int32_t *idx, float *wts)
{
    float mx = -INFINITY, sum = 0.0f;
    for (int e = 0; e < E; e++)
        mx = p[e] > mx ? p[e] : mx;
    for (int e = 0; e < E; e++)
        sum += (p[e] = expf(p[e] - mx));
    for (int e = 0; e < E; e++)
        p[e] /= sum;
    if (n_group > 1 && topk_group < n_group)
        group_limit(p, E, n_group, topk_group);
    for (int j = 0; j < top_k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if (p[e] >= 0 && (best < 0 || p[e] > p[best]))
                best = e;
        idx[j] = best;
        wts[j] = p[best];
        p[best] = -1.0f; /* taken */
    }
    float tot = 0.0f;
    for (int j = 0; j < top_k; j++)
        tot += wts[j];
    for (int j = 0; j < top_k; j++) /* ascending expert order, as the MoE combine expects */
        for (int i = j + 1; i < top_k; i++)
            if (idx[i] < idx[j]) {
                int32_t ti = idx[i];
                float tw = wts[i];
                idx[i] = idx[j];
                wts[i] = wts[j];
                idx[j] = ti;
                wts[j] = tw;
            }
    if (norm)
        for (int j = 0; j < top_k; j++)
            wts[j] /= tot;
    if (scale != 1.0f) /* routed_scaling_factor after any normalization, as both gates do */
        for (int j = 0; j < top_k; j++)
            wts[j] *= scale;
}

void
grpo_model__route_softmax(int M, float *logits, int E, int n_group, int topk_group, int top_k,
                          int norm, float scale, int32_t *idx, float *wts)
{
    for (int m = 0; m < M; m++)
        route_row(logits + (size_t)m * E, E, n_group, topk_group, top_k, norm, scale,
                  idx + (size_t)m * top_k, wts + (size_t)m * top_k);
}
