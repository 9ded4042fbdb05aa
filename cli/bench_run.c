/* `grpo bench run`: what verification costs a whole rollout. The run goes through the run
 * library (grpo_run_open, grpo_run_execute) twice per round, in alternating order: (A) with its
 * verifiers, on verifier threads beside generation, and (B) the same run with every verifier
 * answered at once with A's verdicts (grpo_run_opts.score), so that the completions, rewards,
 * advantages and records are the same and only the cost of verifying differs. With --tools, A
 * runs the tools and B answers each call at once with A's observation (cli/bench_tools.c);
 * --instant says which of the two B answers at once. */
#include "cli/bench_tools.h"
#include "cli/cli.h"
#include "cli/run_common.h"
#include "common/common_int.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CMD "bench run"
#define MAX_ROUNDS 100

static void
usage(FILE *f)
{
    fputs("usage: grpo bench run [options]\n\n"
          "Runs one rollout through the run library twice per round, the order alternating:\n"
          "  A  with its verifiers (the reward config's math, code and format checks) on\n"
          "     verifier threads beside generation, as `grpo rollout` runs;\n"
          "  B  the same run with every verifier answered at once with the verdicts A gave\n"
          "     (same completions, rewards, advantages and records; no verification cost).\n"
          "Prints per round the wall times (from the first engine step to the run's end),\n"
          "A / B, the time until the last group was generated, the score steps' wall time\n"
          "(summed over groups), this process's CPU time in A and in B, the CPU time of the\n"
          "sandboxed processes in A, completions/s, the load average, and whether A and B\n"
          "wrote the same run (the --out lines of A and B equal, and A's verdicts equal the\n"
          "first round's);\n"
          "then A / B as median and range over the rounds.\n\n"
          "The default prompts, bench/run_prompts.jsonl, mix the demo's math prompts with code\n"
          "tasks the demo policy answers with a Python function: each of those completions'\n"
          "code check runs the program the policy wrote against the task's 16 tests in the\n"
          "sandbox's Python pool (tools/demo_model/bench_prompts.py writes the file).\n\n"
          "  --model DIR          model directory (default: the bundled models/demo)\n"
          "  --prompts FILE       prompts JSONL (default: bench/run_prompts.jsonl)\n"
          "  --rounds R           rounds of A and B (default 3)\n",
          f);
    cli_gen_help_sampling(f);
    fputs("  --seed S             run seed (default 0)\n"
          "  --threads N          forward threads (default: all CPUs)\n"
          "  --verify-threads N   verifier threads (default 2)\n"
          "  --max-pending-groups N  admission pauses while N finished groups wait for the\n"
          "                       verifiers (default 8)\n"
          "  --reward-config FILE reward composition (default: math = math + 0.2 format,\n"
          "                       code = code + 0.2 format)\n"
          "  --tools LIST         A calls these tools (as grpo rollout --tools); B answers each\n"
          "                       call at once with the observation A's tool gave, where A's\n"
          "                       sample made it (same completions: only the tools' cost\n"
          "                       differs). Per round also: tokens/s of A and B and the\n"
          "                       engine steps that waited for a tool\n"
          "  --instant WHAT       what B answers at once: verify (default without --tools),\n"
          "                       tools (default with --tools; B runs the verifiers) or both\n"
          "  --keep DIR           write the runs' stores and --out files to DIR and keep them\n"
          "                       (default: a temporary folder, removed at the end)\n"
          "  --help               this text\n\n"
          "The timing never decides the exit status: 0 when every run finished and A and B\n"
          "wrote the same run, 1 otherwise, 2 on usage errors.\n",
          f);
}

/* ---- the verdicts of A, by (prompt, sample) ---------------------------------------------------
 */

typedef struct table {
    size_t n_items;
    int32_t G;
    grpo_reward_result *res; /* (n_items, G) */
    uint8_t *have;
    pthread_mutex_t mu;
    size_t mismatches; /* verdicts of a later A that differ from the first A's */
    double verify_s;   /* this run's score steps (g->verify_ms), summed over groups */
    grpo_run *run;     /* the run being executed */
    bench_tools *tools; /* with --tools: A's calls */
    int instant_verify, instant_tools;
} table;

