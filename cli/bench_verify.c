/* `grpo bench verify`: math checks per second and per-check latency of the math verifier on the
 * 2,000 R1-style pairs, against math-verify (Python) on the same pairs in the same run. */
#include "cli/cli.h"

#include "common/json.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const USAGE =
    "usage: grpo bench verify [--pairs FILE] [--repeat R] [--jobs N] [--py-limit N] [--no-python]\n"
    "\n"
    "Grades the (gold, completion) pairs with the built-in math verifier and with math-verify\n"
    "(python3 tools/bench_math_verify.py) and prints checks/s, p50/p99 latency per check,\n"
    "agreement and the speedup.\n"
    "\n"
    "  --pairs FILE   JSONL with \"gold\", \"completion\", \"mv\" (default:\n"
    "                 tests/data/math/r1_pairs.jsonl in the source tree)\n"
    "  --repeat R     passes over the pairs for the C timing (default 5)\n"
    "  --jobs N       also measure throughput with N threads (default: the number of CPUs)\n"
    "  --py-limit N   time math-verify on the first N pairs only (default: all)\n"
    "  --no-python    skip math-verify\n";

typedef struct pair {
    char *gold, *comp;
    int mv;
} pair;

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static pair *
load_pairs(const char *path, size_t *n_out)
{
    char *text = NULL;
    size_t len = 0, n = 0, cap = 256;
    if (grpo__read_file(path, (size_t)1 << 30, &text, &len) != GRPO_OK)
        return NULL;
    pair *v = malloc(cap * sizeof *v);
    for (char *line = strtok(text, "\n"); v && line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *g = cJSON_GetObjectItem(o, "gold"), *c = cJSON_GetObjectItem(o, "completion");
        if (cJSON_IsString(g) && cJSON_IsString(c)) {
            if (n == cap) {
                pair *nv = realloc(v, 2 * cap * sizeof *v);
                if (nv == NULL)
                    break;
                v = nv;
                cap *= 2;
            }
            v[n].gold = strdup(g->valuestring);
            v[n].comp = strdup(c->valuestring);
            const cJSON *mv = cJSON_GetObjectItem(o, "mv");
            v[n].mv = cJSON_IsTrue(mv) || (cJSON_IsNumber(mv) && mv->valueint == 1);
            n++;
        }
        cJSON_Delete(o);
    }
    free(text);
    *n_out = n;
    return v;
}

typedef struct tp {
    const grpo_verifier_api *api;
    void *state;
    const pair *p;
    size_t n;
    atomic_size_t next;
    size_t total;
} tp;

static int
score_one(const grpo_verifier_api *api, void *state, const pair *p)
{
    grpo_verifier_sample s = {0};
    s.task = "math";
    s.completion = p->comp;
    s.completion_len = strlen(p->comp);
    s.answer = p->gold;
    grpo_verdict v;
    if (api->score(state, &s, &v) != 0)
        return -1;
    free(v.details_json);
    return v.kind == GRPO_VERDICT_PASS;
}

static void *
tp_worker(void *arg)
{
    tp *t = arg;
    for (;;) {
        size_t i = atomic_fetch_add(&t->next, 1);
        if (i >= t->total)
            return NULL;
        score_one(t->api, t->state, &t->p[i % t->n]);
    }
}

/* Runs tools/bench_math_verify.py; fills the numbers from its JSON line. */
static int
run_python(const char *pairs, long limit, double *cps, double *p50, double *p99, long *n)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "python3 '%s/tools/bench_math_verify.py' --pairs '%s' --limit %ld",
             GRPO_SOURCE_DIR, pairs, limit);
    FILE *f = popen(cmd, "r");
    if (f == NULL)
        return -1;
    char line[1024] = "";
    char *got = fgets(line, sizeof line, f);
    int st = pclose(f);
    cJSON *o = got ? cJSON_Parse(line) : NULL;
    if (st != 0 || o == NULL) {
        cJSON_Delete(o);
        return -1;
    }
    *cps = cJSON_GetObjectItem(o, "checks_per_s")->valuedouble;
    *p50 = cJSON_GetObjectItem(o, "p50_ms")->valuedouble;
    *p99 = cJSON_GetObjectItem(o, "p99_ms")->valuedouble;
    *n = (long)cJSON_GetObjectItem(o, "n")->valuedouble;
    cJSON_Delete(o);
    return 0;
}

typedef struct bv_args {
    char def_pairs[1024];
    const char *pairs_path;
    long repeat, jobs, py_limit;
    int python;
} bv_args;

/* Returns 0, or CLI_USAGE (printed). */
static int
parse_args(bv_args *a, int argc, char **argv)
{
    snprintf(a->def_pairs, sizeof a->def_pairs, "%s/tests/data/math/r1_pairs.jsonl",
             GRPO_SOURCE_DIR);
    a->pairs_path = a->def_pairs;
    a->repeat = 5, a->jobs = grpo_cpu_count(), a->py_limit = 0, a->python = 1;
    for (int i = 1; i < argc; i++) {
        char *end = NULL;
        if (strcmp(argv[i], "--no-python") == 0) {
            a->python = 0;
            continue;
        }
        if (i + 1 >= argc)
            return cli_usage("bench verify", "%s needs a value or is unknown", argv[i]);
        const char *f = argv[i], *v = argv[++i];
        if (strcmp(f, "--pairs") == 0)
            a->pairs_path = v;
        else if (strcmp(f, "--repeat") == 0 && (a->repeat = strtol(v, &end, 10), !*end) &&
                 a->repeat >= 1 && a->repeat <= 1000)
            ;
        else if (strcmp(f, "--jobs") == 0 && (a->jobs = strtol(v, &end, 10), !*end) &&
                 a->jobs >= 1 && a->jobs <= 1024)
            ;
        else if (strcmp(f, "--py-limit") == 0 && (a->py_limit = strtol(v, &end, 10), !*end) &&
                 a->py_limit >= 0)
            ;
        else
            return cli_usage("bench verify", "bad option %s %s", f, v);
    }
    return 0;
}

