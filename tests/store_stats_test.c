/* store/ + `grpo stats`: the stats views' numbers against values computed here, independently,
 * from the raw data the test inserted (means, population std, nearest-rank percentiles, pass
 * rates, zero-std groups, tokens/s, unbiased pass@k from exact binomials). Built twice: as
 * store_stats_test (through grpo_store_stats) and, with STORE_TEST_CLI, as store_cli_test (through
 * the grpo binary's json/csv/table/report output). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "store_test_util.h"

#include "common/common_int.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <sys/wait.h>
#include <unistd.h>

enum { STEPS = 6, PROMPTS = 5, MAXG = 7, MAXTOK = 40, NV = 2, MAXT = 3 };

/* Tool environments of the turns (ENV_BAD: a record that is not JSON, so no env) and labels. */
enum { ENV_PY, ENV_SEARCH, ENV_BAD };
static const char *const env_names[] = {"python", "search", "(unknown)"};
static const char *const label_names[] = {"ok", "error", "timeout", "bad-call"};

typedef struct {
    int64_t run, step, prompt;
    int32_t g;
    double started, finished;
    const char *worker;
    int32_t lease;
    double reward[MAXG];
    int correct[MAXG]; /* -1 unknown */
    int tokens[MAXG], truncated[MAXG];
    int kind[MAXG][NV];
    double score[MAXG][NV], ms[MAXG][NV];
    int finish[MAXG]; /* a grpo_finish */
    int no_ref;       /* recorded without a reference policy (no KL) */
    double kl_mean[MAXG], kl_max[MAXG], lp_sum[MAXG], ref_sum[MAXG];
    char text[MAXG][900]; /* the completion's stored bytes */
    /* turns: env, label (an index of label_names; 'unknown' for ENV_BAD), whether the tool ran
     * ('bad-call' and ENV_BAD did not), its times and observation tokens */
    int nt[MAXG], env[MAXG][MAXT], label[MAXG][MAXT], ran[MAXG][MAXT], n_obs[MAXG][MAXT];
    double tool_ms[MAXG][MAXT], wait_ms[MAXG][MAXT];
} rawgroup;

static rawgroup groups[STEPS * PROMPTS + 8];
static int n_groups;
static int64_t run1, run2, prompt_ids[PROMPTS];
static char dir[256], dbpath[300];

/* ---- the data -----------------------------------------------------------------------------------
 */

/* The first completion's text: an invalid byte, markup and 400 two-byte characters (805 bytes). */
static void
odd_text(char *buf)
{
    strcpy(buf, "\xff<b>&");
    for (int i = 0; i < 400; i++)
        strcat(buf, "\xc3\xa9");
}

/* Gives completion i of r up to MAXT turns (none for 2 in 5), recorded in r and in t/json. */
static void
make_turns(rawgroup *r, int i, grpo_completion_rec *c, grpo_turn_rec *t, char (*json)[200],
           uint64_t *rng)
{
    r->nt[i] = c->n_tokens >= 8 && tu_rand(rng) % 5 >= 2 ? 1 + (int)(tu_rand(rng) % MAXT) : 0;
    int seg = r->nt[i] ? c->n_tokens / r->nt[i] : 0;
    for (int k = 0; k < r->nt[i]; k++) {
        int e = (int)(tu_rand(rng) % 5), lab = (int)(tu_rand(rng) % 4);
        e = e < 2 ? ENV_PY : e < 4 ? ENV_SEARCH : ENV_BAD;
        r->env[i][k] = e, r->label[i][k] = lab, r->ran[i][k] = e != ENV_BAD && lab != 3;
        r->n_obs[i][k] = (int)(tu_rand(rng) % (uint64_t)seg);
        r->tool_ms[i][k] = 0.5 * (double)(tu_rand(rng) % 50); /* ties, for the percentiles */
        r->wait_ms[i][k] = 0.25 * (double)(tu_rand(rng) % 30);
        if (e == ENV_BAD)
            snprintf(json[k], sizeof json[k], "{\"env\":\"python\",\"label\":\"ok\"");
        else
            snprintf(json[k], sizeof json[k],
                     "{\"env\":\"%s\",\"label\":\"%s\",\"tool_ms\":%.17g,\"ran\":%s,"
                     "\"done\":false}",
                     env_names[e], label_names[lab], r->tool_ms[i][k],
                     r->ran[i][k] ? "true" : "false");
        t[k] = (grpo_turn_rec){k * seg + 1, r->n_obs[i][k], 0, 1.0, r->wait_ms[i][k], json[k]};
    }
    c->n_turns = r->nt[i], c->turns = t;
}

static void
put(grpo_store *s, rawgroup *r, uint64_t *rng, uint64_t seed)
{
    grpo_turn_rec turns[MAXG][MAXT];
    char json[MAXG][MAXT][200];
    tu_group t;
    tu_group_make(&t, rng, r->run, r->step, r->prompt, seed, r->g, MAXTOK, NV);
    t.g.worker_id = r->worker;
    for (int i = 0; i < r->g; i++) {
        grpo_completion_rec *c = &t.c[i];
        if (c->finish_reason == GRPO_FINISH_EOS && i % 4 == 3)
            c->finish_reason = GRPO_FINISH_STOP;
        c->no_ref = r->no_ref;
        if (n_groups == 1 && i == 0)
            odd_text(r->text[i]);
        else
            snprintf(r->text[i], sizeof r->text[i], "%s", c->text);
        c->text = r->text[i];
        r->finish[i] = c->finish_reason;
        r->kl_mean[i] = c->kl_mean, r->kl_max[i] = c->kl_max;
        r->lp_sum[i] = c->logprob_sum, r->ref_sum[i] = c->ref_logprob_sum;
        make_turns(r, i, c, turns[i], json[i], rng);
    }
    t.g.lease_attempt = r->lease;
    r->started = t.g.started_at, r->finished = t.g.finished_at;
    int zero = r->step % 3 == 0 && r->prompt == prompt_ids[1]; /* force an all-equal group */
    for (int i = 0; i < r->g; i++) {
        grpo_completion_rec *c = &t.c[i];
        for (int j = 0; j < NV; j++) {
            grpo_reward_rec *w = &t.r[i * NV + j];
            if (zero)
                w->kind = 1, w->score = 0;
            else if (j == 1 && tu_rand(rng) % 7 == 0)
                w->kind = 2, w->score = 0.25; /* skip: not scored even with a score */
            else if (j == 0 && tu_rand(rng) % 11 == 0)
                w->kind = 3, w->score = 0; /* timeout */
            r->kind[i][j] = w->kind, r->score[i][j] = w->score, r->ms[i][j] = w->ms;
        }
        double sum = 0;
        int scored = 0, passed = 0;
        for (int j = 0; j < NV; j++)
            if (r->kind[i][j] != 2)
                sum += r->score[i][j], scored++, passed += r->kind[i][j] == 0;
        r->reward[i] = sum;
        r->correct[i] = scored ? passed == scored : -1;
        r->tokens[i] = c->n_tokens;
        r->truncated[i] = c->finish_reason == GRPO_FINISH_LENGTH;
    }
    assert_int_equal(grpo_store_put_group(s, &t.g), GRPO_OK);
    tu_group_free(&t);
}

