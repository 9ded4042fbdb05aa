/* A worker's multi-turn result as the coordinator records it: a RESULT carrying turns goes
 * through the codec, grpo_run_group_from_wire derives each sample's mask (0 exactly on the
 * observation tokens) and engine turns from it, the trainer batch's tool_mask and loss_mask
 * follow the mask, and the turn records handed to the store (grpo_run__turn_recs, what
 * grpo_run_record puts in the group's record) keep every turn: action_end, n_obs, n_obs_cut,
 * times within a microsecond, the record ("{}" when the worker sent none); a sample without
 * turns keeps no mask and no turns. The group is then recorded. (The store's side of turns is
 * declared but not yet written, so what it reads back is not checked here.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "grpo/bridge.h"
#include "grpo/run.h"
#include "grpo/workers.h"
#include "run/run_int.h"
#include "store_test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NT 12

static int32_t prompt[2] = {7, 8};
static int32_t toks[2][NT];
static float lps[2][NT];

/* Sample 0: 12 tokens, turns at 3 (observation 3..5) and 8 (observation 8..9, one cut);
 * sample 1: 12 tokens, one turn. */
static void
make_result(grpo_wmsg *m, grpo_wsample *s, grpo_wturn *tu)
{
    memset(m, 0, sizeof *m);
    memset(s, 0, 2 * sizeof *s);
    m->type = GRPO_WMSG_RESULT, m->worker_id = "w1";
    grpo_wresult *r = &m->result;
    r->lease_id = 1, r->prompt_id = "p0", r->n_prompt = 2, r->prompt = prompt;
    r->gen_ms = 12, r->verify_ms = 3, r->n_samples = 2, r->samples = s;
    for (int i = 0; i < 2; i++) {
        for (int k = 0; k < NT; k++)
            toks[i][k] = 100 * i + k, lps[i][k] = k % 3 ? -0.5f : 0.0f;
        s[i].index = i, s[i].finish = GRPO_FINISH_EOS, s[i].n_tokens = NT;
        s[i].tokens = toks[i], s[i].logprobs = lps[i], s[i].text = "t", s[i].text_len = 1;
        s[i].reward = i;
    }
    tu[0] = (grpo_wturn){3, 3, 0, 10.5, 250.25, "{\"env\":\"calc\",\"label\":\"ok\"}"};
    tu[1] = (grpo_wturn){8, 2, 1, 400.0, 7.0, NULL};
    s[0].n_turns = 2, s[0].turns = tu;
}

static int
is_obs(int k)
{
    return (k >= 3 && k < 6) || (k >= 8 && k < 10);
}

static void
test_wire_turns_recorded(void **state)
{
    (void)state;
    grpo_wmsg m, d;
    grpo_wsample s[2];
    grpo_wturn tu[2];
    make_result(&m, s, tu);
    void *bytes;
    size_t len;
    assert_int_equal(grpo_wmsg_encode(&m, &bytes, &len), GRPO_OK);
    assert_int_equal(grpo_wmsg_decode(&d, bytes, len), GRPO_OK);
    free(bytes);

    grpo_run_group g = {0};
    assert_int_equal(grpo_run_group_from_wire(&g, &d.result), GRPO_OK);
    const grpo_run_sample *x = &g.samples[0];
    assert_int_equal(x->n_turns, 2);
    assert_non_null(x->mask);
    for (int k = 0; k < NT; k++)
        assert_int_equal(x->mask[k], !is_obs(k));
    assert_int_equal(x->turns[1].action_end, 8);
    assert_int_equal(x->turns[1].n_obs_cut, 1);
    assert_string_equal(x->turns[0].record_json, "{\"env\":\"calc\",\"label\":\"ok\"}");
    assert_null(g.samples[1].mask);
    assert_int_equal(g.samples[1].n_turns, 0);

    char dir[256], db[300];
    tu_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/t.db", dir);
    grpo_store *st = NULL;
    assert_int_equal(grpo_store_open(&st, db, NULL), GRPO_OK);
    grpo_prompt_set ps = {0};
    int64_t run_id = 0, pid = 0;
    assert_int_equal(grpo_run_store_begin(&run_id, st, "grpo test", "{}", &ps, "p.jsonl"), GRPO_OK);
    grpo_prompt_rec pr = {"p.jsonl", 0, "q", NULL, "\"1\"", NULL};
    assert_int_equal(grpo_store_put_prompt(&pid, st, &pr), GRPO_OK);
    g.run_id = run_id, g.store_prompt_id = pid, g.seed = 1, g.max_tokens = NT;
    g.worker_id = "w1";
    assert_int_equal(grpo_run_advantages(&g), GRPO_OK);

    grpo_batch *b = NULL;
    assert_int_equal(grpo_run_batch(&b, &g), GRPO_OK);
    assert_true(b->flags & GRPO_BATCH_HAS_TOOL_MASK);
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < NT; k++) {
            size_t at = (size_t)b->seq_offsets[i] + 2 + (size_t)k;
            int model = i == 1 || !is_obs(k);
            assert_int_equal(b->tool_mask[at], model);
            if (!model)
                assert_int_equal(b->loss_mask[at], 0);
        }
    grpo_batch_destroy(b);

    grpo_turn_rec tr[2];
    grpo_run__turn_recs(&g.samples[0], tr);
    for (int t = 0; t < 2; t++) {
        assert_int_equal(tr[t].action_end, tu[t].action_end);
        assert_int_equal(tr[t].n_obs, tu[t].n_obs);
        assert_int_equal(tr[t].n_obs_cut, tu[t].n_obs_cut);
        assert_true(fabs(tr[t].at_ms - tu[t].at_ms) < 1e-3);
        assert_true(fabs(tr[t].wait_ms - tu[t].wait_ms) < 1e-3);
    }
    assert_string_equal(tr[0].record_json, "{\"env\":\"calc\",\"label\":\"ok\"}");
    assert_string_equal(tr[1].record_json, "{}");

    assert_int_equal(grpo_run_record(st, &g, NULL, 0), GRPO_OK);
    int64_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(grpo_store_run_completions(&ids, &n, st, run_id), GRPO_OK);
    assert_int_equal(n, 2);
    free(ids);
    grpo_run_group_fini(&g);
    grpo_wmsg_fini(&d);
    assert_int_equal(grpo_store_close(st), GRPO_OK);
    tu_rmrf(dir);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wire_turns_recorded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
