/* `grpo stats`: the questions people ask of a run, answered from the store's stats queries (per
 * step, verifier, prompt, worker, run, finish reason, histogram bin, time bin, KL step, example
 * completion or tool environment) as a table, CSV or JSON, or as one self-contained HTML report
 * (cli/stats_report.c). */
#include "cli/cli.h"
#include "cli/stats_report.h"
#include "common/common_int.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: grpo stats --db FILE [--by KEY] [--format table|csv|json] [--step-range A:B]\n"
    "                  [--run ID] [--k K] [--bins N] [--examples N] [--text-bytes N]\n"
    "                  [--report FILE.html]\n"
    "\n"
    "Reads a provenance database (opened read-only) and prints one row per group of --by:\n"
    "  step      groups, completions, reward mean/std, frac_reward_zero_std (groups whose\n"
    "            rewards are all equal), pass rate, completion length mean/p50/p95, fraction\n"
    "            cut at max length, generated tokens and tokens/s (over the step's wall span)\n"
    "  verifier  per verifier name+version: results, scored, reward mean/std, pass rate,\n"
    "            fail/timeout/error/skip counts, latency mean/p50/p99 in ms\n"
    "  prompt    per prompt: groups, n judged samples, c correct, solve rate, mean reward and\n"
    "            pass@k = 1 - C(n-c,k)/C(n,k) (unbiased estimator)\n"
    "  worker    per worker: groups, completions, tokens, tokens/s, re-issued leases\n"
    "  run       per run: status, times, command line, host, version, git commit/branch/dirty\n"
    "            of the working and dataset repositories, groups, completions, tokens, steps,\n"
    "            mean reward\n"
    "  finish    per run and finish reason (eos, stop, length, abort): completions, fraction,\n"
    "            mean length and reward\n"
    "  reward-hist, length-hist\n"
    "            per run and bin: the bin's edges, count and fraction (--bins equal bins over\n"
    "            the selection's range, shared by its runs; integer bins for lengths)\n"
    "  time      per run and time bin (--bins over its first group start to last finish):\n"
    "            groups active, completions, tokens, completions/s and tokens/s\n"
    "  kl        per run and step, completions with a reference policy only: KL per token,\n"
    "            max KL, logprob per token of the sampler and of the reference, their gap\n"
    "  example   --examples completions per run, verifier and verdict kind, with their text\n"
    "            (valid UTF-8, cut at --text-bytes on a character boundary, text_cut 1)\n"
    "  tools     per run ('(all)') and tool environment of multi-turn rollouts: completions,\n"
    "            fraction with a tool call, turns, calls that ran, calls per sample, tool and\n"
    "            wait ms p50/p99, observation tokens per call, ok/error/timeout/other turns,\n"
    "            mean reward of the completions with and without a call\n"
    "Percentiles are nearest-rank; standard deviations divide by n; skipped verdicts are not\n"
    "scored. The definitions are the views in schemas/003_stats.sql and the queries of\n"
    "store/stats_report.c.\n"
    "\n"
    "options:\n"
    "  --db FILE          the database written by grpo rollout (required)\n"
    "  --by KEY           step (default), verifier, prompt, worker, run, finish, reward-hist,\n"
    "                     length-hist, time, kl, example or tools\n"
    "  --format F         table (default, aligned text), csv (header + rows) or json (an array\n"
    "                     with one object per row; numbers are JSON numbers, missing values null)\n"
    "  --step-range A:B   only steps A..B inclusive; either end may be left out (\"10:\", \":5\")\n"
    "  --run ID           only run ID (default: every run; rows carry run_id)\n"
    "  --k K              the k of pass@k for --by prompt (default 8)\n"
    "  --bins N           bins of the histograms and of --by time (default 20, at most 1000)\n"
    "  --examples N       completions per verdict kind for --by example (default 3)\n"
    "  --text-bytes N     example texts cut to N bytes (default 600)\n"
    "  --report FILE      write one self-contained HTML file: the runs' provenance; charts of\n"
    "                     reward mean (+/- std), completion length (mean/p50/p95) and pass/\n"
    "                     zero-std/truncated fractions against step (a mark per step, so one\n"
    "                     step shows); reward and length histograms and finish reasons;\n"
    "                     tokens/s and completions/s over the run's wall time; solve rate bars\n"
    "                     and pass@k per prompt; pass rate bars and latency per verifier;\n"
    "                     per-worker rows (tokens/s bars for a grpo serve pool); KL to the\n"
    "                     reference policy when recorded; example completions per verdict\n"
    "                     (escaped, cut at --text-bytes); the per-step table. Prints nothing\n"
    "                     else\n"
    "  -h, --help         this help\n";