static int
setup(void **state)
{
    (void)state;
    tu_tmpdir(dir, sizeof dir);
    snprintf(dbpath, sizeof dbpath, "%s/stats.db", dir);
    grpo_store *s = NULL;
    grpo_store_opts o = {0};
    o.async = 1;
    assert_int_equal(grpo_store_open(&s, dbpath, &o), GRPO_OK);
    assert_int_equal(grpo_store_run_begin(&run1, s, NULL), GRPO_OK);
    assert_int_equal(grpo_store_run_begin(&run2, s, NULL), GRPO_OK);
    for (int p = 0; p < PROMPTS; p++) {
        char text[32];
        snprintf(text, sizeof text, "prompt %d", p);
        grpo_prompt_rec pr = {"mix", p, text, NULL, "\"1\"", NULL};
        assert_int_equal(grpo_store_put_prompt(&prompt_ids[p], s, &pr), GRPO_OK);
    }
    uint64_t rng = 0x1234567;
    for (int st = 0; st < STEPS; st++)
        for (int p = 0; p < PROMPTS; p++) {
            rawgroup *r = &groups[n_groups++];
            r->run = run1, r->step = st, r->prompt = prompt_ids[p];
            r->g = 3 + (int32_t)(tu_rand(&rng) % (MAXG - 2));
            r->worker = p % 2 ? "w-odd" : NULL;
            r->lease = p == 3 && st % 2;
            put(s, r, &rng, (uint64_t)(st * 100 + p));
        }
    for (int i = 0; i < 3; i++) { /* a second run, to check --run */
        rawgroup *r = &groups[n_groups++];
        r->run = run2, r->step = i, r->prompt = prompt_ids[0], r->g = 4, r->no_ref = i == 1;
        put(s, r, &rng, 9000 + (uint64_t)i);
    }
    assert_int_equal(grpo_store_close(s), GRPO_OK);
    return 0;
}

static int
teardown(void **state)
{
    (void)state;
    tu_rmrf(dir);
    return 0;
}

/* ---- independent reference --------------------------------------------------------------------
 */

static int
cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest rank: the smallest value with at least pct% of the data at or below it. */
static double
pctl(double *v, int n, int pct)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    for (int r = 1; r <= n; r++)
        if (100 * r >= pct * n)
            return v[r - 1];
    return NAN;
}

static void
mean_std(const double *v, int n, double *mean, double *std)
{
    double m = 0, q = 0;
    for (int i = 0; i < n; i++)
        m += v[i];
    m /= n;
    for (int i = 0; i < n; i++)
        q += (v[i] - m) * (v[i] - m);
    *mean = m, *std = sqrt(q / n);
}

static double
binom(int n, int k)
{
    if (k < 0 || k > n)
        return 0;
    double r = 1;
    for (int i = 1; i <= k; i++)
        r = r * (n - k + i) / i;
    return r;
}

static int
in_range(const rawgroup *r, int64_t run, int64_t lo, int64_t hi)
{
    return (run <= 0 || r->run == run) && r->step >= lo && r->step <= hi;
}

/* ---- reading results: through the library, or through the grpo binary ---------------------- */

/* A result as rows of (column -> number or string), whichever way it was produced. */
typedef struct {
    int n;
    cJSON *rows; /* array of objects */
} result;

static void
result_free(result *r)
{
    cJSON_Delete(r->rows);
}

#ifndef STORE_TEST_CLI
static void
query_o(result *out, const grpo_stats_opts *o)
{
    grpo_store *s = NULL;
    grpo_store_opts ro = {0};
    ro.read_only = 1;
    assert_int_equal(grpo_store_open(&s, dbpath, &ro), GRPO_OK);
    grpo_stats_table *t = NULL;
    assert_int_equal(grpo_store_stats(&t, s, o), GRPO_OK);
    out->rows = cJSON_CreateArray();
    for (int i = 0; i < t->n_rows; i++) {
        cJSON *obj = cJSON_CreateObject();
        for (int j = 0; j < t->n_cols; j++) {
            const grpo_stats_cell *c = &t->cells[i * t->n_cols + j];
            if (c->type == GRPO_STATS_INT)
                cJSON_AddNumberToObject(obj, t->cols[j], (double)c->i);
            else if (c->type == GRPO_STATS_REAL)
                cJSON_AddNumberToObject(obj, t->cols[j], c->r);
            else if (c->type == GRPO_STATS_TEXT)
                cJSON_AddStringToObject(obj, t->cols[j], c->s);
            else
                cJSON_AddNullToObject(obj, t->cols[j]);
        }
        cJSON_AddItemToArray(out->rows, obj);
    }
    out->n = t->n_rows;
    grpo_stats_table_free(t);
    assert_int_equal(grpo_store_close(s), GRPO_OK);
}
#else
/* Runs the grpo binary with args; returns its exit status and stdout (malloc'd) in *out. */
static int
run_grpo(char **out, const char *args)
{
    const char *bin = getenv("GRPO_BIN");
    if (bin == NULL || bin[0] == '\0' || access(bin, X_OK) != 0)
        fail_msg("GRPO_BIN (%s) is not an executable grpo binary", bin ? bin : "unset");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>%s/stderr.txt", bin, args, dir);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = 0, cap = 1 << 16;
    char *buf = malloc(cap);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, p)) > 0)
        if ((n += got) + 1 == cap)
            buf = realloc(buf, cap *= 2);
    buf[n] = '\0';
    int st = pclose(p);
    *out = buf;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void
query_o(result *out, const grpo_stats_opts *o)
{
    static const char *const bys[] = {"step", "verifier", "prompt",      "worker",
                                      "run",  "finish",   "reward-hist", "length-hist",
                                      "time", "kl",       "example",     "tools"};
    char args[1024], *text = NULL;
    int n = snprintf(args, sizeof args, "stats --db '%s' --by %s --format json --k %d", dbpath,
                     bys[o->by], o->pass_k ? o->pass_k : 8);
    if (o->run_id > 0)
        n += snprintf(args + n, sizeof args - n, " --run %lld", (long long)o->run_id);
    if (o->has_step_range)
        n += snprintf(args + n, sizeof args - n, " --step-range %lld:%lld", (long long)o->step_min,
                      (long long)o->step_max);
    if (o->bins)
        n += snprintf(args + n, sizeof args - n, " --bins %d", (int)o->bins);
    if (o->examples)
        n += snprintf(args + n, sizeof args - n, " --examples %d", (int)o->examples);
    if (o->text_bytes)
        n += snprintf(args + n, sizeof args - n, " --text-bytes %d", (int)o->text_bytes);
    assert_int_equal(run_grpo(&text, args), 0);
    out->rows = cJSON_Parse(text);
    if (out->rows == NULL || !cJSON_IsArray(out->rows))
        fail_msg("grpo %s: not a JSON array:\n%s", args, text);
    out->n = cJSON_GetArraySize(out->rows);
    free(text);
}
#endif

static void
query(result *out, grpo_stats_by by, int64_t run, int range, int64_t lo, int64_t hi, int k)
{
    grpo_stats_opts o = {by, run, range, lo, hi, k, 0, 0, 0};
    query_o(out, &o);
}

static double
get(const result *r, int row, const char *col)
{
    cJSON *o = cJSON_GetArrayItem(r->rows, row);
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, col);
    if (v == NULL)
        fail_msg("row %d has no column %s", row, col);
    if (!cJSON_IsNumber(v))
        fail_msg("row %d column %s is not a number", row, col);
    return v->valuedouble;
}

static const char *
get_s(const result *r, int row, const char *col)
{
    cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(r->rows, row), col);
    if (!cJSON_IsString(v))
        fail_msg("row %d column %s is not a string", row, col);
    return v->valuestring;
}

#define NEAR(a, b)                                                                                 \
    do {                                                                                           \
        double want_ = (b);                                                                        \
        assert_true(fabs((a)-want_) <= 1e-9 * (1 + fabs(want_)));                                  \
    } while (0)

/* ---- the checks -------------------------------------------------------------------------------
 */