static grpo_err
copy_result(grpo_reward_result *dst, const grpo_reward_result *src)
{
    *dst = *src;
    for (int32_t t = 0; t < src->n_terms; t++) {
        dst->terms[t].details_json = NULL;
        if (src->terms[t].details_json &&
            (dst->terms[t].details_json = strdup(src->terms[t].details_json)) == NULL) {
            grpo_reward_result_fini(dst);
            return grpo__fail(GRPO_ENOMEM, "bench run: out of memory");
        }
    }
    return GRPO_OK;
}

static int
same_str(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a && b && strcmp(a, b) == 0);
}

/* The verdicts agree (everything but the timings). */
static int
same_result(const grpo_reward_result *a, const grpo_reward_result *b)
{
    if (a->reward != b->reward || a->overlong != b->overlong || a->skipped != b->skipped ||
        a->n_terms != b->n_terms)
        return 0;
    for (int32_t t = 0; t < a->n_terms; t++) {
        const grpo_reward_term *x = &a->terms[t], *y = &b->terms[t];
        if (strcmp(x->verifier, y->verifier) != 0 || strcmp(x->label, y->label) != 0 ||
            x->kind != y->kind || x->score != y->score || x->weight != y->weight ||
            !same_str(x->details_json, y->details_json))
            return 0;
    }
    return 1;
}

static grpo_run_sample *
slot_check(table *t, const grpo_run_group *g, int32_t i, size_t *slot)
{
    grpo_run_sample *s = &g->samples[i];
    if (g->item < 0 || (size_t)g->item >= t->n_items || s->index < 0 || s->index >= t->G) {
        grpo__fail(GRPO_ESTATE, "bench run: prompt %lld sample %d is outside the table",
                   (long long)g->item, s->index);
        return NULL;
    }
    *slot = (size_t)g->item * (size_t)t->G + (size_t)s->index;
    return s;
}

/* A: the run's own score step, timed; the first A's verdicts kept, a later A's compared with
 * them. */
static grpo_err
score_real(void *ctx, grpo_run_group *g, grpo_rewarder *rw, const grpo_run_prompt *p)
{
    table *t = ctx;
    (void)rw;
    grpo_err err = grpo_run_score_default(t->run, g, p);
    if (err == GRPO_OK && t->tools != NULL)
        err = bench_tools_keep(t->tools, g);
    pthread_mutex_lock(&t->mu);
    t->verify_s += g->verify_ms * 1e-3; /* the step's own time, not its wait for the pool */
    for (int32_t i = 0; err == GRPO_OK && i < g->n_samples; i++) {
        size_t k;
        grpo_run_sample *s = slot_check(t, g, i, &k);
        if (s == NULL)
            err = GRPO_ESTATE;
        else if (!t->have[k])
            err = copy_result(&t->res[k], &s->score), t->have[k] = err == GRPO_OK;
        else
            t->mismatches += !same_result(&t->res[k], &s->score);
    }
    pthread_mutex_unlock(&t->mu);
    return err;
}

/* B: every verdict at once, as A gave it. */
static grpo_err
score_instant(void *ctx, grpo_run_group *g, grpo_rewarder *rw, const grpo_run_prompt *p)
{
    table *t = ctx;
    grpo_err err = GRPO_OK;
    (void)rw, (void)p;
    for (int32_t i = 0; err == GRPO_OK && i < g->n_samples; i++) {
        size_t k;
        grpo_run_sample *s = slot_check(t, g, i, &k);
        if (s == NULL)
            return GRPO_ESTATE;
        if (!t->have[k])
            return grpo__fail(GRPO_ESTATE, "bench run: no verdict of A for prompt %lld sample %d",
                              (long long)g->item, s->index);
        grpo_reward_result_fini(&s->score);
        err = copy_result(&s->score, &t->res[k]);
    }
    g->verify_ms = 0;
    return err;
}

static void
table_fini(table *t)
{
    for (size_t k = 0; t->res && k < t->n_items * (size_t)t->G; k++)
        grpo_reward_result_fini(&t->res[k]);
    free(t->res), free(t->have);
    pthread_mutex_destroy(&t->mu);
}

/* ---- CPU time of the sandboxed processes -------------------------------------------------- */

/* CPU seconds of this process's descendants (the sandbox service, its workers, the Python
 * pools' zygotes and what they reaped), from /proc: a descendant's own time plus its reaped
 * children's, so every process that ran and was waited for is counted once. */
