/* Teacher-forced scoring: per-token logprobs of a given completion after a prompt, through any
 * backend (the reference model for KL, or the policy again to measure the sampling/scoring
 * mismatch). The prompt is prefilled with last-token logits only, then the completion is fed in
 * chunks whose every row is scored, so memory stays at CHUNK x vocab floats. */
#include "rollout/engine/engine_int.h"

#include <math.h>
#include <stdlib.h>

#define SCORE_CHUNK 64

/* log softmax(row / t)[tok] in double. */
static float
row_logprob(const float *row, int32_t vocab, double t, int32_t tok)
{
    double mx = -INFINITY, s = 0.0;
    for (int32_t v = 0; v < vocab; v++)
        mx = (double)row[v] / t > mx ? (double)row[v] / t : mx;
    for (int32_t v = 0; v < vocab; v++)
        s += exp((double)row[v] / t - mx);
    return (float)((double)row[tok] / t - mx - log(s));
}

grpo_err
grpo_rollout_score(const grpo_rollout_backend *b, const int32_t *prompt, int32_t n_prompt,
                   const int32_t *completion, int32_t n, float temperature, float *out)
{
    int32_t seq = -1;
    double t = temperature > 0.0f ? (double)temperature : 1.0;
    size_t V = (size_t)b->vocab;
    float *logits = malloc(SCORE_CHUNK * V * sizeof *logits);
    grpo_err err = GRPO_OK;
    if (logits == NULL)
        return grpo__fail(GRPO_ENOMEM, "score: out of memory");
    if ((err = b->seq_new(b->ctx, &seq)) != GRPO_OK)
        goto done;
    for (int32_t at = 0; at < n_prompt; at += 2048) { /* prompt: only its last row matters */
        int32_t len = n_prompt - at < 2048 ? n_prompt - at : 2048;
        grpo_fwd_item it = {seq, at, len, prompt + at};
        if ((err = b->forward(b->ctx, &it, 1, logits)) != GRPO_OK)
            goto done;
    }
    if (n > 0)
        out[0] = row_logprob(logits, b->vocab, t, completion[0]);
    /* completion[j] for j >= 1 is predicted by the row of completion[j - 1] */
    for (int32_t at = 0; at + 1 < n; at += SCORE_CHUNK) {
        int32_t len = n - 1 - at < SCORE_CHUNK ? n - 1 - at : SCORE_CHUNK;
        grpo_fwd_item it = {seq, n_prompt + at, len, completion + at};
        if ((err = b->forward_all(b->ctx, &it, 1, logits)) != GRPO_OK)
            goto done;
        for (int32_t j = 0; j < len; j++)
            out[at + j + 1] =
                row_logprob(logits + (size_t)j * V, b->vocab, t, completion[at + j + 1]);
    }
done:
    if (seq >= 0)
        b->seq_free(b->ctx, seq);
    free(logits);
    return err;
}