static void
check_steps(int64_t run, int range, int64_t lo, int64_t hi)
{
    result r;
    query(&r, GRPO_STATS_BY_STEP, run, range, lo, hi, 0);
    if (!range)
        lo = INT64_MIN, hi = INT64_MAX;
    int row = 0;
    for (int64_t rn = run1; rn <= run2; rn++) {
        if (run > 0 && rn != run)
            continue;
        for (int64_t st = 0; st < STEPS; st++) {
            double rew[STEPS * PROMPTS * MAXG], len[STEPS * PROMPTS * MAXG];
            int n = 0, ng = 0, zero = 0, trunc = 0, nc = 0, cor = 0;
            double tok = 0, t0 = INFINITY, t1 = -INFINITY;
            for (int g = 0; g < n_groups; g++) {
                rawgroup *x = &groups[g];
                if (x->run != rn || x->step != st || !in_range(x, run, lo, hi))
                    continue;
                ng++;
                int eq = 1;
                for (int i = 0; i < x->g; i++) {
                    eq &= x->reward[i] == x->reward[0];
                    rew[n] = x->reward[i], len[n] = x->tokens[i], n++;
                    trunc += x->truncated[i], tok += x->tokens[i];
                    if (x->correct[i] >= 0)
                        nc++, cor += x->correct[i];
                }
                zero += eq;
                t0 = fmin(t0, x->started), t1 = fmax(t1, x->finished);
            }
            if (ng == 0)
                continue;
            assert_true(row < r.n);
            assert_int_equal((int64_t)get(&r, row, "run_id"), rn);
            assert_int_equal((int64_t)get(&r, row, "step"), st);
            assert_int_equal((int)get(&r, row, "groups"), ng);
            assert_int_equal((int)get(&r, row, "completions"), n);
            double m, sd, lm, lsd;
            mean_std(rew, n, &m, &sd);
            mean_std(len, n, &lm, &lsd);
            NEAR(get(&r, row, "reward_mean"), m);
            NEAR(get(&r, row, "reward_std"), sd);
            NEAR(get(&r, row, "frac_reward_zero_std"), (double)zero / ng);
            NEAR(get(&r, row, "pass_rate"), (double)cor / nc);
            NEAR(get(&r, row, "len_mean"), lm);
            NEAR(get(&r, row, "len_p50"), pctl(len, n, 50));
            NEAR(get(&r, row, "len_p95"), pctl(len, n, 95));
            NEAR(get(&r, row, "frac_truncated"), (double)trunc / n);
            NEAR(get(&r, row, "tokens"), tok);
            NEAR(get(&r, row, "tokens_per_s"), tok / (t1 - t0));
            row++;
        }
    }
    assert_int_equal(r.n, row);
    assert_true(row > 0);
    result_free(&r);
}

static void
check_verifiers(int64_t run, int range, int64_t lo, int64_t hi)
{
    static const char *const names[NV] = {"format", "math"}; /* the rows' (sorted) order */
    result r;
    query(&r, GRPO_STATS_BY_VERIFIER, run, range, lo, hi, 0);
    if (!range)
        lo = INT64_MIN, hi = INT64_MAX;
    int row = 0;
    for (int64_t rn = run1; rn <= run2; rn++) {
        if (run > 0 && rn != run)
            continue;
        for (int v = 0; v < NV; v++) {
            int j = v == 0 ? 1 : 0; /* reward index of that verifier */
            double sc[STEPS * PROMPTS * MAXG], ms[STEPS * PROMPTS * MAXG];
            int n = 0, ns = 0, pass = 0, cnt[5] = {0};
            for (int g = 0; g < n_groups; g++) {
                rawgroup *x = &groups[g];
                if (x->run != rn || !in_range(x, run, lo, hi))
                    continue;
                for (int i = 0; i < x->g; i++) {
                    ms[n++] = x->ms[i][j];
                    cnt[x->kind[i][j]]++;
                    if (x->kind[i][j] != 2)
                        sc[ns++] = x->score[i][j], pass += x->kind[i][j] == 0;
                }
            }
            if (n == 0)
                continue;
            assert_string_equal(get_s(&r, row, "verifier"), names[v]);
            assert_string_equal(get_s(&r, row, "version"), "1.0.0");
            assert_int_equal((int)get(&r, row, "n"), n);
            assert_int_equal((int)get(&r, row, "scored"), ns);
            double m, sd;
            mean_std(sc, ns, &m, &sd);
            NEAR(get(&r, row, "reward_mean"), m);
            NEAR(get(&r, row, "reward_std"), sd);
            NEAR(get(&r, row, "pass_rate"), (double)pass / ns);
            assert_int_equal((int)get(&r, row, "n_fail"), cnt[1]);
            assert_int_equal((int)get(&r, row, "n_skip"), cnt[2]);
            assert_int_equal((int)get(&r, row, "n_timeout"), cnt[3]);
            assert_int_equal((int)get(&r, row, "n_error"), cnt[4]);
            double lm, lsd;
            mean_std(ms, n, &lm, &lsd);
            NEAR(get(&r, row, "latency_mean_ms"), lm);
            NEAR(get(&r, row, "latency_p50_ms"), pctl(ms, n, 50));
            NEAR(get(&r, row, "latency_p99_ms"), pctl(ms, n, 99));
            row++;
        }
    }
    assert_int_equal(r.n, row);
    result_free(&r);
}

static void
check_prompts(int64_t run, int range, int64_t lo, int64_t hi, int k)
{
    result r;
    query(&r, GRPO_STATS_BY_PROMPT, run, range, lo, hi, k);
    if (!range)
        lo = INT64_MIN, hi = INT64_MAX;
    char col[32];
    snprintf(col, sizeof col, "pass_at_%d", k);
    int row = 0;
    for (int64_t rn = run1; rn <= run2; rn++) {
        if (run > 0 && rn != run)
            continue;
        for (int p = 0; p < PROMPTS; p++) {
            int n = 0, c = 0, ng = 0;
            for (int g = 0; g < n_groups; g++) {
                rawgroup *x = &groups[g];
                if (x->run != rn || x->prompt != prompt_ids[p] || !in_range(x, run, lo, hi))
                    continue;
                ng++;
                for (int i = 0; i < x->g; i++)
                    if (x->correct[i] >= 0)
                        n++, c += x->correct[i];
            }
            if (ng == 0)
                continue;
            assert_int_equal((int64_t)get(&r, row, "prompt_id"), prompt_ids[p]);
            assert_int_equal((int)get(&r, row, "groups"), ng);
            assert_int_equal((int)get(&r, row, "n"), n);
            assert_int_equal((int)get(&r, row, "c"), c);
            NEAR(get(&r, row, "solve_rate"), (double)c / n);
            cJSON *pk = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(r.rows, row), col);
            assert_non_null(pk);
            if (k > n) {
                assert_true(cJSON_IsNull(pk));
            } else {
                double want = 1 - binom(n - c, k) / binom(n, k);
                NEAR(pk->valuedouble, want);
            }
            row++;
        }
    }
    assert_int_equal(r.n, row);
    result_free(&r);
}

static void
check_workers(void)
{
    result r;
    query(&r, GRPO_STATS_BY_WORKER, run1, 0, 0, 0, 0);
    assert_int_equal(r.n, 2);
    for (int row = 0; row < 2; row++) {
        const char *w = get_s(&r, row, "worker");
        int local = strcmp(w, "(local)") == 0;
        assert_true(local || strcmp(w, "w-odd") == 0);
        int ng = 0, nc = 0, reissued = 0;
        for (int g = 0; g < n_groups; g++) {
            rawgroup *x = &groups[g];
            if (x->run != run1 || (x->worker == NULL) != local)
                continue;
            ng++, nc += x->g, reissued += x->lease > 0;
        }
        assert_int_equal((int)get(&r, row, "groups"), ng);
        assert_int_equal((int)get(&r, row, "completions"), nc);
        assert_int_equal((int)get(&r, row, "reissued_groups"), reissued);
    }
    result_free(&r);
}

