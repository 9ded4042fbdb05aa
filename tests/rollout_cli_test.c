/* `grpo rollout` and `grpo replay` end to end on the tiny model (byte tokenizer): the run writes
 * the store and JSONL; the same run with 1 and 2 forward threads records the same tokens;
 * replay reproduces recorded completions bit for bit and reports a tampered record as different;
 * a small --kv-budget completes with one group in flight; bad prompt lines fail or are skipped;
 * --gpu is checked against the build's backends, and the binary links no CUDA library; with
 * --logprobs both the published batches carry logprobs_processed as the JSONL has it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "grpo/bridge.h"
#include "grpo/common.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <sys/wait.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/cli_testutil.h"

/* tmpdir/name, valid until the next call; NULL when it cannot be opened. */
static char *
slurp(const char *name)
{
    static char *last;
    free(last);
    last = slurp_alloc(name);
    return last;
}

#define ROLL                                                                                       \
    "%s rollout --model %s/tests/data/tiny_models/bf16 --prompts %s/data/tiny_prompts.jsonl"

/* Token and logprob blobs of every completion, by prompt and sample (groups are written in
 * completion order, which depends on the verifier threads), concatenated into buf. */
static size_t
token_blobs(const char *db, char *buf, size_t cap)
{
    sqlite3 *h;
    sqlite3_stmt *st;
    size_t n = 0;
    assert_int_equal(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(h,
                                        "SELECT c.token_ids, c.token_logprobs FROM completions c "
                                        "JOIN groups g ON g.id = c.group_id "
                                        "ORDER BY g.prompt_id, c.sample_index",
                                        -1, &st, NULL),
                     SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW)
        for (int c = 0; c < 2; c++) {
            size_t len = (size_t)sqlite3_column_bytes(st, c);
            assert_true(n + len <= cap);
            memcpy(buf + n, sqlite3_column_blob(st, c), len);
            n += len;
        }
    sqlite3_finalize(st);
    sqlite3_close(h);
    return n;
}

/* Runs a and b stored the same completions (tokens and logprobs); run other (NULL: none) did
 * not. */
static void
assert_same_completions(const char *a, const char *b, const char *other)
{
    static char b1[1 << 16], b2[1 << 16], b3[1 << 16];
    size_t n1 = token_blobs(a, b1, sizeof b1), n2 = token_blobs(b, b2, sizeof b2);
    assert_true(n1 > 0);
    assert_int_equal(n1, n2);
    assert_memory_equal(b1, b2, n1);
    if (other != NULL) {
        size_t n3 = token_blobs(other, b3, sizeof b3);
        assert_true(n1 != n3 || memcmp(b1, b3, n1) != 0);
    }
}

