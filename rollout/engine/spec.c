/* Speculative sampling's acceptance step: a draft token from a draft distribution q kept or
 * replaced so that the emitted token follows the policy's distribution p exactly. Pure: the two
 * uniforms come from the caller's counter keys. */
#include "common/common_int.h"
#include "grpo/rollout.h"

int32_t
grpo_spec_accept(const double *p, const double *q, int32_t vocab, int32_t draft, double u_accept,
                 double u_resample, int *accepted)
{
    if (accepted != NULL)
        *accepted = 0;
    if (p == NULL || q == NULL || vocab <= 0 || draft < 0 || draft >= vocab) {
        grpo__fail(GRPO_EINVAL, "spec: draft token %d outside a vocabulary of %d", draft, vocab);
        return -1;
    }
    if (!(q[draft] > 0.0)) {
        grpo__fail(GRPO_EINVAL, "spec: draft token %d has draft probability %g", draft, q[draft]);
        return -1;
    }
    if (u_accept * q[draft] < p[draft]) {
        if (accepted != NULL)
            *accepted = 1;
        return draft;
    }
    /* the residual in ascending id order; all zero only when p <= q everywhere, i.e. p == q */
    double z = 0.0;
    for (int32_t i = 0; i < vocab; i++)
        z += p[i] > q[i] ? p[i] - q[i] : 0.0;
    int use_p = !(z > 0.0);
    if (use_p)
        for (int32_t i = 0; i < vocab; i++)
            z += p[i];
    double target = u_resample * z, cum = 0.0;
    int32_t tok = -1;
    for (int32_t i = 0; i < vocab; i++) {
        double r = use_p ? p[i] : (p[i] > q[i] ? p[i] - q[i] : 0.0);
        if (r <= 0.0)
            continue;
        tok = i;
        cum += r;
        if (cum > target)
            break;
    }
    if (tok < 0)
        grpo__fail(GRPO_EINVAL, "spec: the policy distribution is empty");
    return tok;
}