static void
check_runs(int64_t run, int range, int64_t lo, int64_t hi)
{
    result r;
    query(&r, GRPO_STATS_BY_RUN, run, range, lo, hi, 0);
    if (!range)
        lo = INT64_MIN, hi = INT64_MAX;
    int row = 0;
    for (int64_t rn = run1; rn <= run2; rn++) {
        if (run > 0 && rn != run)
            continue;
        int ng = 0, nc = 0;
        double tok = 0, rsum = 0, rn_n = 0;
        int64_t first = INT64_MAX, last = INT64_MIN;
        for (int g = 0; g < n_groups; g++) {
            rawgroup *x = &groups[g];
            if (x->run != rn || !in_range(x, run, lo, hi))
                continue;
            ng++, nc += x->g;
            first = x->step < first ? x->step : first;
            last = x->step > last ? x->step : last;
            for (int i = 0; i < x->g; i++)
                tok += x->tokens[i], rsum += x->reward[i], rn_n++;
        }
        assert_int_equal((int64_t)get(&r, row, "run_id"), rn);
        assert_string_equal(get_s(&r, row, "status"), "running");
        assert_string_equal(get_s(&r, row, "grpo_version"), grpo_version());
        assert_int_equal((int)get(&r, row, "groups"), ng);
        assert_int_equal((int)get(&r, row, "completions"), nc);
        NEAR(get(&r, row, "tokens"), tok);
        if (ng > 0) {
            assert_int_equal((int64_t)get(&r, row, "first_step"), first);
            assert_int_equal((int64_t)get(&r, row, "last_step"), last);
            NEAR(get(&r, row, "reward_mean"), rsum / rn_n);
        }
        row++;
    }
    assert_int_equal(r.n, row);
    result_free(&r);
}

/* ---- the report's queries ------------------------------------------------------------------ */

/* Calls fn(x, i, ctx) for every selected completion, run by run in insertion order. */
typedef void (*each_fn)(const rawgroup *x, int i, void *ctx);
static void
each(int64_t rn, int64_t run, int64_t lo, int64_t hi, each_fn fn, void *ctx)
{
    for (int g = 0; g < n_groups; g++)
        if (groups[g].run == rn && in_range(&groups[g], run, lo, hi))
            for (int i = 0; i < groups[g].g; i++)
                fn(&groups[g], i, ctx);
}

typedef struct {
    int n, by_f[5], tok_f[5];
    double rew_f[5];
    double v[STEPS * PROMPTS * MAXG * 2];
} acc;

static void
acc_finish(const rawgroup *x, int i, void *ctx)
{
    acc *a = ctx;
    a->n++, a->by_f[x->finish[i]]++, a->tok_f[x->finish[i]] += x->tokens[i];
    a->rew_f[x->finish[i]] += x->reward[i];
}

static void
check_finish(int64_t run, int range, int64_t lo, int64_t hi)
{
    static const int order[] = {GRPO_FINISH_ABORT, GRPO_FINISH_EOS, GRPO_FINISH_LENGTH,
                                GRPO_FINISH_STOP}; /* by name */
    static const char *const names[] = {"", "eos", "stop", "length", "abort"};
    result r;
    query(&r, GRPO_STATS_BY_FINISH, run, range, lo, hi, 0);
    if (!range)
        lo = INT64_MIN, hi = INT64_MAX;
    int row = 0, seen_stop = 0;
    for (int64_t rn = run1; rn <= run2; rn++) {
        acc a = {0};
        if (run <= 0 || rn == run)
            each(rn, run, lo, hi, acc_finish, &a);
        for (int k = 0; k < 4; k++) {
            int f = order[k];
            if (a.by_f[f] == 0)
                continue;
            assert_int_equal((int64_t)get(&r, row, "run_id"), rn);
            assert_string_equal(get_s(&r, row, "finish_reason"), names[f]);
            assert_int_equal((int)get(&r, row, "completions"), a.by_f[f]);
            NEAR(get(&r, row, "frac"), (double)a.by_f[f] / a.n);
            NEAR(get(&r, row, "len_mean"), (double)a.tok_f[f] / a.by_f[f]);
            NEAR(get(&r, row, "reward_mean"), a.rew_f[f] / a.by_f[f]);
            seen_stop |= f == GRPO_FINISH_STOP;
            row++;
        }
    }
    assert_int_equal(r.n, row);
    assert_true(seen_stop);
    result_free(&r);
}

static void
acc_reward(const rawgroup *x, int i, void *ctx)
{
    acc *a = ctx;
    a->v[a->n++] = x->reward[i];
}

static void
acc_length(const rawgroup *x, int i, void *ctx)
{
    acc *a = ctx;
    a->v[a->n++] = x->tokens[i];
}

/* The selected values of every run, for the bins' shared edges. */
static void
value_range(int64_t run, int64_t lo, int64_t hi, each_fn fn, double *vlo, double *vhi)
{
    *vlo = INFINITY, *vhi = -INFINITY;
    for (int64_t rn = run1; rn <= run2; rn++) {
        acc a = {0};
        if (run <= 0 || rn == run)
            each(rn, run, lo, hi, fn, &a);
        for (int i = 0; i < a.n; i++)
            *vlo = fmin(*vlo, a.v[i]), *vhi = fmax(*vhi, a.v[i]);
    }
}

/* Equal-width real bins (reward) or integer bins (length); edges and counts against the rows. */
static void
check_hist(int length, int64_t run, int range, int64_t lo, int64_t hi, int bins)
{
    result r;
    grpo_stats_opts o = {length ? GRPO_STATS_BY_LENGTH_HIST : GRPO_STATS_BY_REWARD_HIST,
                         run,
                         range,
                         lo,
                         hi,
                         0,
                         bins,
                         0,
                         0};
    query_o(&r, &o);
    if (!range)
        lo = INT64_MIN, hi = INT64_MAX;
    int nb = bins ? bins : 20, row = 0;
    double vlo, vhi;
    each_fn fn = length ? acc_length : acc_reward;
    value_range(run, lo, hi, fn, &vlo, &vhi);
    int64_t w = length ? ((int64_t)(vhi - vlo) + nb) / nb : 0;
    if (length)
        nb = (int)(((int64_t)(vhi - vlo)) / w + 1);
    else if (vhi == vlo)
        nb = 1;
    for (int64_t rn = run1; rn <= run2; rn++) {
        acc a = {0};
        if (run <= 0 || rn == run)
            each(rn, run, lo, hi, fn, &a);
        if (a.n == 0)
            continue;
        int total = 0;
        for (int b = 0; b < nb; b++, row++) {
            int n = 0;
            for (int i = 0; i < a.n; i++) {
                int k = length ? (int)(((int64_t)(a.v[i] - vlo)) / w)
                               : (int)((a.v[i] - vlo) / (vhi - vlo) * nb);
                n += (k < nb ? k : nb - 1) == b;
            }
            assert_int_equal((int64_t)get(&r, row, "run_id"), rn);
            assert_int_equal((int)get(&r, row, "bin"), b);
            if (length) {
                NEAR(get(&r, row, "lo"), vlo + b * w);
                NEAR(get(&r, row, "hi"), fmin(vhi, vlo + (b + 1) * w - 1));
            } else {
                NEAR(get(&r, row, "lo"), vlo + b * (vhi - vlo) / nb);
                NEAR(get(&r, row, "hi"), b == nb - 1 ? vhi : vlo + (b + 1) * (vhi - vlo) / nb);
            }
            assert_int_equal((int)get(&r, row, "n"), n);
            NEAR(get(&r, row, "frac"), (double)n / a.n);
            total += n;
        }
        assert_int_equal(total, a.n);
    }
    assert_int_equal(r.n, row);
    assert_true(row > 1);
    result_free(&r);
}

