/* `grpo stats`: the questions people ask of a run, answered from the store's views (per step,
 * verifier, prompt or worker) as a table, CSV or JSON, or as one self-contained HTML report with
 * SVG charts of reward and completion length against step. */
#include "cli/cli.h"
#include "common/common_int.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: grpo stats --db FILE [--by step|verifier|prompt|worker|run] [--format table|csv|json]\n"
    "                  [--step-range A:B] [--run ID] [--k K] [--report FILE.html]\n"
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
    "Percentiles are nearest-rank; standard deviations divide by n; skipped verdicts are not\n"
    "scored. The definitions are the views in schemas/003_stats.sql.\n"
    "\n"
    "options:\n"
    "  --db FILE          the database written by grpo rollout (required)\n"
    "  --by KEY           step (default), verifier, prompt, worker or run\n"
    "  --format F         table (default, aligned text), csv (header + rows) or json (an array\n"
    "                     with one object per row; numbers are JSON numbers, missing values null)\n"
    "  --step-range A:B   only steps A..B inclusive; either end may be left out (\"10:\", \":5\")\n"
    "  --run ID           only run ID (default: every run; rows carry run_id)\n"
    "  --k K              the k of pass@k for --by prompt (default 8)\n"
    "  --report FILE      write one self-contained HTML file with SVG charts of reward mean\n"
    "                     (+/- std), completion length (mean/p50/p95) and pass/zero-std/truncated\n"
    "                     fractions against step (a mark per step, so one step shows), the runs'\n"
    "                     provenance, solve rate bars and pass@k per prompt, pass rate bars and\n"
    "                     latency percentiles per verifier, per-worker rows and the per-step\n"
    "                     table; prints nothing else\n"
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

static void
cell_text(const grpo_stats_cell *c, char *buf, size_t n, int exact)
{
    switch (c->type) {
    case GRPO_STATS_INT:
        snprintf(buf, n, "%lld", (long long)c->i);
        break;
    case GRPO_STATS_REAL:
        snprintf(buf, n, exact ? "%.17g" : "%.6g", c->r);
        break;
    case GRPO_STATS_TEXT:
        snprintf(buf, n, "%s", c->s);
        break;
    default:
        buf[0] = '\0';
    }
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
            cell_text(&t->cells[(size_t)i * t->n_cols + j], buf, sizeof buf, 0);
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
            cell_text(c, buf, sizeof buf, 0);
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
                cell_text(c, buf, sizeof buf, 1);
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
                cell_text(c, buf, sizeof buf, 1);
                fputs(buf, f);
            }
        }
        fputs("}", f);
    }
    fputs(t->n_rows ? "\n]\n" : "]\n", f);
}

/* ---- HTML report --------------------------------------------------------------------------------
 */

static int
col_index(const grpo_stats_table *t, const char *name)
{
    for (int32_t j = 0; j < t->n_cols; j++)
        if (strcmp(t->cols[j], name) == 0)
            return j;
    return -1;
}

/* Cell (i, name) as a double; NAN when missing. */
static double
num(const grpo_stats_table *t, int32_t i, const char *name)
{
    int j = col_index(t, name);
    if (j < 0)
        return NAN;
    const grpo_stats_cell *c = &t->cells[(size_t)i * t->n_cols + j];
    return c->type == GRPO_STATS_INT ? (double)c->i : c->type == GRPO_STATS_REAL ? c->r : NAN;
}

typedef struct {
    const char *col, *label, *color;
    const char *band_col; /* draw col +/- band_col as a shaded band, or NULL */
} series;

static double
nice_step(double span, int ticks)
{
    double raw = span / ticks, mag = pow(10, floor(log10(raw))), r = raw / mag;
    return (r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10) * mag;
}

enum { W = 720, H = 300, ML = 60, MR = 150, MT = 30, MB = 40 };