static double
descendants_cpu(void)
{
    size_t n = 0, cap = 0;
    struct pr {
        long pid, ppid;
        double s;
    } *v = NULL;
    DIR *d = opendir("/proc");
    struct dirent *e;
    double ticks = (double)sysconf(_SC_CLK_TCK), sum = 0;
    while (d && (e = readdir(d)) != NULL) {
        if (!isdigit((unsigned char)e->d_name[0]))
            continue;
        char path[300], buf[1024];
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        size_t k = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
        if (f)
            fclose(f);
        buf[k] = 0;
        const char *rp = strrchr(buf, ')');
        char st;
        long ppid, cut, cst;
        unsigned long ut, stm;
        if (rp == NULL ||
            sscanf(rp + 1, " %c %ld %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu %ld %ld", &st,
                   &ppid, &ut, &stm, &cut, &cst) != 6)
            continue;
        if (n == cap) {
            struct pr *nv = realloc(v, (cap = cap ? 2 * cap : 512) * sizeof *v);
            if (nv == NULL)
                break;
            v = nv;
        }
        v[n++] = (struct pr){atol(e->d_name), ppid, (double)(ut + stm) + (double)(cut + cst)};
    }
    if (d)
        closedir(d);
    long self = (long)getpid();
    for (size_t i = 0; i < n; i++) {
        long p = v[i].ppid;
        for (int depth = 0; p > 1 && p != self && depth < 64; depth++) {
            size_t j = 0;
            while (j < n && v[j].pid != p)
                j++;
            p = j < n ? v[j].ppid : 0;
        }
        if (p == self)
            sum += v[i].s / ticks;
    }
    free(v);
    return sum;
}

static double
self_cpu(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* ---- one run ------------------------------------------------------------------------------ */

typedef struct args {
    grpo_run_opts o;
    long rounds;
    const char *instant; /* --instant: verify, tools or both */
    const char *keep;
    char model_buf[PATH_MAX], prompts_buf[PATH_MAX];
} args;

typedef struct measure {
    double wall, gen, proc_cpu, sandbox_cpu, verify;
    size_t completions, groups;
    double reward_mean;
    uint64_t tokens, turns, steps, wait_steps; /* generated tokens; the engine's turns */
    double wait_s;
} measure;

typedef struct watch {
    double t0, gen_end;
} watch;

/* Notes when the engine has finished the last group (what is left is verification). */
static void
on_progress(void *ctx, const grpo_run_stats *st, int final)
{
    watch *w = ctx;
    if (w->gen_end == 0 && st->submitted > 0 && st->engine.groups_done >= st->submitted)
        w->gen_end = grpo_now();
    (void) final;
}

static grpo_err
run_once(const args *a, table *t, int real, const char *dir, long round, measure *m)
{
    char db[PATH_MAX + 64], out[PATH_MAX + 64], wal[PATH_MAX + 80];
    snprintf(db, sizeof db, "%s/round%ld-%c.db", dir, round, real ? 'A' : 'B');
    snprintf(out, sizeof out, "%s/round%ld-%c.jsonl", dir, round, real ? 'A' : 'B');
    static const char *const sfx[] = {"", "-wal", "-shm", ".lock"};
    for (size_t k = 0; k < sizeof sfx / sizeof sfx[0]; k++) {
        snprintf(wal, sizeof wal, "%s%s", db, sfx[k]);
        remove(wal);
    }
    grpo_run_opts o = a->o;
    o.db = db, o.out = out;
    o.score = real || !t->instant_verify ? score_real : score_instant, o.score_ctx = t;
    if (!real && t->instant_tools)
        o.turns_hook = bench_tools_hook(t->tools);
    grpo_run *r = NULL;
    grpo_run_stats st;
    watch w = {0, 0};
    grpo_err err = grpo_run_open(&r, &o);
    if (err == GRPO_OK) {
        t->verify_s = 0, t->run = r;
        double c0 = self_cpu(), d0 = descendants_cpu();
        w.t0 = grpo_now();
        err = grpo_run_execute(r, on_progress, &w);
        double t1 = grpo_now();
        m->sandbox_cpu = descendants_cpu() - d0, m->proc_cpu = self_cpu() - c0;
        grpo_run_get_stats(r, &st);
        m->wall = st.seconds, m->gen = (w.gen_end > 0 ? w.gen_end : t1) - w.t0;
        m->completions = st.completions, m->groups = st.groups_done;
        m->reward_mean = st.reward_mean;
        m->verify = t->verify_s;
        m->tokens = st.engine.tokens_generated, m->turns = st.engine.turns;
        m->steps = st.engine.forward_calls + st.engine.wait_steps;
        m->wait_steps = st.engine.wait_steps, m->wait_s = st.engine.wait_s;
    }
    grpo_err cerr = grpo_run_close(r);
    return err != GRPO_OK ? err : cerr;
}

/* ---- same run: the --out lines of A and B, as sets ------------------------------------------ */

static int
cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The lines of path, sorted (*text owns them). */
static char **
sorted_lines(const char *path, char **text, size_t *n)
{
    size_t len = 0, cap = 0;
    char **v = NULL;
    *n = 0;
    if (grpo__read_file(path, (size_t)1 << 32, text, &len) != GRPO_OK)
        return NULL;
    for (char *p = *text, *nl; p < *text + len; p = nl + 1) {
        if ((nl = memchr(p, '\n', (size_t)(*text + len - p))) == NULL)
            nl = *text + len;
        *nl = 0;
        if (*n == cap) {
            char **nv = realloc(v, (cap = cap ? 2 * cap : 1024) * sizeof *v);
            if (nv == NULL)
                return free(v), NULL;
            v = nv;
        }
        v[(*n)++] = p;
    }
    qsort(v, *n, sizeof *v, cmp_str);
    return v ? v : calloc(1, sizeof *v);
}

/* A line with its turns' timings taken out (B answers with the records of the A that ran
 * last, whose timings are that run's): in place, when the line has turns. */
static char *
untimed(char *line, char **owned)
{
    *owned = NULL;
    if (strstr(line, "\"turns\"") == NULL)
        return line;
    cJSON *o = cJSON_Parse(line), *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(o, "turns"))
    {
        cJSON *r = cJSON_GetObjectItemCaseSensitive(t, "record");
        cJSON_DeleteItemFromObjectCaseSensitive(r, "tool_ms");
        cJSON_DeleteItemFromObjectCaseSensitive(r, "queue_ms");
        cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(r, "info"),
                                                "wall_ms");
    }
    *owned = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return *owned ? *owned : line;
}