/* Throughput: each group's completions and tokens spread over its span, per time bin. */
static void
check_time(int64_t run, int range, int64_t lo, int64_t hi, int bins)
{
    result r;
    grpo_stats_opts o = {GRPO_STATS_BY_TIME, run, range, lo, hi, 0, bins, 0, 0};
    query_o(&r, &o);
    if (!range)
        lo = INT64_MIN, hi = INT64_MAX;
    int nb = bins ? bins : 20, row = 0;
    for (int64_t rn = run1; rn <= run2; rn++) {
        double t0 = INFINITY, t1 = -INFINITY, tok_all = 0, sum_tok = 0;
        for (int g = 0; g < n_groups; g++) {
            rawgroup *x = &groups[g];
            if (x->run != rn || !in_range(x, run, lo, hi))
                continue;
            t0 = fmin(t0, x->started), t1 = fmax(t1, x->finished);
            for (int i = 0; i < x->g; i++)
                tok_all += x->tokens[i];
        }
        if (!isfinite(t0))
            continue;
        for (int b = 0; b < nb; b++, row++) {
            double b0 = t0 + b * (t1 - t0) / nb;
            double b1 = b == nb - 1 ? t1 : t0 + (b + 1) * (t1 - t0) / nb;
            double comp = 0, tok = 0;
            int active = 0;
            for (int g = 0; g < n_groups; g++) {
                rawgroup *x = &groups[g];
                if (x->run != rn || !in_range(x, run, lo, hi))
                    continue;
                double share = fmax(0, fmin(x->finished, b1) - fmax(x->started, b0)) /
                               (x->finished - x->started);
                int tk = 0;
                for (int i = 0; i < x->g; i++)
                    tk += x->tokens[i];
                comp += share * x->g, tok += share * tk, active += share > 0;
            }
            assert_int_equal((int64_t)get(&r, row, "run_id"), rn);
            assert_int_equal((int)get(&r, row, "bin"), b);
            NEAR(get(&r, row, "t_start_s"), b0 - t0);
            NEAR(get(&r, row, "t_end_s"), b1 - t0);
            assert_int_equal((int)get(&r, row, "groups"), active);
            NEAR(get(&r, row, "completions"), comp);
            NEAR(get(&r, row, "tokens"), tok);
            NEAR(get(&r, row, "completions_per_s"), comp / (b1 - b0));
            NEAR(get(&r, row, "tokens_per_s"), tok / (b1 - b0));
            sum_tok += get(&r, row, "tokens");
        }
        NEAR(sum_tok, tok_all); /* every token counted once over the bins */
    }
    assert_int_equal(r.n, row);
    result_free(&r);
}

static void
check_kl(int64_t run, int range, int64_t lo, int64_t hi)
{
    result r;
    query(&r, GRPO_STATS_BY_KL, run, range, lo, hi, 0);
    if (!range)
        lo = INT64_MIN, hi = INT64_MAX;
    int row = 0, skipped = 0;
    for (int64_t rn = run1; rn <= run2; rn++)
        for (int64_t st = 0; st < STEPS; st++) {
            int n = 0;
            double tok = 0, klw = 0, klmax = -INFINITY, lp = 0, ref = 0, gmax = 0;
            for (int g = 0; g < n_groups; g++) {
                rawgroup *x = &groups[g];
                if (x->run != rn || x->step != st || !in_range(x, run, lo, hi))
                    continue;
                skipped += x->no_ref;
                for (int i = 0; i < x->g && !x->no_ref; i++) {
                    n++, tok += x->tokens[i], klw += x->kl_mean[i] * x->tokens[i];
                    klmax = fmax(klmax, x->kl_max[i]), lp += x->lp_sum[i], ref += x->ref_sum[i];
                    gmax = fmax(gmax, fabs(x->lp_sum[i] - x->ref_sum[i]) / x->tokens[i]);
                }
            }
            if (n == 0)
                continue;
            assert_int_equal((int64_t)get(&r, row, "run_id"), rn);
            assert_int_equal((int64_t)get(&r, row, "step"), st);
            assert_int_equal((int)get(&r, row, "completions"), n);
            NEAR(get(&r, row, "kl_per_token"), klw / tok);
            NEAR(get(&r, row, "kl_max"), klmax);
            NEAR(get(&r, row, "logprob_per_token"), lp / tok);
            NEAR(get(&r, row, "ref_logprob_per_token"), ref / tok);
            NEAR(get(&r, row, "logprob_gap"), (lp - ref) / tok);
            NEAR(get(&r, row, "logprob_gap_max"), gmax);
            row++;
        }
    assert_int_equal(r.n, row);
    if (run <= 0 && !range)
        assert_int_equal(skipped, 1); /* run 2's step 1 has no reference: no row */
    result_free(&r);
}

/* The first completion's text as the store must show it cut to max bytes: U+FFFD for the invalid
 * byte, then as many whole two-byte characters as fit. */
static void
odd_text_cut(char *out, int max)
{
    out[0] = '\0';
    if (max < 3)
        return;
    strcpy(out, "\xef\xbf\xbd");
    if (max < 7)
        return;
    strcat(out, "<b>&");
    for (int i = 0; i < 400 && 7 + 2 * (i + 1) <= max; i++)
        strcat(out, "\xc3\xa9");
}

static void
check_examples(int64_t run, int per, int text_bytes)
{
    static const char *const verifiers[NV] = {"format", "math"};
    static const int kinds[] = {4, 1, 0, 2, 3}; /* by name */
    static const char *const kind_names[] = {"pass", "fail", "skip", "timeout", "error"};
    static const char *const names[] = {"", "eos", "stop", "length", "abort"};
    result r;
    grpo_stats_opts o = {GRPO_STATS_BY_EXAMPLE, run, 0, 0, 0, 0, 0, per, text_bytes};
    query_o(&r, &o);
    int want = per ? per : 3, max = text_bytes ? text_bytes : 600, row = 0, odd_seen = 0;
    for (int64_t rn = run1; rn <= run2; rn++)
        for (int v = 0; v < NV && (run <= 0 || rn == run); v++)
            for (int k = 0; k < 5; k++) {
                int j = v == 0 ? 1 : 0, kind = kinds[k], total = 0;
                for (int g = 0; g < n_groups; g++)
                    for (int i = 0; i < groups[g].g; i++)
                        total += groups[g].run == rn && groups[g].kind[i][j] == kind;
                /* the candidates in insertion (id) order, with their index within their prompt */
                int cg[STEPS * PROMPTS * MAXG], ci[STEPS * PROMPTS * MAXG],
                    cp[STEPS * PROMPTS * MAXG];
                int nc = 0;
                for (int g = 0; g < n_groups; g++)
                    for (int i = 0; i < groups[g].g; i++) {
                        if (groups[g].run != rn || groups[g].kind[i][j] != kind)
                            continue;
                        if (nc == 64 * want) /* chosen among the first 64 * want only */
                            break;
                        cg[nc] = g, ci[nc] = i, cp[nc] = 0;
                        for (int e = 0; e < nc; e++)
                            cp[nc] += groups[cg[e]].prompt == groups[g].prompt;
                        nc++;
                    }
                int rank = 0;
                for (int level = 0; rank < want && level < nc; level++)
                    for (int e = 0; e < nc && rank < want; e++) {
                        if (cp[e] != level)
                            continue;
                        const rawgroup *x = &groups[cg[e]];
                        int i = ci[e];
                        rank++;
                        assert_int_equal((int64_t)get(&r, row, "run_id"), rn);
                        assert_string_equal(get_s(&r, row, "verifier"), verifiers[v]);
                        assert_string_equal(get_s(&r, row, "kind"), kind_names[kind]);
                        assert_int_equal((int)get(&r, row, "verdicts"), total);
                        assert_int_equal((int)get(&r, row, "rank"), rank);
                        assert_int_equal((int64_t)get(&r, row, "step"), x->step);
                        assert_int_equal((int64_t)get(&r, row, "prompt_id"), x->prompt);
                        assert_int_equal((int)get(&r, row, "sample_index"), i);
                        NEAR(get(&r, row, "reward"), x->reward[i]);
                        assert_string_equal(get_s(&r, row, "finish_reason"), names[x->finish[i]]);
                        assert_int_equal((int)get(&r, row, "n_tokens"), x->tokens[i]);
                        int len = (int)strlen(x->text[i]);
                        assert_int_equal((int)get(&r, row, "text_bytes"), len);
                        char cut[1000];
                        if (cg[e] == 0 && i == 0) {
                            odd_text_cut(cut, max), odd_seen = 1;
                            assert_int_equal((int)get(&r, row, "text_cut"), 1);
                        } else { /* ASCII: cut at max exactly */
                            snprintf(cut, sizeof cut, "%.*s", max, x->text[i]);
                            assert_int_equal((int)get(&r, row, "text_cut"), len > max);
                        }
                        assert_string_equal(get_s(&r, row, "text"), cut);
                        row++;
                    }
            }
    assert_int_equal(r.n, row);
    assert_int_equal(odd_seen, run <= 0 || run == run1);
    result_free(&r);
}