static void
chart(FILE *f, const grpo_stats_table *t, const char *title, const series *sv, int ns)
{
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (int32_t i = 0; i < t->n_rows; i++) {
        double x = num(t, i, "step");
        for (int k = 0; k < ns; k++) {
            double y = num(t, i, sv[k].col), b = sv[k].band_col ? num(t, i, sv[k].band_col) : 0;
            if (isnan(y) || isnan(x))
                continue;
            if (isnan(b))
                b = 0;
            x0 = fmin(x0, x), x1 = fmax(x1, x);
            y0 = fmin(y0, y - b), y1 = fmax(y1, y + b);
        }
    }
    fprintf(f,
            "<figure><figcaption>%s</figcaption>\n<svg xmlns=\"http://www.w3.org/2000/svg\" "
            "width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\">\n",
            title, W, H, W, H);
    if (!isfinite(x0)) {
        fprintf(f, "<text x=\"%d\" y=\"%d\">no data</text></svg></figure>\n", W / 2 - 30, H / 2);
        return;
    }
    if (x1 == x0)
        x0 -= 1, x1 += 1;
    if (y1 == y0)
        y0 -= y0 == 0 ? 1 : fabs(y0) * 0.1, y1 += y1 == 0 ? 1 : fabs(y1) * 0.1;
    double ys = nice_step(y1 - y0, 5), xs = nice_step(x1 - x0, 8);
    y0 = floor(y0 / ys) * ys, y1 = ceil(y1 / ys) * ys;
    double pw = W - ML - MR, ph = H - MT - MB;
#define PX(x) (ML + ((x)-x0) / (x1 - x0) * pw)
#define PY(y) (MT + (1 - ((y)-y0) / (y1 - y0)) * ph)
    fprintf(f,
            "<rect x=\"%d\" y=\"%d\" width=\"%g\" height=\"%g\" fill=\"#fff\" "
            "stroke=\"#888\"/>\n",
            ML, MT, pw, ph);
    for (int k = 0; y0 + k * ys <= y1 + ys * 1e-9; k++) {
        double y = y0 + k * ys; /* by index, so no -5.55e-17 from summing steps */
        fprintf(f,
                "<line x1=\"%d\" x2=\"%g\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" font-size=\"11\">%g</text>\n",
                ML, ML + pw, PY(y), PY(y), ML - 5, PY(y) + 4, fabs(y) < ys * 1e-9 ? 0 : y);
    }
    for (int k = 0; ceil(x0 / xs) * xs + k * xs <= x1 + xs * 1e-9; k++) {
        double x = ceil(x0 / xs) * xs + k * xs;
        if (fabs(x) < xs * 1e-9)
            x = 0;
        fprintf(f,
                "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%g\" y2=\"%g\" stroke=\"#888\"/>"
                "<text x=\"%.1f\" y=\"%g\" text-anchor=\"middle\" font-size=\"11\">%g</text>\n",
                PX(x), PX(x), MT + ph, MT + ph + 4, PX(x), MT + ph + 16, x);
    }
    fprintf(f, "<text x=\"%g\" y=\"%d\" text-anchor=\"middle\" font-size=\"12\">step</text>\n",
            ML + pw / 2, H - 6);
    for (int k = 0; k < ns; k++) {
        /* One polyline per run, so runs are not joined to each other. */
        int64_t run = INT64_MIN;
        int open = 0;
        if (sv[k].band_col) {
            fprintf(f, "<polygon fill=\"%s\" fill-opacity=\"0.15\" stroke=\"none\" points=\"",
                    sv[k].color);
            for (int32_t i = 0; i < t->n_rows; i++) {
                double y = num(t, i, sv[k].col), b = num(t, i, sv[k].band_col);
                if (!isnan(y) && !isnan(b))
                    fprintf(f, "%.1f,%.1f ", PX(num(t, i, "step")), PY(y + b));
            }
            for (int32_t i = t->n_rows - 1; i >= 0; i--) {
                double y = num(t, i, sv[k].col), b = num(t, i, sv[k].band_col);
                if (!isnan(y) && !isnan(b))
                    fprintf(f, "%.1f,%.1f ", PX(num(t, i, "step")), PY(y - b));
            }
            fputs("\"/>\n", f);
        }
        for (int32_t i = 0; i < t->n_rows; i++) {
            double x = num(t, i, "step"), y = num(t, i, sv[k].col);
            int64_t r = (int64_t)num(t, i, "run_id");
            if (isnan(y))
                continue;
            if (r != run && open)
                fputs("\"/>\n", f), open = 0;
            if (!open)
                fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"",
                        sv[k].color),
                    open = 1;
            run = r;
            fprintf(f, "%.1f,%.1f ", PX(x), PY(y));
        }
        if (open)
            fputs("\"/>\n", f);
        for (int32_t i = 0; i < t->n_rows; i++) { /* a mark per step: a one-step run shows */
            double x = num(t, i, "step"), y = num(t, i, sv[k].col);
            if (!isnan(y))
                fprintf(f, "<circle class=\"pt\" cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n",
                        PX(x), PY(y), sv[k].color);
        }
        fprintf(f,
                "<line x1=\"%g\" x2=\"%g\" y1=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"3\"/>"
                "<text x=\"%g\" y=\"%d\" font-size=\"12\">%s</text>\n",
                ML + pw + 10, ML + pw + 30, MT + 10 + 18 * k, MT + 10 + 18 * k, sv[k].color,
                ML + pw + 35, MT + 14 + 18 * k, sv[k].label);
    }