static int
same_lines(const char *dir, long round)
{
    char pa[PATH_MAX + 64], pb[PATH_MAX + 64], *ta = NULL, *tb = NULL;
    size_t na = 0, nb = 0;
    snprintf(pa, sizeof pa, "%s/round%ld-A.jsonl", dir, round);
    snprintf(pb, sizeof pb, "%s/round%ld-B.jsonl", dir, round);
    char **la = sorted_lines(pa, &ta, &na), **lb = sorted_lines(pb, &tb, &nb);
    int same = la && lb && na == nb && na > 0;
    for (size_t i = 0; same && i < na; i++) {
        char *oa, *ob;
        same = strcmp(untimed(la[i], &oa), untimed(lb[i], &ob)) == 0;
        free(oa), free(ob);
    }
    free(la), free(lb), free(ta), free(tb);
    return same;
}

/* ---- flags ---------------------------------------------------------------------------------- */

enum {
    O_MODEL = 256,
    O_PROMPTS,
    O_ROUNDS,
    O_THREADS,
    O_VTHREADS,
    O_PENDING,
    O_REWARD,
    O_KEEP,
    O_INSTANT
};

static const struct option long_opts[] = {
    {"model", required_argument, 0, O_MODEL},
    {"prompts", required_argument, 0, O_PROMPTS},
    {"rounds", required_argument, 0, O_ROUNDS},
    {"threads", required_argument, 0, O_THREADS},
    {"verify-threads", required_argument, 0, O_VTHREADS},
    {"max-pending-groups", required_argument, 0, O_PENDING},
    {"reward-config", required_argument, 0, O_REWARD},
    {"keep", required_argument, 0, O_KEEP},
    {"instant", required_argument, 0, O_INSTANT},
    CLI_GEN_LONG_OPTS,
    CLI_TOOLS_LONG_OPTS,
    {0, 0, 0, 0},
};