/* Cell (row, col) as a number, NAN when null. */
static double
get_n(const result *r, int row, const char *col)
{
    cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(r->rows, row), col);
    if (v == NULL)
        fail_msg("row %d has no column %s", row, col);
    return cJSON_IsNull(v) ? NAN : get(r, row, col);
}

#define NEAR_N(a, b)                                                                               \
    do {                                                                                           \
        double got_ = (a), w_ = (b);                                                               \
        if (isnan(w_))                                                                             \
            assert_true(isnan(got_));                                                              \
        else                                                                                       \
            NEAR(got_, w_);                                                                        \
    } while (0)

/* The tools row of run rn and env key e (-1: '(all)') computed from the raw turns; 0 when the
 * key has no row (an env without a turn in the selection). */
static int
check_tools_row(const result *r, int row, int64_t rn, int e, int64_t lo, int64_t hi)
{
    enum { N = (STEPS * PROMPTS + 8) * MAXG * MAXT };
    static double tool[N], wait[N];
    int comp = 0, with = 0, turns = 0, calls = 0, labels[4] = {0}, n_with = 0, n_without = 0;
    double obs = 0, r_with = 0, r_without = 0;
    for (int g = 0; g < n_groups; g++) {
        const rawgroup *x = &groups[g];
        if (x->run != rn || x->step < lo || x->step > hi)
            continue;
        for (int i = 0; i < x->g; i++) {
            int mine = 0;
            for (int k = 0; k < x->nt[i]; k++) {
                if (e >= 0 && x->env[i][k] != e)
                    continue;
                mine = 1;
                wait[turns++] = x->wait_ms[i][k];
                labels[x->env[i][k] == ENV_BAD ? 3 : x->label[i][k]]++; /* 'unknown': other */
                if (x->ran[i][k])
                    tool[calls++] = x->tool_ms[i][k], obs += x->n_obs[i][k];
            }
            comp++, with += mine;
            if (mine)
                r_with += x->reward[i], n_with++;
            else
                r_without += x->reward[i], n_without++;
        }
    }
    if (comp == 0 || (e >= 0 && turns == 0))
        return 0;
    assert_true(row < r->n);
    assert_int_equal((int64_t)get(r, row, "run_id"), rn);
    assert_string_equal(get_s(r, row, "env"), e < 0 ? "(all)" : env_names[e]);
    assert_int_equal((int)get(r, row, "completions"), comp);
    NEAR(get(r, row, "samples_with_tools"), (double)with / comp);
    assert_int_equal((int)get(r, row, "turns"), turns);
    assert_int_equal((int)get(r, row, "calls"), calls);
    NEAR(get(r, row, "calls_per_sample"), (double)calls / comp);
    NEAR_N(get_n(r, row, "tool_ms_p50"), calls ? pctl(tool, calls, 50) : NAN);
    NEAR_N(get_n(r, row, "tool_ms_p99"), calls ? pctl(tool, calls, 99) : NAN);
    NEAR_N(get_n(r, row, "wait_ms_p50"), turns ? pctl(wait, turns, 50) : NAN);
    NEAR_N(get_n(r, row, "wait_ms_p99"), turns ? pctl(wait, turns, 99) : NAN);
    NEAR_N(get_n(r, row, "obs_tokens"), calls ? obs / calls : NAN);
    static const char *const cols[4] = {"n_ok", "n_error", "n_timeout", "n_other"};
    for (int l = 0; l < 4; l++)
        assert_int_equal((int)get(r, row, cols[l]), labels[l]);
    NEAR_N(get_n(r, row, "reward_with_tools"), n_with ? r_with / n_with : NAN);
    NEAR_N(get_n(r, row, "reward_without_tools"), n_without ? r_without / n_without : NAN);
    return 1;
}

static void
check_tools(int64_t run, int range, int64_t lo, int64_t hi)
{
    /* '(all)' first, then the envs by name: "(unknown)" < "python" < "search" */
    static const int order[] = {-1, ENV_BAD, ENV_PY, ENV_SEARCH};
    result r;
    query(&r, GRPO_STATS_BY_TOOLS, run, range, lo, hi, 0);
    if (!range)
        lo = INT64_MIN, hi = INT64_MAX;
    int row = 0;
    for (int64_t rn = run1; rn <= run2; rn++)
        for (int k = 0; k < 4 && (run <= 0 || rn == run); k++)
            row += check_tools_row(&r, row, rn, order[k], lo, hi);
    assert_int_equal(r.n, row);
    assert_true(row >= 3);
    result_free(&r);
}

static void
test_by_tools(void **state)
{
    (void)state;
    int kinds[3] = {0}, bad = 0;
    for (int g = 0; g < n_groups; g++) /* the data has every case the query tells apart */
        for (int i = 0; i < groups[g].g; i++)
            for (int k = 0; k < groups[g].nt[i]; k++)
                kinds[groups[g].env[i][k]]++, bad += groups[g].label[i][k] == 3;
    assert_true(kinds[0] > 0 && kinds[1] > 0 && kinds[2] > 0 && bad > 0);
    check_tools(0, 0, 0, 0);
    check_tools(run1, 1, 2, 4);
    check_tools(run2, 0, 0, 0);
    check_tools(0, 1, 5, 5);
}

static void
test_by_finish(void **state)
{
    (void)state;
    check_finish(0, 0, 0, 0);
    check_finish(run1, 1, 2, 4);
    check_finish(run2, 0, 0, 0);
}

static void
test_histograms(void **state)
{
    (void)state;
    for (int length = 0; length < 2; length++) {
        check_hist(length, 0, 0, 0, 0, 0);
        check_hist(length, run1, 1, 1, 3, 7);
        check_hist(length, 0, 1, 2, 2, 3);
        check_hist(length, run2, 0, 0, 0, 1000);
    }
}

static void
test_by_time(void **state)
{
    (void)state;
    check_time(0, 0, 0, 0, 0);
    check_time(run1, 1, 2, 3, 5);
    check_time(run2, 0, 0, 0, 1);
}

static void
test_by_kl(void **state)
{
    (void)state;
    check_kl(0, 0, 0, 0);
    check_kl(run2, 0, 0, 0);
    check_kl(run1, 1, 3, 5);
}

static void
test_examples(void **state)
{
    (void)state;
    check_examples(0, 0, 0);
    check_examples(run1, 1, 8);
    check_examples(0, 5, 2);
    check_examples(run2, 2, 10);
}

/* One group whose completions are all alike and took no time, and a run with nothing: every
 * report query gives one bin (zero width) or no rows, never a division by zero. */