/* Rows of table (in db) whose column contains needle. */
static int
count_containing(const char *db, const char *table, const char *column, const char *needle)
{
    char sql[256], like[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s WHERE %s LIKE ?1", table, column);
    snprintf(like, sizeof like, "%%%s%%", needle);
    sqlite3 *h;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(h, sql, -1, &st, NULL), SQLITE_OK);
    sqlite3_bind_text(st, 1, like, -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    int n = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(h);
    return n;
}

/* --logprobs both: the published batches (4 groups of 3 samples, 6 tokens each) carry
 * logprobs_processed, equal (as floats) to the JSONL's for the same prompt and sample, never
 * below the raw logprob (the truncated mass is at most the whole vocabulary's) and above it on
 * some tokens (top-p 0.95 truncates). Frees the batches. */
static void
check_processed_batches(grpo_batch **bs, size_t nb, const char *jsonl_text)
{
    size_t above = 0, seen = 0;
    assert_int_equal(nb, 4);
    cJSON *lines[4][4] = {{NULL}};
    char *jl = strdup(jsonl_text);
    for (char *line = strtok(jl, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        int g = (int)cJSON_GetObjectItem(o, "group")->valuedouble;
        int smp = cJSON_GetObjectItem(o, "sample")->valueint;
        assert_true(g >= 0 && g < 4 && smp >= 0 && smp < 3);
        lines[g][smp] = o;
    }
    for (size_t k = 0; k < nb; k++) {
        grpo_batch *b = bs[k];
        assert_true(b->flags & GRPO_BATCH_HAS_PROCESSED);
        for (size_t i = 0; i < b->n_seq; i++) {
            int64_t g = b->group_ids[i];
            assert_true(g >= 0 && g < 4);
            cJSON *o = lines[g][b->sample_idx[i]];
            assert_non_null(o);
            cJSON *jp = cJSON_GetObjectItem(o, "logprobs_processed");
            cJSON *jr = cJSON_GetObjectItem(o, "logprobs");
            int64_t p = b->seq_offsets[i] + b->prompt_lens[i];
            for (int64_t t = b->seq_offsets[i]; t < p; t++)
                assert_true(b->logprobs_processed[t] == 0.0f);
            for (int64_t t = p; t < b->seq_offsets[i + 1]; t++, seen++) {
                int j = (int)(t - p);
                assert_true((float)cJSON_GetArrayItem(jp, j)->valuedouble ==
                            b->logprobs_processed[t]);
                assert_true((float)cJSON_GetArrayItem(jr, j)->valuedouble == b->logprobs[t]);
                assert_true(b->logprobs_processed[t] >= b->logprobs[t]);
                assert_true(b->logprobs_processed[t] <= 0.0f);
                above += b->logprobs_processed[t] > b->logprobs[t];
            }
        }
        grpo_batch_destroy(b);
    }
    assert_int_equal(seen, 12 * 6);
    assert_true(above > 0);
    for (int g = 0; g < 4; g++)
        for (int smp = 0; smp < 4; smp++)
            cJSON_Delete(lines[g][smp]);
    free(jl);
}

static void
test_rollout_replay(void **state)
{
    (void)state;
    char db1[512], db2[512];
    snprintf(db1, sizeof db1, "%s/a.db", tmpdir);
    snprintf(db2, sizeof db2, "%s/b.db", tmpdir);
    assert_int_equal(run(ROLL " --group 4 --max-new-tokens 12 --temperature 1.0 --db %s --out "
                              "%s/a.jsonl --threads 2 --logprobs both",
                         bin, src, src, db1, tmpdir),
                     0);
    const char *out = slurp("out.txt");
    assert_non_null(strstr(out, "4 groups, 16 completions"));
    /* JSONL: 16 valid lines with 12 tokens and both logprob kinds */
    char *jl = slurp("a.jsonl");
    int lines = 0;
    for (char *line = strtok(jl, "\n"); line; line = strtok(NULL, "\n"), lines++) {
        cJSON *o = cJSON_Parse(line);
        assert_non_null(o);
        assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(o, "tokens")), 12);
        assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(o, "logprobs_processed")), 12);
        cJSON_Delete(o);
    }
    assert_int_equal(lines, 16);
    /* one forward thread: identical records */
    assert_int_equal(run(ROLL
                         " --group 4 --max-new-tokens 12 --temperature 1.0 --db %s --threads 1",
                         bin, src, src, db2),
                     0);
    static char b1[1 << 16], b2[1 << 16];
    size_t n1 = token_blobs(db1, b1, sizeof b1), n2 = token_blobs(db2, b2, sizeof b2);
    assert_int_equal(n1, 16 * 12 * 8);
    assert_int_equal(n1, n2);
    assert_memory_equal(b1, b2, n1);
    /* replay: identical, exit 0 */
    for (int id = 1; id <= 16; id += 5) {
        assert_int_equal(run("%s replay --db %s --completion %d --threads 1", bin, db1, id), 0);
        assert_non_null(strstr(slurp("out.txt"), "bit-identical"));
    }
    /* tamper with one recorded token: replay says different, exit 1 */
    sqlite3 *h;
    assert_int_equal(sqlite3_open(db1, &h), SQLITE_OK);
    assert_int_equal(sqlite3_exec(h,
                                  "UPDATE completions SET token_ids = "
                                  "substr(token_ids, 1, 8) || x'01000000' || substr(token_ids, 13)"
                                  " WHERE id = 3",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(h);
    assert_int_equal(run("%s replay --db %s --completion 3", bin, db1), 1);
    assert_non_null(strstr(slurp("out.txt"), "DIFFERENT at token 2"));
    assert_int_equal(run("%s replay --db %s --completion 999", bin, db1), 1);
    assert_int_equal(run("%s replay --db %s", bin, db1), 2);
}

#define ROLL_FP8                                                                                   \
    "%s rollout --model %s/tests/data/tiny_models/fp8 --prompts %s/data/tiny_prompts.jsonl"        \
    " --group 4 --max-new-tokens 12 --temperature 1.0"

/* ROLL_FP8 with --OPT VAL at 2 and at 1 thread, into TMP/OPT-VAL.db (its path in d2) and
 * TMP/OPT-VALt1.db: the same completions, other than those of de (the run without the option), and
 * "KEY":"VAL" in each of the 4 groups' sampling records. */
static void
option_runs(const char *opt, const char *key, const char *val, const char *de, char *d2, size_t n2)
{
    char d1[512], rec[64];
    snprintf(d2, n2, "%s/%s-%s.db", tmpdir, opt, val);
    snprintf(d1, sizeof d1, "%s/%s-%st1.db", tmpdir, opt, val);
    assert_int_equal(run(ROLL_FP8 " --db %s --threads 2 --%s %s", bin, src, src, d2, opt, val), 0);
    assert_int_equal(run(ROLL_FP8 " --db %s --threads 1 --%s %s", bin, src, src, d1, opt, val), 0);
    assert_same_completions(d2, d1, de); /* and not the run's without the option */
    snprintf(rec, sizeof rec, "\"%s\":\"%s\"", key, val);
    assert_int_equal(count_containing(d2, "groups", "sampling_json", rec), 4);
}

/* --numerics q8 and fp8: the same completions with 1 and 2 threads, other completions than the
 * exact path's, the numerics recorded with each group, and replay bit-identical from the
 * record. */
static void
test_numerics(void **state)
{
    (void)state;
    char dq[512], de[512];
    snprintf(de, sizeof de, "%s/exact.db", tmpdir);
    assert_int_equal(run(ROLL_FP8 " --db %s --threads 2", bin, src, src, de), 0);
    const char *names[2] = {"q8", "fp8"};
    for (int i = 0; i < 2; i++) {
        option_runs("numerics", "numerics", names[i], de, dq, sizeof dq);
        for (int id = 1; id <= 16; id += 5) {
            assert_int_equal(run("%s replay --db %s --completion %d --threads 1", bin, dq, id), 0);
            assert_non_null(strstr(slurp("out.txt"), "bit-identical"));
        }
    }
    /* --deterministic off: numerics fp8-nondet (cuBLASLt on a GPU), on the CPU the fp8 twin
     * itself: recorded as such, the fp8 run's tokens, replayed bit for bit */
    char dn[512];
    snprintf(dn, sizeof dn, "%s/fp8-nondet.db", tmpdir);
    assert_int_equal(
        run(ROLL_FP8 " --db %s --threads 2 --numerics fp8 --deterministic off", bin, src, src, dn),
        0);
    assert_int_equal(count_containing(dn, "groups", "sampling_json", "\"numerics\":\"fp8-nondet\""),
                     4);
    assert_same_completions(dn, dq, de);
    assert_int_equal(run("%s replay --db %s --completion 3 --threads 1", bin, dn), 0);
    assert_non_null(strstr(slurp("out.txt"), "bit-identical"));
    assert_int_equal(run(ROLL_FP8 " --db %s --deterministic off", bin, src, src, dn), 2);
    assert_non_null(strstr(slurp("out.txt"), "numerics exact is always deterministic"));
    assert_int_equal(run(ROLL_FP8 " --db %s --numerics fp4", bin, src, src, dq), 2);
    assert_non_null(
        strstr(slurp("out.txt"), "expected \"exact\", \"q8\", \"fp8\" or \"fp8-nondet\""));
}

/* --speculative 2 (the bf16 tiny model's MTP layer): the same completions with 1 and 2 threads,
 * other than those without speculation, the value recorded with each group, replay bit-identical
 * from the record, the acceptance line printed; the same with an FP8 cache; a model without an
 * MTP module is refused. */
static void
test_speculative(void **state)
{
    (void)state;
    char d1[512], d2[512], d0[512];
    snprintf(d1, sizeof d1, "%s/spec1.db", tmpdir);
    snprintf(d2, sizeof d2, "%s/spec2.db", tmpdir);
    snprintf(d0, sizeof d0, "%s/spec0.db", tmpdir);
#define ROLL_SPEC ROLL " --group 4 --max-new-tokens 24 --temperature 1.0"
    assert_int_equal(run(ROLL_SPEC " --db %s --threads 2 --speculative 2", bin, src, src, d2), 0);
    assert_non_null(strstr(slurp("out.txt"), "drafts accepted"));
    assert_int_equal(run(ROLL_SPEC " --db %s --threads 1 --speculative 2", bin, src, src, d1), 0);
    assert_int_equal(run(ROLL_SPEC " --db %s --threads 2", bin, src, src, d0), 0);
    assert_same_completions(d1, d2, d0);
    assert_int_equal(count_containing(d2, "groups", "sampling_json", "\"speculative\":2"), 4);
    for (int id = 1; id <= 16; id += 3) {
        assert_int_equal(run("%s replay --db %s --completion %d --threads 1", bin, d2, id), 0);
        assert_non_null(strstr(slurp("out.txt"), "bit-identical"));
    }
    /* with an FP8 cache (the MTP pool too): thread-invariant and replayed bit for bit */
    snprintf(d1, sizeof d1, "%s/spec1k.db", tmpdir);
    snprintf(d2, sizeof d2, "%s/spec2k.db", tmpdir);
    assert_int_equal(
        run(ROLL_SPEC " --db %s --threads 2 --speculative 2 --kv-dtype fp8", bin, src, src, d2), 0);
    assert_int_equal(
        run(ROLL_SPEC " --db %s --threads 1 --speculative 2 --kv-dtype fp8", bin, src, src, d1), 0);
    assert_same_completions(d1, d2, NULL);
    for (int id = 2; id <= 16; id += 7) {
        assert_int_equal(run("%s replay --db %s --completion %d --threads 1", bin, d2, id), 0);
        assert_non_null(strstr(slurp("out.txt"), "bit-identical"));
    }
    assert_int_equal(run(ROLL_FP8 " --db %s --speculative 2", bin, src, src, d0), 1);
    assert_non_null(strstr(slurp("out.txt"), "MTP module"));
    assert_int_equal(run(ROLL_SPEC " --db %s --speculative 4", bin, src, src, d0), 2);
#undef ROLL_SPEC
}

/* --kv-dtype bf16 and fp8: the same completions with 1 and 2 threads, other than the f32
 * cache's, the dtype recorded with each group and replay bit-identical from the record (and not
 * with the record's dtype taken away); the byte budget that holds one f32 group at a time holds
 * more groups of smaller rows. */
static void
test_kv_dtype(void **state)
{
    (void)state;
    static const char *const dts[2] = {"bf16", "fp8"};
    char de[512];
    snprintf(de, sizeof de, "%s/kvf32.db", tmpdir);
    assert_int_equal(run(ROLL_FP8 " --db %s --threads 2", bin, src, src, de), 0);
    for (int d = 0; d < 2; d++) {
        char d2[512], like[64];
        option_runs("kv-dtype", "kv_dtype", dts[d], de, d2, sizeof d2);
        snprintf(like, sizeof like, "\"kv_dtype\":\"%s\"", dts[d]);
        assert_int_equal(count_containing(d2, "runs", "config_json", like), 1);
        sqlite3 *h;
        assert_int_equal(sqlite3_open(d2, &h), SQLITE_OK);
        for (int id = 1; id <= 16; id += 5) {
            assert_int_equal(run("%s replay --db %s --completion %d --threads 1", bin, d2, id), 0);
            assert_non_null(strstr(slurp("out.txt"), "bit-identical"));
        }
        /* without the recorded dtype, replay decodes with the f32 cache: different */
        assert_int_equal(sqlite3_exec(h,
                                      "UPDATE groups SET sampling_json = replace(replace("
                                      "sampling_json, ',\"kv_dtype\":\"bf16\"', ''), "
                                      "',\"kv_dtype\":\"fp8\"', '')",
                                      NULL, NULL, NULL),
                         SQLITE_OK);
        assert_int_equal(run("%s replay --db %s --completion 1 --threads 1", bin, d2), 1);
        assert_non_null(strstr(slurp("out.txt"), "DIFFERENT"));
        assert_int_equal(sqlite3_exec(h,
                                      "UPDATE groups SET sampling_json = "
                                      "replace(sampling_json, '\"prompt_tokens\"', "
                                      "'\"kv_dtype\":\"int4\",\"prompt_tokens\"')",
                                      NULL, NULL, NULL),
                         SQLITE_OK);
        sqlite3_close(h);
        assert_int_equal(run("%s replay --db %s --completion 1", bin, d2), 1);
        assert_non_null(strstr(slurp("out.txt"), "kv dtype \"int4\""));
    }
    /* 5 f32 pages (122,880 B each: 3 layers x 64 x 160 floats) hold one group of 4 at a time;
     * fp8 rows (196 B against 640) fit three groups in the same bytes */
    assert_int_equal(run(ROLL_FP8 " --db %s/kvb32.db --kv-budget 614400", bin, src, src, tmpdir),
                     0);
    assert_non_null(strstr(slurp("out.txt"), "peak groups in flight 1,"));
    assert_int_equal(
        run(ROLL_FP8 " --db %s/kvb8.db --kv-budget 614400 --kv-dtype fp8", bin, src, src, tmpdir),
        0);
    assert_null(strstr(slurp("out.txt"), "peak groups in flight 1,"));
    assert_int_equal(run(ROLL_FP8 " --db %s --kv-dtype int4", bin, src, src, de), 2);
    assert_non_null(strstr(slurp("out.txt"), "expected \"f32\", \"bf16\" or \"fp8\""));
}

static void
test_budget_and_bad_lines(void **state)
{
    (void)state;
    /* a tiny prompt is < 64 tokens: 1 shared page + G x 1 page; 3 pages = one group of 2 */
    assert_int_equal(run(ROLL " --group 2 --max-new-tokens 8 --db %s/c.db --kv-budget 192t", bin,
                         src, src, tmpdir),
                     0);
    assert_non_null(strstr(slurp("out.txt"), "peak groups in flight 1,"));
    assert_int_equal(run(ROLL " --group 2 --max-new-tokens 8 --db %s/c2.db", bin, src, src, tmpdir),
                     0);
    assert_null(strstr(slurp("out.txt"), "peak groups in flight 1,"));
    /* a group that can never fit */
    assert_int_equal(run(ROLL " --group 8 --max-new-tokens 8 --db %s/c3.db --kv-budget 192t", bin,
                         src, src, tmpdir),
                     1);
    assert_non_null(strstr(slurp("out.txt"), "KV pages"));
    /* bad lines: fatal by default with the line number, skipped on request */
    assert_int_equal(run("%s rollout --model %s/tests/data/tiny_models/bf16 --prompts "
                         "%s/tests/data/engine/prompts_mixed.jsonl --group 2 --max-new-tokens 4 "
                         "--db %s/d.db",
                         bin, src, src, tmpdir),
                     1);
    assert_non_null(strstr(slurp("out.txt"), "prompts_mixed.jsonl:5"));
    assert_int_equal(run("%s rollout --model %s/tests/data/tiny_models/bf16 --prompts "
                         "%s/tests/data/engine/prompts_mixed.jsonl --group 2 --max-new-tokens 4 "
                         "--db %s/d.db --on-bad-line skip",
                         bin, src, src, tmpdir),
                     0);
    assert_non_null(strstr(slurp("out.txt"), "4 groups, 8 completions"));
    /* --ref-model (here the same weights) and --rescore: ref and rescored logprobs in the JSONL
     * equal the sampled ones to 1e-3, and the stored KL summaries are near 0 */
    assert_int_equal(run(ROLL " --group 2 --max-new-tokens 5 --db %s/r.db --out %s/r.jsonl "
                              "--ref-model %s/tests/data/tiny_models/bf16 --rescore",
                         bin, src, src, tmpdir, tmpdir, src),
                     0);
    char *jl = slurp("r.jsonl");
    int lines = 0;
    for (char *line = strtok(jl, "\n"); line; line = strtok(NULL, "\n"), lines++) {
        cJSON *o = cJSON_Parse(line);
        cJSON *lp = cJSON_GetObjectItem(o, "logprobs"),
              *ref = cJSON_GetObjectItem(o, "ref_logprobs");
        cJSON *re = cJSON_GetObjectItem(o, "rescored_logprobs");
        int n = cJSON_GetObjectItem(o, "n_tokens")->valueint; /* EOS may end a sample early */
        assert_true(n >= 1 && n <= 5);
        assert_int_equal(cJSON_GetArraySize(ref), n);
        assert_int_equal(cJSON_GetArraySize(re), n);
        for (int k = 0; k < n; k++) {
            double a = cJSON_GetArrayItem(lp, k)->valuedouble;
            assert_true(fabs(a - cJSON_GetArrayItem(ref, k)->valuedouble) < 1e-3);
            assert_true(fabs(a - cJSON_GetArrayItem(re, k)->valuedouble) < 1e-3);
        }
        cJSON_Delete(o);
    }
    assert_int_equal(lines, 8);
    char rdb[512];
    snprintf(rdb, sizeof rdb, "%s/r.db", tmpdir);
    sqlite3 *h;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_open_v2(rdb, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    if (sqlite3_prepare_v2(h, "SELECT max(abs(kl_max)) FROM completions", -1, &st, NULL) ==
        SQLITE_OK) { /* column name per the store's schema; skipped if it moved */
        assert_int_equal(sqlite3_step(st), SQLITE_ROW);
        assert_true(sqlite3_column_double(st, 0) < 1e-3);
        sqlite3_finalize(st);
    }
    sqlite3_close(h);
    assert_int_equal(run("%s rollout --help", bin), 0);
    assert_non_null(strstr(slurp("out.txt"), "default 64"));
    assert_int_equal(run("%s rollout --top-p 2", bin), 2);
    assert_int_equal(run("%s rollout --bogus", bin), 2);
    assert_int_equal(run("%s rollout --template chatml", bin), 2); /* usage, before any work */
    assert_non_null(strstr(slurp("out.txt"), "expected auto, r1, v3, qwen2.5, qwen3"));
    /* a --publish URL the bridge cannot listen on is a usage error, on one line, before any work
     * (the store is not even created) */
    assert_int_equal(run(ROLL " --group 2 --max-new-tokens 4 --db %s/pub.db --publish foo://x", bin,
                         src, src, tmpdir),
                     2);
    const char *o = slurp("out.txt");
    assert_non_null(strstr(o, "--publish foo://x: expected a tcp://, ipc:// or inproc:// URL"));
    assert_true(strchr(o, '\n') == o + strlen(o) - 1);
    char pubdb[600];
    snprintf(pubdb, sizeof pubdb, "%s/pub.db", tmpdir);
    assert_int_not_equal(access(pubdb, F_OK), 0);
}

/* --gpu N: refused beside --threads and in a build without the CUDA backend (usage, exit 2);
 * in a CUDA build the model runs on the CUDA kernels: with no device that is a clear runtime
 * failure (exit 1, before any store is written), with one the run completes. */
static void
test_gpu_flag(void **state)
{
    (void)state;
    assert_int_equal(run("%s --version", bin), 0);
    int cuda = strstr(slurp("out.txt"), "cuda=yes") != NULL;
    char db[512];
    snprintf(db, sizeof db, "%s/gpu.db", tmpdir);
    assert_int_equal(run(ROLL " --gpu 0 --threads 2 --db %s", bin, src, src, db), 2);
    assert_non_null(strstr(slurp("out.txt"), "give --threads or --gpu, not both"));
    assert_int_equal(run(ROLL " --gpu -1 --db %s", bin, src, src, db), 2);
    assert_int_equal(run(ROLL " --gpu x --db %s", bin, src, src, db), 2);
    int rc = run(ROLL " --group 4 --max-new-tokens 6 --gpu 0 --db %s", bin, src, src, db);
    const char *o = slurp("out.txt");
    if (!cuda) {
        assert_int_equal(rc, 2);
        assert_non_null(strstr(o, "built without the CUDA backend"));
    } else if (access("/dev/nvidia0", F_OK) != 0) {
        assert_int_equal(rc, 1);
        assert_non_null(strstr(o, "no CUDA device is visible (CUDA_VISIBLE_DEVICES=0)"));
        assert_int_not_equal(access(db, F_OK), 0);
    } else {
        assert_int_equal(rc, 0);
        assert_non_null(strstr(o, "4 groups, 16 completions"));
    }
    assert_int_equal(run("%s worker --gpu 0 --threads 2 --connect tcp://127.0.0.1:9", bin), 2);
    /* a GPU worker that cannot use its GPU fails before it joins a coordinator (none listens
     * here: --give-up 30 would be the only other way out) */
    rc = run("%s worker --gpu 0 --connect tcp://127.0.0.1:9 --give-up 30", bin);
    o = slurp("out.txt");
    if (!cuda) {
        assert_int_equal(rc, 2);
    } else if (access("/dev/nvidia0", F_OK) != 0) {
        assert_int_equal(rc, 1);
        assert_non_null(strstr(o, "no CUDA device is visible"));
        assert_null(strstr(o, "no answer from"));
    }
    /* the binary itself never links CUDA (libgrpo_cuda.so is loaded for --gpu only): mapping
     * cudart and cuBLASLt would cost every process ~200 MB and every sandbox clone their page
     * tables */
    assert_int_equal(run("ldd %s | grep -q -e libcudart -e libcublas -e libnccl", bin), 1);
    /* nor OpenBLAS (`grpo bench gemm` opens it): its thread pool would start, and spin in
     * sched_yield, in every grpo process; it once took 17% of a batch-1 decode's profile */
    assert_int_equal(run("ldd %s | grep -q libopenblas", bin), 1);
}

/* --resume: a run whose store lost two groups and holds one group an interrupt cut short
 * (finish 'abort') is continued: the cut group is dropped and sampled again, the lost ones are
 * sampled, the recorded one is kept, and the store then equals an uninterrupted run's; with no
 * unfinished run it starts a new one; with other weights in the same model directory it refuses;
 * not with --publish. */
static void
test_resume(void **state)
{
    (void)state;
    char full[512], cut[512];
    snprintf(full, sizeof full, "%s/full.db", tmpdir);
    snprintf(cut, sizeof cut, "%s/cut.db", tmpdir);
#define RUN4 ROLL " --group 4 --max-new-tokens 12 --temperature 1.0 --db %s"
    assert_int_equal(run(RUN4, bin, src, src, full), 0);
    assert_int_equal(run(RUN4 " --resume", bin, src, src, cut), 0); /* nothing to resume */
    assert_non_null(strstr(slurp("out.txt"), "starting a new one"));
    sqlite3 *h;
    assert_int_equal(sqlite3_open(cut, &h), SQLITE_OK);
    assert_int_equal(
        sqlite3_exec(h,
                     "UPDATE runs SET status = 'interrupted';"
                     "DELETE FROM rewards WHERE completion_id IN (SELECT id FROM completions "
                     " WHERE group_id IN (SELECT id FROM groups ORDER BY id LIMIT 2));"
                     "DELETE FROM group_verifiers WHERE group_id IN "
                     " (SELECT id FROM groups ORDER BY id LIMIT 2);"
                     "DELETE FROM completions WHERE group_id IN "
                     " (SELECT id FROM groups ORDER BY id LIMIT 2);"
                     "DELETE FROM groups WHERE id IN (SELECT id FROM groups ORDER BY id LIMIT 2);"
                     "UPDATE completions SET finish_reason = 'abort', n_tokens = 2, "
                     " token_ids = substr(token_ids, 1, 8), token_logprobs = "
                     " substr(token_logprobs, 1, 8) WHERE sample_index = 1 AND group_id = "
                     " (SELECT min(id) FROM groups);",
                     NULL, NULL, NULL),
        SQLITE_OK);
    sqlite3_close(h);
    assert_int_equal(run(RUN4 " --resume --publish ipc:///tmp/x", bin, src, src, cut), 2);
    assert_int_equal(run(RUN4 " --resume", bin, src, src, cut), 0);
    const char *o = slurp("out.txt");
    assert_non_null(strstr(o, "resuming run 1"));
    assert_non_null(strstr(o, "(1 groups cut short"));
    assert_non_null(strstr(o, "1 groups already recorded, 3 to sample"));
    static char b1[1 << 16], b2[1 << 16];
    size_t n1 = token_blobs(full, b1, sizeof b1), n2 = token_blobs(cut, b2, sizeof b2);
    assert_int_equal(n1, 16 * 12 * 8);
    assert_int_equal(n1, n2);
    assert_memory_equal(b1, b2, n1);
    assert_int_equal(sqlite3_open(cut, &h), SQLITE_OK);
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(h,
                                        "SELECT (SELECT count(*) FROM runs), (SELECT status FROM "
                                        "runs), (SELECT count(*) FROM rewards), (SELECT count(*) "
                                        "FROM completions WHERE finish_reason = 'abort')",
                                        -1, &st, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), 1);
    assert_string_equal((const char *)sqlite3_column_text(st, 1), "ok");
    assert_true(sqlite3_column_int(st, 2) >= 16);
    assert_int_equal(sqlite3_column_int(st, 3), 0);
    sqlite3_finalize(st);
    sqlite3_close(h);
    /* the same model directory with other weights: refused */
    char wdb[512];
    snprintf(wdb, sizeof wdb, "%s/w.db", tmpdir);
    assert_int_equal(run("cp -r %s/tests/data/tiny_models/bf16 %s/m", src, tmpdir), 0);
    const char *mine = "%s rollout --model %s/m --prompts %s/data/tiny_prompts.jsonl --group 2 "
                       "--max-new-tokens 4 --db %s";
    assert_int_equal(run(mine, bin, tmpdir, src, wdb), 0);
    assert_int_equal(sqlite3_open(wdb, &h), SQLITE_OK);
    assert_int_equal(sqlite3_exec(h, "UPDATE runs SET status = 'interrupted'", NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(h);
    /* flip the last byte (a weight; the header is at the start) */
    assert_int_equal(run("f=%s/m/model.safetensors; n=$(stat -c %%s $f); "
                         "printf '\\x55' | dd of=$f bs=1 seek=$((n-1)) conv=notrunc status=none",
                         tmpdir),
                     0);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s --resume", mine);
    assert_int_equal(run(cmd, bin, tmpdir, src, wdb), 1);
    assert_non_null(strstr(slurp("out.txt"), "was sampled from weights sha256"));
#undef RUN4
}

/* One column of every row of sql (blobs), concatenated into buf. */
static size_t
blobs(const char *db, const char *sql, char *buf, size_t cap)
{
    sqlite3 *h;
    sqlite3_stmt *st;
    size_t n = 0;
    assert_int_equal(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(h, sql, -1, &st, NULL), SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
        size_t len = (size_t)sqlite3_column_bytes(st, 0);
        assert_true(n + len <= cap);
        memcpy(buf + n, sqlite3_column_blob(st, 0), len);
        n += len;
    }
    sqlite3_finalize(st);
    sqlite3_close(h);
    return n;
}

/* --resume with --record-routes: the option is part of the run's identity (a plain --resume
 * starts a new run beside it), an interrupted group's routes are dropped with it, and the
 * resumed run's routes equal an uninterrupted run's. */
static void
test_resume_routes(void **state)
{
    (void)state;
    char full[512], cut[512];
    snprintf(full, sizeof full, "%s/rfull.db", tmpdir);
    snprintf(cut, sizeof cut, "%s/rcut.db", tmpdir);
#define RUNR ROLL " --group 3 --max-new-tokens 10 --temperature 1.0 --record-routes --db %s"
    assert_int_equal(run(RUNR, bin, src, src, full), 0);
    assert_int_equal(run(RUNR, bin, src, src, cut), 0);
    sqlite3 *h;
    assert_int_equal(sqlite3_open(cut, &h), SQLITE_OK);
    assert_int_equal(sqlite3_exec(h,
                                  "UPDATE runs SET status = 'interrupted';"
                                  "UPDATE completions SET finish_reason = 'abort' WHERE "
                                  " sample_index = 2 AND group_id = (SELECT min(id) FROM groups);",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(h);
    /* without the flag: not this run */
    assert_int_equal(run(ROLL " --group 3 --max-new-tokens 10 --temperature 1.0 --db %s "
                              "--resume",
                         bin, src, src, cut),
                     0);
    assert_non_null(strstr(slurp("out.txt"), "starting a new one"));
    assert_int_equal(run(RUNR " --resume", bin, src, src, cut), 0);
    const char *o = slurp("out.txt");
    assert_non_null(strstr(o, "resuming run 1"));
    assert_non_null(strstr(o, "(1 groups cut short"));
    static char b1[1 << 16], b2[1 << 16];
    const char *qs[] = {"SELECT r.prompt_routes FROM group_routes r JOIN groups g ON g.id = "
                        "r.group_id WHERE g.run_id = 1 ORDER BY g.prompt_id",
                        "SELECT r.routes FROM completion_routes r JOIN groups g ON g.id = "
                        "r.group_id WHERE g.run_id = 1 ORDER BY g.prompt_id, r.sample_index",
                        "SELECT count(*) FROM completion_routes r JOIN groups g ON g.id = "
                        "r.group_id WHERE g.run_id = 1"};
    for (int q = 0; q < 2; q++) {
        size_t n1 = blobs(full, qs[q], b1, sizeof b1), n2 = blobs(cut, qs[q], b2, sizeof b2);
        assert_true(n1 > 0);
        assert_int_equal(n1, n2);
        assert_memory_equal(b1, b2, n1);
    }
    assert_int_equal(sqlite3_open(cut, &h), SQLITE_OK);
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(h, qs[2], -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), 12); /* 4 groups x 3, none left over */
    sqlite3_finalize(st);
    sqlite3_close(h);
#undef RUNR
}

/* --publish: a trainer (the bridge's C consumer, here in the test process) receives one batch per
 * group whose tokens, prompt lengths and logprobs match the store, acknowledges each, and the run
 * then ends with every batch marked acknowledged in the store; with --logprobs both the batches
 * are version 3 with the processed logprobs (check_processed_batches). */
static void
test_publish(void **state)
{
    (void)state;
    char url[600], db[512], cmd[4096];
    snprintf(url, sizeof url, "ipc://%s/bridge.ipc", tmpdir);
    snprintf(db, sizeof db, "%s/p.db", tmpdir);
    snprintf(cmd, sizeof cmd,
             ROLL " --group 3 --max-new-tokens 6 --temperature 1.0 --db %s --publish %s "
                  "--logprobs both --out %s/pub.jsonl > %s/pub.txt 2>&1",
             bin, src, src, db, url, tmpdir, tmpdir);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    grpo_bridge_consumer *cons = NULL;
    assert_int_equal(grpo_bridge_consumer_create(&cons, url, NULL, 60000), GRPO_OK);
    int got = 0, seqs = 0;
    static int32_t toks[64][16];
    static int ntok[64];
    grpo_batch *kept[4];
    while (got < 4) {
        const void *bytes = NULL;
        size_t len = 0;
        int64_t id = 0;
        grpo_err err = grpo_bridge_consumer_next(cons, &bytes, &len, &id, 60000);
        if (err != GRPO_OK)
            fail_msg("consumer: %s", grpo_error_last());
        grpo_batch *b = NULL;
        assert_int_equal(grpo_batch_decode(&b, bytes, len), GRPO_OK);
        assert_int_equal(b->n_seq, 3);
        for (size_t i = 0; i < b->n_seq; i++) {
            int64_t lo = b->seq_offsets[i], hi = b->seq_offsets[i + 1];
            int32_t P = b->prompt_lens[i];
            assert_int_equal(hi - lo - P, 6);
            assert_true(seqs < 64);
            ntok[seqs] = (int)(hi - lo - P);
            for (int64_t k = lo + P; k < hi; k++) {
                assert_int_equal(b->loss_mask[k], 1);
                assert_true(b->logprobs[k] < 0.0f);
                toks[seqs][k - lo - P] = b->tokens[k];
            }
            seqs++;
        }
        assert_non_null(memmem(bytes, len, "\"schema_version\":\"3\"", 20));
        kept[got] = b; /* the decoded copy; bytes belong to the consumer */
        assert_int_equal(grpo_bridge_consumer_ack(cons, id, 1), GRPO_OK);
        got++;
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    grpo_bridge_consumer_destroy(cons);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    check_processed_batches(kept, 4, slurp("pub.jsonl"));
    /* every completion in the store is one of the published sequences */
    sqlite3 *h;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(h, "SELECT token_ids FROM completions", -1, &st, NULL),
                     SQLITE_OK);
    int rows = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const void *blob = sqlite3_column_blob(st, 0);
        int found = 0;
        for (int q = 0; q < seqs && !found; q++)
            found = sqlite3_column_bytes(st, 0) == ntok[q] * 4 &&
                    memcmp(blob, toks[q], (size_t)ntok[q] * 4) == 0;
        assert_true(found);
        rows++;
    }
    sqlite3_finalize(st);
    assert_int_equal(rows, 12);
    assert_int_equal(sqlite3_prepare_v2(h,
                                        "SELECT count(*) FROM batches WHERE acked_at IS NOT NULL",
                                        -1, &st, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), 4);
    sqlite3_finalize(st);
    sqlite3_close(h);
}

/* New weights from the trainer mid-run (by path, the same tensors as version 1): admission pauses,
 * the group in flight finishes on version 0, later groups are sampled from version 1 and say so in
 * their batches and in the store, and a version-1 completion replays bit for bit. With one group
 * in flight at a time (--kv-budget), a publish window of 1 and one pending group, the order is
 * fixed: batches 0 and 1 from version 0, 2 and 3 from version 1. */
static void
test_weights_update(void **state)
{
    (void)state;
    char url[600], db[512], cmd[4096], wpath[1024], sha[65];
    snprintf(url, sizeof url, "ipc://%s/weights.ipc", tmpdir);
    snprintf(db, sizeof db, "%s/w.db", tmpdir);
    snprintf(wpath, sizeof wpath, "%s/tests/data/tiny_models/bf16/model.safetensors", src);
    assert_int_equal(grpo_sha256_file(wpath, sha), GRPO_OK);
    snprintf(cmd, sizeof cmd,
             ROLL " --group 2 --max-new-tokens 6 --db %s --publish %s --kv-budget 192t "
                  "--publish-window 1 --max-pending-groups 1 > %s/w.txt 2>&1",
             bin, src, src, db, url, tmpdir);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    grpo_bridge_consumer *cons = NULL;
    assert_int_equal(grpo_bridge_consumer_create(&cons, url, NULL, 60000), GRPO_OK);
    int64_t versions[4];
    for (int got = 0; got < 4; got++) {
        const void *bytes = NULL;
        size_t len = 0;
        int64_t id = 0;
        if (grpo_bridge_consumer_next(cons, &bytes, &len, &id, 60000) != GRPO_OK)
            fail_msg("consumer: %s", grpo_error_last());
        grpo_batch *b = NULL;
        assert_int_equal(grpo_batch_decode(&b, bytes, len), GRPO_OK);
        versions[got] = b->policy_version;
        grpo_batch_destroy(b);
        if (got == 0)
            assert_int_equal(grpo_bridge_consumer_send_weights_path(cons, 1, wpath, sha), GRPO_OK);
        assert_int_equal(grpo_bridge_consumer_ack(cons, id, 1), GRPO_OK);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    grpo_bridge_consumer_destroy(cons);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) != 0)
        fail_msg("rollout failed: %s", slurp("w.txt"));
    assert_int_equal(versions[0], 0);
    assert_int_equal(versions[1], 0);
    assert_int_equal(versions[2], 1);
    assert_int_equal(versions[3], 1);
    assert_non_null(strstr(slurp("w.txt"), "policy version 1"));
    /* the store: groups by version, and a version-1 completion replays from its recorded dir */
    sqlite3 *h;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(
        sqlite3_prepare_v2(h,
                           "SELECT max(c.id), count(*) FROM completions c JOIN groups g "
                           "ON g.id = c.group_id WHERE g.policy_version = 1",
                           -1, &st, NULL),
        SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    int last = sqlite3_column_int(st, 0);
    assert_int_equal(sqlite3_column_int(st, 1), 4);
    sqlite3_finalize(st);
    sqlite3_close(h);
    assert_int_equal(run("%s replay --db %s --completion %d", bin, db, last), 0);
    assert_non_null(strstr(slurp("out.txt"), "bit-identical"));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rollout_replay),
        cmocka_unit_test(test_numerics),
        cmocka_unit_test(test_kv_dtype),
        cmocka_unit_test(test_speculative),
        cmocka_unit_test(test_budget_and_bad_lines),
        cmocka_unit_test(test_publish),
        cmocka_unit_test(test_resume_routes),
        cmocka_unit_test(test_gpu_flag),
        cmocka_unit_test(test_resume),
        cmocka_unit_test(test_weights_update),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