typedef struct bv_result {
    double cps, p50, p99, par_cps;
    long agree;
} bv_result;

/* One thread, each pair scored `repeat` times: checks/s and per-check latency (lat: n * repeat
 * slots), and agreement with math-verify on the first round; then `jobs` threads: checks/s. */
static void
measure(const grpo_verifier_api *api, void *state, const pair *p, size_t n, const bv_args *a,
        double *lat, bv_result *res)
{
    size_t nl = n * (size_t)a->repeat;
    res->agree = 0;
    double t0 = grpo_now();
    for (long r = 0; r < a->repeat; r++)
        for (size_t i = 0; i < n; i++) {
            double s = grpo_now();
            int ok = score_one(api, state, &p[i]);
            lat[r * n + i] = (grpo_now() - s) * 1000.0;
            if (r == 0)
                res->agree += ok == p[i].mv;
        }
    double total = grpo_now() - t0;
    qsort(lat, nl, sizeof *lat, cmp_double);
    res->cps = nl / total, res->p50 = lat[nl / 2], res->p99 = lat[(nl * 99) / 100];
    tp t = {api, state, p, n, 0, nl};
    atomic_init(&t.next, 0);
    pthread_t th[1024];
    double t1 = grpo_now();
    for (long k = 0; k < a->jobs; k++)
        pthread_create(&th[k], NULL, tp_worker, &t);
    for (long k = 0; k < a->jobs; k++)
        pthread_join(th[k], NULL);
    res->par_cps = nl / (grpo_now() - t1);
}

/* math-verify on the same pairs (tools/bench_math_verify.py), as the table's last row. */
static int
python_peer(const bv_args *a, const bv_result *res)
{
    double py_cps = 0, py_p50 = 0, py_p99 = 0;
    long py_n = 0;
    fflush(stdout);
    if (run_python(a->pairs_path, a->py_limit, &py_cps, &py_p50, &py_p99, &py_n) != 0) {
        fprintf(stderr, "grpo bench verify: python3 tools/bench_math_verify.py failed "
                        "(is math-verify installed?)\n");
        return CLI_FAIL;
    }
    printf("| math-verify 0.9 (python, %ld pairs) | %.1f | %.3f | %.3f | |\n", py_n, py_cps, py_p50,
           py_p99);
    printf("\nspeedup (1 thread vs math-verify): %.0fx; p50 latency ratio %.0fx\n",
           py_cps > 0 ? res->cps / py_cps : 0.0, res->p50 > 0 ? py_p50 / res->p50 : 0.0);
    return CLI_OK;
}

int
grpo_bench_verify(int argc, char **argv)
{
    bv_args a;
    if (cli_wants_help(argc, argv)) {
        fputs(USAGE, stdout);
        return CLI_OK;
    }
    int rc = parse_args(&a, argc, argv);
    if (rc != 0)
        return rc;
    size_t n = 0;
    pair *p = load_pairs(a.pairs_path, &n);
    const grpo_verifier_api *api = grpo_verifier_math();
    void *state = NULL;
    char *e = NULL;
    double *lat = NULL;
    rc = CLI_FAIL;
    if (p == NULL || n == 0) {
        fprintf(stderr, "grpo bench verify: %s: no pairs (%s)\n", a.pairs_path, grpo_error_last());
    } else if (api->init(NULL, &state, &e) != 0) {
        fprintf(stderr, "grpo bench verify: math init: %s\n", e ? e : "?");
        free(e);
        state = NULL;
    } else if ((lat = malloc(n * (size_t)a.repeat * sizeof *lat)) == NULL) {
        fprintf(stderr, "grpo bench verify: out of memory\n");
    } else {
        bv_result res;
        measure(api, state, p, n, &a, lat, &res);
        printf("math verifier on %zu R1-style pairs (%s)\n\n", n, a.pairs_path);
        printf("| grader | checks/s | p50 ms/check | p99 ms/check | agreement with math-verify "
               "|\n");
        printf("|---|---|---|---|---|\n");
        printf("| grpo math (1 thread) | %.0f | %.3f | %.3f | %.1f%% (%ld/%zu) |\n", res.cps,
               res.p50, res.p99, 100.0 * res.agree / n, res.agree, n);
        printf("| grpo math (%ld threads) | %.0f | | | |\n", a.jobs, res.par_cps);
        rc = a.python ? python_peer(&a, &res) : CLI_OK;
    }
    if (state)
        api->fini(state);
    for (size_t i = 0; p && i < n; i++) {
        free(p[i].gold);
        free(p[i].comp);
    }
    free(p);
    free(lat);
    return rc;
}