static int
parse_opt(void *ctx, int c, const char *v)
{
    args *x = ctx;
    long n;
    switch (c) {
    case O_MODEL:
        x->o.model = v;
        return 0;
    case O_PROMPTS:
        x->o.prompts = v;
        return 0;
    case O_REWARD:
        x->o.reward_config = v;
        return 0;
    case O_KEEP:
        x->keep = v;
        return 0;
    case O_INSTANT:
        if (strcmp(v, "verify") != 0 && strcmp(v, "tools") != 0 && strcmp(v, "both") != 0)
            return cli_usage(CMD, "--instant %s: expected verify, tools or both", v);
        x->instant = v;
        return 0;
    case O_ROUNDS:
        if (cli_parse_long(v, 1, MAX_ROUNDS, &x->rounds) != 0)
            return cli_usage(CMD, "--rounds %s: expected an integer in [1, %d]", v, MAX_ROUNDS);
        return 0;
    case O_PENDING:
        if (cli_parse_long(v, 1, 1 << 20, &n) != 0)
            return cli_usage(CMD, "--max-pending-groups %s: expected a positive integer", v);
        x->o.max_pending = (int32_t)n;
        return 0;
    case O_THREADS:
    case O_VTHREADS:
        if (cli_parse_long(v, 1, 1024, &n) != 0)
            return cli_usage(CMD, "--%s %s: expected an integer in [1, 1024]",
                             c == O_THREADS ? "threads" : "verify-threads", v);
        *(c == O_THREADS ? &x->o.threads : &x->o.verify_threads) = (int32_t)n;
        return 0;
    default:
        if (cli_tools_is_opt(c))
            return cli_tools_parse_opt(CMD, &x->o.tools, c, v);
        return cli_gen_is_opt(c) ? cli_gen_parse_opt(CMD, &x->o.gen, c, v)
                                 : cli_usage(CMD, "unknown option");
    }
}

static int
parse_args(args *x, int argc, char **argv)
{
    memset(x, 0, sizeof *x);
    grpo_run_opts_default(&x->o);
    x->rounds = 3;
    int rc = cli_getopt(CMD, argc, argv, long_opts, parse_opt, x);
    if (rc != 0)
        return rc;
    if (x->o.model == NULL) {
        if (!cli_bundled("models/demo", x->model_buf, sizeof x->model_buf, 1))
            return cli_usage(CMD, "no bundled demo model found; give --model");
        x->o.model = x->model_buf;
    }
    if (x->o.prompts == NULL) {
        if (!cli_bundled("bench/run_prompts.jsonl", x->prompts_buf, sizeof x->prompts_buf, 0))
            return cli_usage(CMD, "bench/run_prompts.jsonl not found; give --prompts");
        x->o.prompts = x->prompts_buf;
    }
    x->o.command_line = "grpo bench run";
    int tools = x->o.tools.list != NULL && x->o.tools.list[0] != '\0';
    if (x->instant == NULL)
        x->instant = tools ? "tools" : "verify";
    if (!tools && strcmp(x->instant, "verify") != 0)
        return cli_usage(CMD, "--instant %s needs --tools", x->instant);
    return 0;
}

/* ---- the table ------------------------------------------------------------------------------ */

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Code checks whose program ran (correct or failed tests) and the tests they ran. */
static void
code_checks(const table *t, size_t *checks, size_t *tests)
{
    *checks = *tests = 0;
    for (size_t k = 0; k < t->n_items * (size_t)t->G; k++)
        for (int32_t i = 0; t->have[k] && i < t->res[k].n_terms; i++) {
            const grpo_reward_term *tm = &t->res[k].terms[i];
            if (strcmp(tm->verifier, "code") != 0 ||
                (strcmp(tm->label, "correct") != 0 && strcmp(tm->label, "failed-tests") != 0))
                continue;
            cJSON *d = tm->details_json ? cJSON_Parse(tm->details_json) : NULL;
            const cJSON *n = cJSON_GetObjectItemCaseSensitive(d, "total");
            (*checks)++;
            *tests += cJSON_IsNumber(n) ? (size_t)n->valuedouble : 0;
            cJSON_Delete(d);
        }
}