static void
test_degenerate(void **state)
{
    (void)state;
    char saved[300], one[300];
    snprintf(saved, sizeof saved, "%s", dbpath);
    snprintf(one, sizeof one, "%s/one.db", dir);
    grpo_store *s = NULL;
    grpo_store_opts so = {0};
    assert_int_equal(grpo_store_open(&s, one, &so), GRPO_OK);
    int64_t run, empty, prompt;
    assert_int_equal(grpo_store_run_begin(&run, s, NULL), GRPO_OK);
    assert_int_equal(grpo_store_run_begin(&empty, s, NULL), GRPO_OK);
    grpo_prompt_rec pr = {"one", 0, "p", NULL, NULL, NULL};
    assert_int_equal(grpo_store_put_prompt(&prompt, s, &pr), GRPO_OK);
    uint64_t rng = 99;
    tu_group t;
    tu_group_make(&t, &rng, run, 0, prompt, 1, 3, MAXTOK, 1);
    t.g.finished_at = t.g.started_at;
    for (int i = 0; i < 3; i++) {
        t.c[i].n_tokens = 5, t.c[i].finish_reason = GRPO_FINISH_EOS, t.c[i].no_ref = 1;
        t.r[i].kind = 1, t.r[i].score = 0;
    }
    assert_int_equal(grpo_store_put_group(s, &t.g), GRPO_OK);
    tu_group_free(&t);
    assert_int_equal(grpo_store_close(s), GRPO_OK);
    snprintf(dbpath, sizeof dbpath, "%s", one);
    result r;
    for (int length = 0; length < 2; length++) {
        query(&r, length ? GRPO_STATS_BY_LENGTH_HIST : GRPO_STATS_BY_REWARD_HIST, 0, 0, 0, 0, 0);
        assert_int_equal(r.n, 1);
        NEAR(get(&r, 0, "lo"), length ? 5 : 0);
        NEAR(get(&r, 0, "hi"), length ? 5 : 0);
        assert_int_equal((int)get(&r, 0, "n"), 3);
        NEAR(get(&r, 0, "frac"), 1);
        result_free(&r);
    }
    query(&r, GRPO_STATS_BY_TIME, 0, 0, 0, 0, 0);
    assert_int_equal(r.n, 1);
    NEAR(get(&r, 0, "t_end_s"), 0);
    NEAR(get(&r, 0, "completions"), 3);
    NEAR(get(&r, 0, "tokens"), 15);
    cJSON *o = cJSON_GetArrayItem(r.rows, 0);
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(o, "tokens_per_s")));
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(o, "completions_per_s")));
    result_free(&r);
    query(&r, GRPO_STATS_BY_KL, 0, 0, 0, 0, 0);
    assert_int_equal(r.n, 0); /* no reference policy */
    result_free(&r);
    query(&r, GRPO_STATS_BY_TOOLS, run, 0, 0, 0, 0); /* no turns: the run's '(all)' row */
    assert_int_equal(r.n, 1);
    assert_string_equal(get_s(&r, 0, "env"), "(all)");
    assert_int_equal((int)get(&r, 0, "completions"), 3);
    NEAR(get(&r, 0, "samples_with_tools"), 0);
    assert_int_equal((int)get(&r, 0, "calls"), 0);
    assert_true(isnan(get_n(&r, 0, "tool_ms_p50")) && isnan(get_n(&r, 0, "reward_with_tools")));
    NEAR(get(&r, 0, "reward_without_tools"), 0);
    result_free(&r);
    for (int by = GRPO_STATS_BY_FINISH; by <= GRPO_STATS_BY_TOOLS; by++) {
        query(&r, (grpo_stats_by)by, empty, 0, 0, 0, 0);
        assert_int_equal(r.n, 0);
        result_free(&r);
    }
    snprintf(dbpath, sizeof dbpath, "%s", saved);
}

static void
test_by_run(void **state)
{
    (void)state;
    check_runs(0, 0, 0, 0);
    check_runs(run2, 0, 0, 0);
    check_runs(0, 1, 1, 2);
}

static void
test_by_step(void **state)
{
    (void)state;
    check_steps(0, 0, 0, 0);
    check_steps(run1, 1, 2, 4);
    check_steps(0, 1, 1, 1);
    check_steps(run2, 0, 0, 0);
}

static void
test_by_verifier(void **state)
{
    (void)state;
    check_verifiers(0, 0, 0, 0);
    check_verifiers(run1, 1, 2, 4);
    check_verifiers(0, 1, 5, 9);
}

static void
test_by_prompt(void **state)
{
    (void)state;
    check_prompts(0, 0, 0, 0, 8);
    check_prompts(0, 0, 0, 0, 1);
    check_prompts(run1, 1, 0, 3, 4);
    check_prompts(0, 1, 3, 3, 2);
}

static void
test_by_worker(void **state)
{
    (void)state;
    check_workers();
}

static void
test_pass_at_k_function(void **state)
{
    (void)state;
    for (int n = 1; n <= 40; n++)
        for (int c = 0; c <= n; c++)
            for (int k = 1; k <= n; k++)
                NEAR(grpo_pass_at_k(n, c, k), 1 - binom(n - c, k) / binom(n, k));
    assert_true(isnan(grpo_pass_at_k(4, 1, 5)));
    assert_true(isnan(grpo_pass_at_k(0, 0, 1)));
}

#ifdef STORE_TEST_CLI
static int count(const char *hay, const char *needle);

/* A report's axis tick labels carry no exponent (the -5.55e-17 of a float-noise range). */
static void
assert_plain_ticks(const char *html)
{
    for (const char *p = html; (p = strstr(p, "class=\"tick\"")) != NULL; p++) {
        const char *v = strchr(p, '>'), *e = v ? strchr(v, '<') : NULL;
        assert_non_null(e);
        for (const char *q = v + 1; q < e; q++)
            if (*q == 'e')
                fail_msg("tick label %.*s", (int)(e - v - 1), v + 1);
    }
}

static char *
read_report(const char *db, const char *path)
{
    char args[1024], *out = NULL;
    snprintf(args, sizeof args, "stats --db '%s' --report '%s'", db, path);
    assert_int_equal(run_grpo(&out, args), 0);
    free(out);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char *html = calloc(1, 1 << 20);
    size_t n = fread(html, 1, (1 << 20) - 1, f);
    fclose(f);
    assert_true(n > 1000);
    return html;
}

/* The one-group store of test_degenerate: histograms with one bar, no throughput (the group took
 * no time) and no KL said in words, no exponent tick anywhere. */
static void
test_cli_report_degenerate(void **state)
{
    (void)state;
    char one[300], path[320];
    snprintf(one, sizeof one, "%s/one.db", dir);
    snprintf(path, sizeof path, "%s/one.html", dir);
    char *html = read_report(one, path);
    assert_int_equal(count(html, "<svg class=\"hist\""), 2);
    assert_int_equal(count(html, "<rect class=\"hbar\""), 2);
    assert_int_equal(count(html, "<svg class=\"chart\""), 3); /* the step charts */
    /* tokens/s and completions/s: no data; KL: no reference policy */
    assert_int_equal(count(html, "class=\"nodata\""), 3);
    assert_non_null(strstr(html, "no completion in the selection was sampled with a reference"));
    assert_plain_ticks(html);
    free(html);
}

/* The tick labels of the first chart are distinct. */
static void
assert_distinct_ticks(const char *html)
{
    char ticks[64][32];
    int n = 0;
    const char *end = strstr(html, "</figure>");
    for (const char *p = html; (p = strstr(p, "class=\"tick\"")) != NULL && p < end; p++) {
        const char *v = strchr(p, '>') + 1, *e = strchr(v, '<');
        assert_true(n < 64 && e - v < 32);
        snprintf(ticks[n], sizeof ticks[n], "%.*s", (int)(e - v), v);
        for (int k = 0; k < n; k++)
            if (strcmp(ticks[k], ticks[n]) == 0 && strchr(ticks[n], '.') != NULL)
                fail_msg("repeated tick label %s", ticks[n]);
        n++;
    }
    assert_true(n >= 4);
}

/* Two steps whose reward means differ by float noise (0.1 + 0.2 against 0.3): the reward axis is
 * padded around 0.3, not cut into 1e-17 steps (which printed 0.3 six times). */