static int
parse_i64(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end)
        return -1;
    *out = v;
    return 0;
}

static int
parse_range(const char *s, grpo_stats_opts *o)
{
    const char *colon = strchr(s, ':');
    char lo[32] = "", hi[32] = "";
    if (colon == NULL || (size_t)(colon - s) >= sizeof lo || strlen(colon + 1) >= sizeof hi)
        return -1;
    memcpy(lo, s, (size_t)(colon - s));
    strcpy(hi, colon + 1);
    o->step_min = INT64_MIN;
    o->step_max = INT64_MAX;
    if ((lo[0] && parse_i64(lo, &o->step_min)) || (hi[0] && parse_i64(hi, &o->step_max)))
        return -1;
    o->has_step_range = 1;
    return o->step_min <= o->step_max ? 0 : -1;
}

/* ---- text output ------------------------------------------------------------------------------
 */

/* A cell for the aligned table: on one line (control characters as spaces). */
static void
table_cell(const grpo_stats_cell *c, char *buf, size_t n)
{
    stats_cell_text(c, buf, n, 0);
    for (char *p = buf; *p; p++)
        if ((unsigned char)*p < 0x20)
            *p = ' ';
}

static void
print_table(const grpo_stats_table *t, FILE *f)
{
    char buf[256];
    int *w = calloc((size_t)t->n_cols, sizeof *w);
    if (w == NULL)
        return;
    for (int32_t j = 0; j < t->n_cols; j++) {
        w[j] = (int)strlen(t->cols[j]);
        for (int32_t i = 0; i < t->n_rows; i++) {
            table_cell(&t->cells[(size_t)i * t->n_cols + j], buf, sizeof buf);
            if ((int)strlen(buf) > w[j])
                w[j] = (int)strlen(buf);
        }
    }
    for (int32_t j = 0; j < t->n_cols; j++)
        fprintf(f, "%s%*s", j ? "  " : "", w[j], t->cols[j]);
    fputc('\n', f);
    for (int32_t i = 0; i < t->n_rows; i++) {
        for (int32_t j = 0; j < t->n_cols; j++) {
            const grpo_stats_cell *c = &t->cells[(size_t)i * t->n_cols + j];
            table_cell(c, buf, sizeof buf);
            fprintf(f, "%s%*s", j ? "  " : "", w[j], c->type == GRPO_STATS_NULL ? "-" : buf);
        }
        fputc('\n', f);
    }
    free(w);
}