#undef PX
#undef PY
    fputs("</svg></figure>\n", f);
}

static void
html_escape(const char *s, FILE *f)
{
    for (; *s; s++) {
        if (*s == '<')
            fputs("&lt;", f);
        else if (*s == '>')
            fputs("&gt;", f);
        else if (*s == '&')
            fputs("&amp;", f);
        else
            fputc(*s, f);
    }
}

/* Writes table t as an HTML table, with only the columns named in cols (NULL: all). */
static void
html_table(FILE *f, const grpo_stats_table *t, const char *const *cols)
{
    char buf[256];
    int idx[64], n = 0;
    for (int32_t j = 0; j < t->n_cols && n < 64; j++) {
        int keep = cols == NULL;
        for (int k = 0; cols && cols[k]; k++)
            keep |= strcmp(cols[k], t->cols[j]) == 0;
        if (keep)
            idx[n++] = j;
    }
    fputs("<table><tr>", f);
    for (int k = 0; k < n; k++)
        fprintf(f, "<th>%s</th>", t->cols[idx[k]]);
    fputs("</tr>\n", f);
    for (int32_t i = 0; i < t->n_rows; i++) {
        fputs("<tr>", f);
        for (int k = 0; k < n; k++) {
            cell_text(&t->cells[(size_t)i * t->n_cols + idx[k]], buf, sizeof buf, 0);
            fputs("<td>", f);
            html_escape(buf, f);
            fputs("</td>", f);
        }
        fputs("</tr>\n", f);
    }
    fputs("</table>\n", f);
}

/* The report's tables beside the per-step one (NULL when not queried). */
typedef struct report_tables {
    grpo_stats_table *runs, *prompts, *verifiers, *workers;
} report_tables;

static void
report_tables_free(report_tables *r)
{
    grpo_stats_table_free(r->runs);
    grpo_stats_table_free(r->prompts);
    grpo_stats_table_free(r->verifiers);
    grpo_stats_table_free(r->workers);
}

/* One horizontal bar per row of t: column col (a fraction in [0, 1]) labelled by label_col. */
static void
bars(FILE *f, const grpo_stats_table *t, const char *label_col, const char *col, const char *color)
{
    enum { BW = 480, BH = 16, LW = 160 };
    int j = col_index(t, label_col);
    char label[256];
    fprintf(
        f, "<svg class=\"bars\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\">\n",
        LW + BW + 60, (int)t->n_rows * (BH + 4) + 4);
    for (int32_t i = 0; i < t->n_rows; i++) {
        double v = num(t, i, col), y = 2 + i * (BH + 4);
        label[0] = '\0';
        if (j >= 0)
            cell_text(&t->cells[(size_t)i * t->n_cols + j], label, sizeof label, 0);
        fprintf(f, "<text x=\"%d\" y=\"%.0f\" text-anchor=\"end\" font-size=\"11\">", LW - 6,
                y + BH - 4);
        html_escape(label, f);
        fprintf(f,
                "</text><rect class=\"bar\" x=\"%d\" y=\"%.0f\" width=\"%.1f\" height=\"%d\" "
                "fill=\"%s\"/><text x=\"%.1f\" y=\"%.0f\" font-size=\"11\">%.3g</text>\n",
                LW, y, isnan(v) ? 0 : v * BW, BH, color, LW + (isnan(v) ? 0 : v * BW) + 4,
                y + BH - 4, isnan(v) ? 0 : v);
    }
    fputs("</svg>\n", f);
}

/* The per-prompt, per-verifier and (for pooled runs) per-worker sections. */
static void
report_sections(FILE *f, const report_tables *rt)
{
    fputs("<h2>Per prompt: solve rate and pass@k</h2>\n", f);
    bars(f, rt->prompts, "prompt_id", "solve_rate", "#1f77b4");
    html_table(f, rt->prompts, NULL);
    fputs("<h2>Per verifier: pass rate and latency (ms)</h2>\n", f);
    bars(f, rt->verifiers, "verifier", "pass_rate", "#9467bd");
    html_table(f, rt->verifiers, NULL);
    if (rt->workers && rt->workers->n_rows > 0) {
        fputs("<h2>Per worker</h2>\n", f);
        html_table(f, rt->workers, NULL);
    }
}