static void
test_cli_report_float_noise(void **state)
{
    (void)state;
    char db[300], path[320];
    snprintf(db, sizeof db, "%s/noise.db", dir);
    snprintf(path, sizeof path, "%s/noise.html", dir);
    grpo_store *s = NULL;
    grpo_store_opts so = {0};
    assert_int_equal(grpo_store_open(&s, db, &so), GRPO_OK);
    int64_t run, prompt;
    assert_int_equal(grpo_store_run_begin(&run, s, NULL), GRPO_OK);
    grpo_prompt_rec pr = {"noise", 0, "p", NULL, NULL, NULL};
    assert_int_equal(grpo_store_put_prompt(&prompt, s, &pr), GRPO_OK);
    uint64_t rng = 7;
    for (int step = 0; step < 2; step++) {
        tu_group t;
        tu_group_make(&t, &rng, run, step, prompt, 1, 1, MAXTOK, 2 - step);
        t.r[0].kind = 0, t.r[0].score = step ? 0.3 : 0.1;
        if (step == 0)
            t.r[1].kind = 0, t.r[1].score = 0.2;
        assert_int_equal(grpo_store_put_group(s, &t.g), GRPO_OK);
        tu_group_free(&t);
    }
    assert_int_equal(grpo_store_close(s), GRPO_OK);
    assert_true(0.1 + 0.2 != 0.3);
    char *html = read_report(db, path);
    assert_plain_ticks(html);
    assert_distinct_ticks(strstr(html, "Reward mean against step"));
    free(html);
}

static int
count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

static void
test_cli_formats_and_errors(void **state)
{
    (void)state;
    char args[1024], *out = NULL;
    /* CSV: a header and one line per step row, values as the json ones. */
    snprintf(args, sizeof args, "stats --db '%s' --format csv --run %lld", dbpath, (long long)run1);
    assert_int_equal(run_grpo(&out, args), 0);
    assert_int_equal(strncmp(out, "run_id,step,groups,completions,reward_mean,", 43), 0);
    assert_int_equal(count(out, "\n"), 1 + STEPS);
    free(out);
    /* Table: aligned text with the same header. */
    snprintf(args, sizeof args, "stats --db '%s' --by verifier", dbpath);
    assert_int_equal(run_grpo(&out, args), 0);
    assert_non_null(strstr(out, "latency_p99_ms"));
    assert_int_equal(count(out, "\n"), 1 + 2 * 2);
    free(out);
    /* Usage errors exit 2; runtime errors exit 1 with the file named. */
    snprintf(args, sizeof args, "stats --db '%s' --by nothing", dbpath);
    assert_int_equal(run_grpo(&out, args), 2);
    free(out);
    assert_int_equal(run_grpo(&out, "stats"), 2);
    free(out);
    snprintf(args, sizeof args, "stats --db '%s' --step-range 5:2", dbpath);
    assert_int_equal(run_grpo(&out, args), 2);
    free(out);
    snprintf(args, sizeof args, "stats --db '%s/missing.db'", dir);
    assert_int_equal(run_grpo(&out, args), 1);
    free(out);
    char errpath[300], line[512] = "";
    snprintf(errpath, sizeof errpath, "%s/stderr.txt", dir);
    FILE *f = fopen(errpath, "r");
    assert_non_null(f);
    assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    assert_non_null(strstr(line, "missing.db"));
    assert_int_equal(run_grpo(&out, "stats --help"), 0);
    assert_non_null(strstr(out, "--step-range"));
    assert_non_null(strstr(out, "--report"));
    assert_non_null(strstr(out, "example or tools"));
    free(out);
}

static void
test_cli_report(void **state)
{
    (void)state;
    char args[1024], path[320], *out = NULL, *html = NULL;
    snprintf(path, sizeof path, "%s/run.html", dir);
    snprintf(args, sizeof args, "stats --db '%s' --report '%s'", dbpath, path);
    assert_int_equal(run_grpo(&out, args), 0);
    free(out);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    html = calloc(1, 1 << 20);
    size_t n = fread(html, 1, (1 << 20) - 1, f);
    fclose(f);
    assert_true(n > 1000);
    /* One self-contained file: three inline charts, nothing fetched from elsewhere. */
    assert_int_equal(strncmp(html, "<!DOCTYPE html>", 15), 0);
    /* Line charts: three against step, tokens/s and completions/s over time, KL against step;
     * reward and length histograms; bars per finish reason, prompt, verifier and (a pool: worker
     * w-odd) worker. */
    assert_int_equal(count(html, "<svg "), 12);
    assert_int_equal(count(html, "<svg class=\"chart\""), 6);
    assert_int_equal(count(html, "<svg class=\"hist\""), 2);
    assert_int_equal(count(html, "<svg class=\"bars\""), 4);
    assert_int_equal(count(html, "class=\"nodata\""), 0);
    assert_int_equal(count(html, "src="), 0);
    assert_int_equal(count(html, "href="), 0);
    assert_int_equal(count(html, "<script"), 0);
    /* Each series is one polyline per run: reward (1) + length (3) + fractions (3), 2 runs; the
     * two throughput series, 2 runs; KL (3 series), both runs have steps with a reference. */
    assert_int_equal(count(html, "<polyline"), 7 * 2 + 2 * 2 + 3 * 2);
    /* a mark per time bin (20) and run in each throughput chart */
    char *tp = strstr(html, "Generated tokens per second over the run");
    assert_non_null(tp);
    char *tp_end = strstr(tp, "</figure>");
    *tp_end = '\0';
    assert_int_equal(count(tp, "<circle class=\"pt\""), 20 * 2);
    *tp_end = '<';
    assert_true(grpo__utf8_valid(html, n));
    /* the first completion's text, escaped, its invalid byte replaced, cut with a marker */
    assert_non_null(strstr(html, "<pre>\xef\xbf\xbd&lt;b&gt;&amp;\xc3\xa9"));
    assert_null(strstr(html, "<b>&"));
    assert_non_null(strstr(html, "cut here: the first 599 bytes of 805 shown"));
    assert_non_null(strstr(html, "<h2>Example completions per verdict</h2>"));
    assert_non_null(strstr(html, "<h3>run 1: math, timeout ("));
    assert_plain_ticks(html);
    assert_non_null(strstr(html, "Reward mean against step"));
    assert_non_null(strstr(html, "Completion length"));
    /* The runs table (header + 2 runs), ..., the per-step table with a row per (run, step). */
    char *steps = strstr(html, "<h2>Per step</h2>"), *charts = strstr(html, "<figure>");
    assert_non_null(steps);
    assert_non_null(charts);
    assert_non_null(strstr(html, "<h2>Per prompt: solve rate and pass@k</h2>"));
    assert_non_null(strstr(html, "<h2>Per verifier: pass rate and latency (ms)</h2>"));
    assert_int_equal(count(steps, "<tr>"), 1 + STEPS + 3);
    *charts = '\0';
    assert_int_equal(count(html, "<tr>"), 1 + 2);
    assert_non_null(strstr(html, "<th>repo_commit</th>"));
    free(html);
}
#endif

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_by_step),
        cmocka_unit_test(test_by_verifier),
        cmocka_unit_test(test_by_prompt),
        cmocka_unit_test(test_by_worker),
        cmocka_unit_test(test_by_run),
        cmocka_unit_test(test_pass_at_k_function),
        cmocka_unit_test(test_by_finish),
        cmocka_unit_test(test_histograms),
        cmocka_unit_test(test_by_time),
        cmocka_unit_test(test_by_kl),
        cmocka_unit_test(test_examples),
        cmocka_unit_test(test_by_tools),
        cmocka_unit_test(test_degenerate),
#ifdef STORE_TEST_CLI
        cmocka_unit_test(test_cli_formats_and_errors),
        cmocka_unit_test(test_cli_report),
        cmocka_unit_test(test_cli_report_degenerate),
        cmocka_unit_test(test_cli_report_float_noise),
#endif
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
