/* libFuzzer target: grpo_wmsg_decode on arbitrary bytes. Invariants beyond "no crash, no leak":
 * a decoded message encodes again, and that encoding decodes to the same bytes once more
 * (decode o encode is a fixed point), so nothing the decoder accepts is lost or invented; and an
 * accepted result's turns are what the coordinator relies on when it derives a sample's mask
 * from them: in order within the sample's tokens, records NUL-free and bounded, and an accepted
 * WORK's tools list is absent or non-empty. Seeds: fuzz/seeds/workers_msg_fuzz (a WORK with
 * tools, a RESULT with turns). */
#include "grpo/workers.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Aborts unless every turn of s lies after the one before and within its tokens. */
static void
check_turns(const grpo_wsample *s)
{
    int64_t from = 0, last = -1;
    if (s->n_turns < 0 || s->n_turns > GRPO_WORKERS_MAX_TURNS || (s->n_turns > 0 && !s->turns))
        abort();
    for (int32_t t = 0; t < s->n_turns; t++) {
        const grpo_wturn *u = &s->turns[t];
        int64_t end = (int64_t)u->action_end + u->n_obs;
        if (u->action_end < from || u->action_end <= last || u->n_obs < 0 || end > s->n_tokens ||
            u->n_obs_cut < 0 || !(u->at_ms >= 0) || !(u->wait_ms >= 0))
            abort();
        const char *rec = u->record_json;
        if (rec &&
            (rec[strspn(rec, " \t\r\n")] != '{' || strlen(rec) > GRPO_WORKERS_MAX_TURN_RECORD))
            abort();
        from = end, last = u->action_end;
    }
}

static void
check_invariants(const grpo_wmsg *m)
{
    if (m->type == GRPO_WMSG_RESULT)
        for (int32_t i = 0; i < m->result.n_samples; i++)
            check_turns(&m->result.samples[i]);
    if (m->type == GRPO_WMSG_WORK && m->params.tools && m->params.tools[0] == '\0')
        abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    grpo_wmsg m, m2;
    if (grpo_wmsg_decode(&m, data, size) == GRPO_OK) {
        check_invariants(&m);
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