static int
write_report(const char *path, const char *db, const grpo_stats_table *t, const report_tables *rt)
{
    static const char *const run_cols[] = {
        "run_id",      "status",       "started_at",     "command_line",
        "host",        "grpo_version", "repo_commit",    "repo_branch",
        "repo_dirty",  "dataset_path", "dataset_commit", "groups",
        "completions", "first_step",   "last_step",      NULL};
    static const series reward[] = {
        {"reward_mean", "mean (band: +/- std)", "#1f77b4", "reward_std"}};
    static const series length[] = {{"len_mean", "mean", "#2ca02c", NULL},
                                    {"len_p50", "p50", "#ff7f0e", NULL},
                                    {"len_p95", "p95", "#d62728", NULL}};
    static const series frac[] = {{"pass_rate", "pass rate", "#9467bd", NULL},
                                  {"frac_reward_zero_std", "zero-std groups", "#8c564b", NULL},
                                  {"frac_truncated", "cut at max length", "#e377c2", NULL}};
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        fprintf(stderr, "grpo stats: %s: cannot write the report: %s\n", path, strerror(errno));
        return CLI_FAIL;
    }
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>grpo run "
          "report</title>\n<style>body{font-family:sans-serif;margin:2em;color:#222}"
          "figure{margin:1em 0}figcaption{font-weight:bold;margin-bottom:.3em}"
          "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;"
          "padding:2px 6px;text-align:right}</style>\n</head><body>\n<h1>grpo run report</h1>\n"
          "<p>database: <code>",
          f);
    html_escape(db, f);
    fprintf(f, "</code>; %d step rows; made by grpo %s</p>\n", (int)t->n_rows, grpo_version());
    fputs("<h2>Runs</h2>\n", f);
    html_table(f, rt->runs, run_cols);
    chart(f, t, "Reward mean against step", reward, 1);
    chart(f, t, "Completion length (tokens) against step", length, 3);
    chart(f, t, "Fractions against step", frac, 3);
    report_sections(f, rt);
    fputs("<h2>Per step</h2>\n", f);
    html_table(f, t, NULL);
    fputs("</body></html>\n", f);
    if (fclose(f) != 0) {
        fprintf(stderr, "grpo stats: %s: writing the report failed: %s\n", path, strerror(errno));
        return CLI_FAIL;
    }
    return CLI_OK;
}

/* ---- the command
 * --------------------------------------------------------------------------------
 */

typedef struct stats_args {
    const char *db, *format, *report;
    grpo_stats_opts o;
} stats_args;

/* One option; returns 0, or CLI_USAGE with the message printed. */
static int
parse_opt(stats_args *a, int c, const char *v)
{
    static const char *const bys[] = {"step", "verifier", "prompt", "worker", "run"};
    int64_t n;
    switch (c) {
    case 'd':
        a->db = v;
        return 0;
    case 'b':
        for (int i = 0; i < 5; i++)
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
    case 'r':
        if (parse_i64(v, &n) != 0 || n <= 0)
            return cli_usage("stats", "--run: \"%s\" is not a positive run id", v);
        a->o.run_id = n;
        return 0;
    case 'k':
        if (parse_i64(v, &n) != 0 || n <= 0 || n > 1000000)
            return cli_usage("stats", "--k: \"%s\" is not a positive integer", v);
        a->o.pass_k = (int32_t)n;
        return 0;
    case 'o':
        a->report = v;
        return 0;
    default:
        return cli_usage("stats", "unknown or incomplete option \"%s\"", v);
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
    for (int32_t i = 0; err == GRPO_OK && i < t->n_rows; i++)
        found |= (int64_t)num(t, i, "run_id") == a->o.run_id;
    if (err == GRPO_OK && !found)
        err = grpo__fail(GRPO_ENOTFOUND, "%s: no run %lld (the store has %d; see --by run)", a->db,
                         (long long)a->o.run_id, (int)t->n_rows);
    grpo_stats_table_free(t);
    return err;
}

/* The report's other tables, with a->o's run and step filters. */
static grpo_err
query_report(grpo_store *s, const stats_args *a, report_tables *rt)
{
    static const grpo_stats_by bys[] = {GRPO_STATS_BY_RUN, GRPO_STATS_BY_PROMPT,
                                        GRPO_STATS_BY_VERIFIER, GRPO_STATS_BY_WORKER};
    grpo_stats_table **outs[] = {&rt->runs, &rt->prompts, &rt->verifiers, &rt->workers};
    grpo_err err = GRPO_OK;
    for (int k = 0; k < 4 && err == GRPO_OK; k++) {
        grpo_stats_opts o = a->o;
        o.by = bys[k];
        err = grpo_store_stats(outs[k], s, &o);
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
    if ((err = grpo_store_open(&s, a->db, &so)) == GRPO_OK && (err = check_run(s, a)) == GRPO_OK &&
        (err = grpo_store_stats(t, s, &a->o)) == GRPO_OK && a->report)
        err = query_report(s, a, rt);
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
        rc = write_report(a.report, a.db, t, &rt);
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