static void
print_csv_field(const char *s, FILE *f)
{
    if (strpbrk(s, ",\"\n\r") == NULL) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void
print_csv(const grpo_stats_table *t, FILE *f)
{
    char buf[256];
    for (int32_t j = 0; j < t->n_cols; j++) {
        if (j)
            fputc(',', f);
        print_csv_field(t->cols[j], f);
    }
    fputc('\n', f);
    for (int32_t i = 0; i < t->n_rows; i++) {
        for (int32_t j = 0; j < t->n_cols; j++) {
            const grpo_stats_cell *c = &t->cells[(size_t)i * t->n_cols + j];
            if (j)
                fputc(',', f);
            if (c->type == GRPO_STATS_TEXT)
                print_csv_field(c->s, f);
            else {
                stats_cell_text(c, buf, sizeof buf, 1);
                fputs(buf, f);
            }
        }
        fputc('\n', f);
    }
}

static void
print_json_string(const char *s, FILE *f)
{
    grpo_buf b = {0};
    if (grpo__buf_json_str(&b, s) == GRPO_OK)
        fwrite(b.data, 1, b.len, f);
    else
        fputs("null", f); /* out of memory */
    grpo__buf_fini(&b);
}

static void
print_json(const grpo_stats_table *t, FILE *f)
{
    char buf[64];
    fputs("[", f);
    for (int32_t i = 0; i < t->n_rows; i++) {
        fputs(i ? ",\n {" : "\n {", f);
        for (int32_t j = 0; j < t->n_cols; j++) {
            const grpo_stats_cell *c = &t->cells[(size_t)i * t->n_cols + j];
            if (j)
                fputs(", ", f);
            print_json_string(t->cols[j], f);
            fputs(": ", f);
            if (c->type == GRPO_STATS_TEXT)
                print_json_string(c->s, f);
            else if (c->type == GRPO_STATS_NULL || (c->type == GRPO_STATS_REAL && !isfinite(c->r)))
                fputs("null", f);
            else {
                stats_cell_text(c, buf, sizeof buf, 1);
                fputs(buf, f);
            }
        }
        fputs("}", f);
    }
    fputs(t->n_rows ? "\n]\n" : "]\n", f);
}

/* ---- the command
 * --------------------------------------------------------------------------------
 */

typedef struct stats_args {
    const char *db, *format, *report;
    grpo_stats_opts o;
} stats_args;

/* A numeric option: --run, --k, --bins, --examples or --text-bytes. */
static int
parse_num_opt(stats_args *a, int c, const char *v)
{
    static const struct {
        int c;
        const char *name;
        int64_t max;
    } lim[] = {{'r', "--run", INT64_MAX},
               {'k', "--k", 1000000},
               {'n', "--bins", 1000},
               {'e', "--examples", 1000},
               {'t', "--text-bytes", 1 << 20}};
    int64_t n;
    for (size_t k = 0; k < sizeof lim / sizeof lim[0]; k++) {
        if (lim[k].c != c)
            continue;
        if (parse_i64(v, &n) != 0 || n <= 0 || n > lim[k].max)
            return cli_usage("stats", "%s: \"%s\" is not an integer in 1..%lld", lim[k].name, v,
                             (long long)lim[k].max);
        if (c == 'r')
            a->o.run_id = n;
        else
            *(c == 'k'   ? &a->o.pass_k
              : c == 'n' ? &a->o.bins
              : c == 'e' ? &a->o.examples
                         : &a->o.text_bytes) = (int32_t)n;
        return 0;
    }
    return cli_usage("stats", "unknown or incomplete option \"%s\"", v);
}

/* One option; returns 0, or CLI_USAGE with the message printed. */
static int
parse_opt(stats_args *a, int c, const char *v)
{
    static const char *const bys[] = {"step", "verifier", "prompt",      "worker",
                                      "run",  "finish",   "reward-hist", "length-hist",
                                      "time", "kl",       "example",     "tools"};
    switch (c) {
    case 'd':
        a->db = v;
        return 0;
    case 'b':
        for (int i = 0; i < (int)(sizeof bys / sizeof bys[0]); i++)
            if (strcmp(v, bys[i]) == 0) {
                a->o.by = (grpo_stats_by)i;
                return 0;
            }
        return cli_usage("stats", "--by: unknown grouping \"%s\"", v);
    case 'f':
        if (strcmp(v, "table") && strcmp(v, "csv") && strcmp(v, "json"))
            return cli_usage("stats", "--format: unknown format \"%s\"", v);
        a->format = v;
        return 0;
    case 's':
        return parse_range(v, &a->o) != 0
                   ? cli_usage("stats", "--step-range: \"%s\" is not A:B with A <= B", v)
                   : 0;
    case 'o':
        a->report = v;
        return 0;
    default:
        return parse_num_opt(a, c, v);
    }
}

/* Returns 0 to run, CLI_OK after --help, or CLI_USAGE. */
static int
parse_args(stats_args *a, int argc, char **argv)
{
    static const struct option longopts[] = {{"db", required_argument, NULL, 'd'},
                                             {"by", required_argument, NULL, 'b'},
                                             {"format", required_argument, NULL, 'f'},
                                             {"step-range", required_argument, NULL, 's'},
                                             {"run", required_argument, NULL, 'r'},
                                             {"k", required_argument, NULL, 'k'},
                                             {"bins", required_argument, NULL, 'n'},
                                             {"examples", required_argument, NULL, 'e'},
                                             {"text-bytes", required_argument, NULL, 't'},
                                             {"report", required_argument, NULL, 'o'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    *a = (stats_args){.format = "table"};
    int c, rc;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (c == 'h') {
            fputs(usage_text, stdout);
            return -1;
        }
        if ((rc = parse_opt(a, c, c == '?' || c == ':' ? argv[optind - 1] : optarg)) != 0)
            return rc;
    }
    if (optind < argc)
        return cli_usage("stats", "unexpected argument \"%s\"", argv[optind]);
    if (a->db == NULL)
        return cli_usage("stats", "--db FILE is required");
    if (a->report && a->o.by != GRPO_STATS_BY_STEP)
        return cli_usage("stats", "--report charts steps; leave out --by");
    return 0;
}

/* With --run: GRPO_ENOTFOUND unless the store has that run (an unknown run is an error, not an
 * empty table). */
static grpo_err
check_run(grpo_store *s, const stats_args *a)
{
    grpo_stats_opts ro = {.by = GRPO_STATS_BY_RUN};
    grpo_stats_table *t = NULL;
    if (a->o.run_id <= 0)
        return GRPO_OK;
    grpo_err err = grpo_store_stats(&t, s, &ro);
    int found = 0;
    for (int32_t i = 0; err == GRPO_OK && i < t->n_rows; i++) /* run_id is the first column */
        found |= t->cells[(size_t)i * t->n_cols].i == a->o.run_id;
    if (err == GRPO_OK && !found)
        err = grpo__fail(GRPO_ENOTFOUND, "%s: no run %lld (the store has %d; see --by run)", a->db,
                         (long long)a->o.run_id, (int)t->n_rows);
    grpo_stats_table_free(t);
    return err;
}

/* The report's tables, with a->o's run and step filters and bins. */
static grpo_err
query_report(grpo_store *s, const stats_args *a, report_tables *rt)
{
    grpo_stats_table **slots[REPORT_N_TABLES];
    report_table_slots(rt, slots);
    grpo_err err = GRPO_OK;
    for (int k = 0; k < REPORT_N_TABLES && err == GRPO_OK; k++) {
        grpo_stats_opts o = a->o;
        o.by = report_bys[k];
        err = grpo_store_stats(slots[k], s, &o);
    }
    return err;
}

/* The table for a->o, and with --report the report's other tables too. */
static grpo_err
query(const stats_args *a, grpo_stats_table **t, report_tables *rt)
{
    grpo_store *s = NULL;
    grpo_store_opts so = {.read_only = 1};
    grpo_err err;
    if ((err = grpo_store_open(&s, a->db, &so)) == GRPO_OK && (err = check_run(s, a)) == GRPO_OK)
        err = a->report ? query_report(s, a, rt) : grpo_store_stats(t, s, &a->o);
    grpo_store_close(s);
    return err;
}

int
grpo_cmd_stats(int argc, char **argv)
{
    stats_args a;
    int rc = parse_args(&a, argc, argv);
    if (rc != 0)
        return rc < 0 ? CLI_OK : rc;
    grpo_stats_table *t = NULL;
    report_tables rt = {0};
    if (query(&a, &t, &rt) != GRPO_OK)
        rc = cli_fail("stats");
    else if (a.report)
        rc = report_write(a.report, a.db, &rt);
    else if (strcmp(a.format, "csv") == 0)
        print_csv(t, stdout);
    else if (strcmp(a.format, "json") == 0)
        print_json(t, stdout);
    else
        print_table(t, stdout);
    grpo_stats_table_free(t);
    report_tables_free(&rt);
    if (rc == CLI_OK && fflush(stdout) != 0)
        rc = CLI_FAIL;
    return rc;
}