static void
header(const args *a, size_t n_prompts)
{
    printf("grpo bench run: %s, %s (%zu prompts), G %d, max %d new tokens, %d forward threads, "
           "%d verifier threads, %ld rounds, %d CPUs (grpo %s)\n",
           a->o.model, a->o.prompts, n_prompts, a->o.gen.G, a->o.gen.max_new,
           a->o.threads > 0 ? a->o.threads : grpo_cpu_count(), a->o.verify_threads, a->rounds,
           grpo_cpu_count(), grpo_version());
    int tools = a->o.tools.list != NULL && a->o.tools.list[0] != '\0';
    printf("A: verifiers run beside generation%s; B: %s\n\n", tools ? ", tools called" : "",
           strcmp(a->instant, "verify") == 0 ? "every verifier answered at once with A's verdicts"
           : strcmp(a->instant, "tools") == 0
               ? "every tool call answered at once with A's observation, verifiers run"
               : "every tool call and verifier answered at once with A's observations and "
                 "verdicts");
    printf("| round | order | wall A s | wall B s | A / B | generated A s | generated B s | "
           "verify wall s | CPU A s | CPU B s | sandbox CPU s | completions/s A | "
           "completions/s B | load start | load end | same run |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    fflush(stdout);
}

static void
row(long round, const measure *ma, const measure *mb, const double *load0, const double *load1,
    int same)
{
    printf("| %ld | %s | %.2f | %.2f | %.3f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.1f | "
           "%.1f | %.2f | %.2f | %s |\n",
           round, round % 2 ? "A, B" : "B, A", ma->wall, mb->wall,
           mb->wall > 0 ? ma->wall / mb->wall : 0.0, ma->gen, mb->gen, ma->verify, ma->proc_cpu,
           mb->proc_cpu, ma->sandbox_cpu, ma->wall > 0 ? (double)ma->completions / ma->wall : 0,
           mb->wall > 0 ? (double)mb->completions / mb->wall : 0, load0[0], load1[0],
           same ? "yes" : "no");
    fflush(stdout);
}

static void
tools_one(const char *name, const measure *m)
{
    printf("%s %.1f tok/s, %llu calls, waited for a tool in %llu of %llu engine steps (%.1f%%, "
           "%.2f s)",
           name, m->wall > 0 ? (double)m->tokens / m->wall : 0.0, (unsigned long long)m->turns,
           (unsigned long long)m->wait_steps, (unsigned long long)m->steps,
           m->steps ? 100.0 * (double)m->wait_steps / (double)m->steps : 0.0, m->wait_s);
}

static void
tools_row(long round, const measure *ma, const measure *mb)
{
    printf("  round %ld tools: ", round);
    tools_one("A", ma);
    printf("; ");
    tools_one("B", mb);
    printf("; tokens/s B / A %.3f\n",
           ma->wall > 0 && mb->wall > 0 ? ((double)mb->tokens / mb->wall) /
                                              ((double)ma->tokens / ma->wall)
                                        : 0.0);
    fflush(stdout);
}

static void
footer(const args *a, const table *t, double *ratio, const measure *ma, int lines_same,
       size_t mismatches)
{
    size_t checks, tests;
    qsort(ratio, (size_t)a->rounds, sizeof *ratio, cmp_double);
    double med = a->rounds % 2 ? ratio[a->rounds / 2]
                               : 0.5 * (ratio[a->rounds / 2 - 1] + ratio[a->rounds / 2]);
    code_checks(t, &checks, &tests);
    printf("\nA / B: median %.3f, range %.3f-%.3f over %ld rounds\n", med, ratio[0],
           ratio[a->rounds - 1], a->rounds);
    printf("per run: %zu groups, %zu completions, reward mean %.4f; %zu code checks ran the "
           "policy's program (%zu tests in the sandbox)\n",
           ma->groups, ma->completions, ma->reward_mean, checks, tests);
    printf("same run: %s (A's and B's --out lines %s in every round; %zu verdicts of a later A "
           "differ from the first A's)\n",
           lines_same && mismatches == 0 ? "yes" : "no", lines_same ? "equal" : "not equal",
           mismatches);
}

static int
make_dir(const args *a, char *dir, size_t cap)
{
    if (a->keep) {
        snprintf(dir, cap, "%s", a->keep);
        if (mkdir(dir, 0755) != 0 && errno != EEXIST)
            return fprintf(stderr, "grpo %s: --keep %s: %s\n", CMD, dir, strerror(errno)), -1;
        return 0;
    }
    snprintf(dir, cap, "%s/grpo-bench-run-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (mkdtemp(dir) == NULL)
        return fprintf(stderr, "grpo %s: mkdtemp %s: %s\n", CMD, dir, strerror(errno)), -1;
    return 0;
}

static void
remove_dir(const char *dir, long rounds)
{
    static const char *const sfx[] = {".db", ".db-wal", ".db-shm", ".db.lock", ".jsonl"};
    char p[PATH_MAX + 80];
    for (long r = 1; r <= rounds; r++)
        for (int k = 0; k < 2; k++)
            for (size_t j = 0; j < sizeof sfx / sizeof sfx[0]; j++) {
                snprintf(p, sizeof p, "%s/round%ld-%c%s", dir, r, "AB"[k], sfx[j]);
                remove(p);
            }
    rmdir(dir);
}

/* The rounds: A then B in odd rounds, B then A in even ones (round 1 fills the table). */
static int
rounds(const args *a, table *t, const char *dir)
{
    double ratio[MAX_ROUNDS];
    measure ma = {0}, mb = {0};
    int all_same = 1;
    for (long r = 1; r <= a->rounds; r++) {
        double l0[3] = {0}, l1[3] = {0};
        getloadavg(l0, 3);
        for (int k = 0; k < 2; k++) {
            int real = (r % 2 == 1) == (k == 0);
            if (run_once(a, t, real, dir, r, real ? &ma : &mb) != GRPO_OK) {
                fprintf(stderr, "grpo %s: round %ld, run %c: %s\n", CMD, r, real ? 'A' : 'B',
                        grpo_error_last());
                return CLI_FAIL;
            }
        }
        getloadavg(l1, 3);
        int same = same_lines(dir, r) && ma.completions == mb.completions;
        all_same &= same;
        ratio[r - 1] = mb.wall > 0 ? ma.wall / mb.wall : 0;
        row(r, &ma, &mb, l0, l1, same);
        if (t->tools != NULL)
            tools_row(r, &ma, &mb);
    }
    footer(a, t, ratio, &ma, all_same, t->mismatches);
    return all_same && t->mismatches == 0 ? CLI_OK : CLI_FAIL;
}

int
grpo_bench_run(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return CLI_OK;
    }
    args a;
    int rc = parse_args(&a, argc, argv);
    if (rc != 0)
        return rc;
    /* Fork safety: the sandbox's workers are forked from the service, started before any
     * thread (as `grpo rollout` does in main). */
    if (grpo_sandbox_service_start() != GRPO_OK)
        grpo_log(GRPO_LOG_WARN, "sandbox service: %s (workers will be forked directly)",
                 grpo_error_last());
    grpo_prompt_set ps = {0};
    if (grpo_prompts_load(&ps, a.o.prompts, a.o.gen.skip_bad) != GRPO_OK)
        return cli_fail(CMD);
    table t = {0};
    pthread_mutex_init(&t.mu, NULL);
    t.n_items = ps.n, t.G = a.o.gen.G;
    size_t cells = (ps.n ? ps.n : 1) * (size_t)t.G;
    t.res = calloc(cells, sizeof *t.res), t.have = calloc(cells, 1);
    t.instant_verify = strcmp(a.instant, "tools") != 0;
    t.instant_tools = strcmp(a.instant, "verify") != 0;
    char dir[PATH_MAX];
    rc = CLI_FAIL;
    if (a.o.tools.list != NULL && a.o.tools.list[0] != '\0' &&
        bench_tools_create(&t.tools, &ps, a.o.gen.G) != GRPO_OK)
        fprintf(stderr, "grpo %s: %s\n", CMD, grpo_error_last());
    else if (t.res == NULL || t.have == NULL)
        fprintf(stderr, "grpo %s: out of memory\n", CMD);
    else if (make_dir(&a, dir, sizeof dir) == 0) {
        header(&a, ps.n);
        rc = rounds(&a, &t, dir);
        if (a.keep == NULL)
            remove_dir(dir, a.rounds);
    }
    bench_tools_destroy(t.tools);
    table_fini(&t);
    grpo_prompts_fini(&ps);
    return rc;
}
