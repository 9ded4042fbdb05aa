/* `grpo stats --report`: one self-contained HTML file (inline CSS and SVG, no script, nothing
 * fetched) with the run's charts and tables. Every chart draws a mark per value, so a one-step run
 * shows; a degenerate range (all values equal, a single point) gets a padded axis, and an empty
 * one a "no data" line. All text written is escaped and valid UTF-8. */
#include "cli/stats_report.h"

#include "cli/cli.h"
#include "common/common_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const grpo_stats_by report_bys[REPORT_N_TABLES] = {
    GRPO_STATS_BY_STEP,        GRPO_STATS_BY_RUN,         GRPO_STATS_BY_PROMPT,
    GRPO_STATS_BY_VERIFIER,    GRPO_STATS_BY_WORKER,      GRPO_STATS_BY_FINISH,
    GRPO_STATS_BY_REWARD_HIST, GRPO_STATS_BY_LENGTH_HIST, GRPO_STATS_BY_TIME,
    GRPO_STATS_BY_KL,          GRPO_STATS_BY_EXAMPLE};

void
report_table_slots(report_tables *r, grpo_stats_table **slots[REPORT_N_TABLES])
{
    grpo_stats_table **s[REPORT_N_TABLES] = {
        &r->steps,       &r->runs,        &r->prompts, &r->verifiers, &r->workers, &r->finish,
        &r->reward_hist, &r->length_hist, &r->time,    &r->kl,        &r->examples};
    memcpy(slots, s, sizeof s);
}

void
report_tables_free(report_tables *r)
{
    grpo_stats_table **slots[REPORT_N_TABLES];
    report_table_slots(r, slots);
    for (int k = 0; k < REPORT_N_TABLES; k++)
        grpo_stats_table_free(*slots[k]), *slots[k] = NULL;
}

void
stats_cell_text(const grpo_stats_cell *c, char *buf, size_t n, int exact)
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
        buf[grpo__utf8_valid_len(buf, strlen(buf))] = '\0'; /* no character cut in half */
        break;
    default:
        buf[0] = '\0';
    }
}

/* ---- table access ------------------------------------------------------------------------ */

static int
col_index(const grpo_stats_table *t, const char *name)
{
    for (int32_t j = 0; t && j < t->n_cols; j++)
        if (strcmp(t->cols[j], name) == 0)
            return j;
    return -1;
}

static const grpo_stats_cell *
cell(const grpo_stats_table *t, int32_t i, const char *name)
{
    int j = col_index(t, name);
    return j < 0 ? NULL : &t->cells[(size_t)i * t->n_cols + j];
}

/* Cell (i, name) as a double; NAN when missing. */
static double
num(const grpo_stats_table *t, int32_t i, const char *name)
{
    const grpo_stats_cell *c = cell(t, i, name);
    if (c == NULL)
        return NAN;
    return c->type == GRPO_STATS_INT ? (double)c->i : c->type == GRPO_STATS_REAL ? c->r : NAN;
}

static const char *
str(const grpo_stats_table *t, int32_t i, const char *name)
{
    const grpo_stats_cell *c = cell(t, i, name);
    return c && c->type == GRPO_STATS_TEXT ? c->s : "";
}

static int
n_rows(const grpo_stats_table *t)
{
    return t ? t->n_rows : 0;
}

/* ---- HTML text --------------------------------------------------------------------------- */

/* s escaped for HTML text or attributes, as valid UTF-8 (U+FFFD for invalid bytes and for
 * control characters other than newline and tab). */
static void
html_text(FILE *f, const char *s)
{
    size_t n = strlen(s);
    char *v = grpo__utf8_valid(s, n) ? NULL : grpo__utf8_sanitize(s, n, NULL);
    if (v == NULL && !grpo__utf8_valid(s, n))
        return; /* out of memory */
    for (const unsigned char *p = (const unsigned char *)(v ? v : s); *p; p++) {
        if (*p == '<')
            fputs("&lt;", f);
        else if (*p == '>')
            fputs("&gt;", f);
        else if (*p == '&')
            fputs("&amp;", f);
        else if (*p == '"')
            fputs("&quot;", f);
        else if (*p == '\'')
            fputs("&#39;", f);
        else if (*p < 0x20 && *p != '\n' && *p != '\t')
            fputs("\xef\xbf\xbd", f);
        else
            fputc(*p, f);
    }
    free(v);
}

/* A number for a label: no exponent for the sizes a run has (counts, rates, fractions). */
static void
fmt_num(char *buf, size_t n, double v)
{
    if (isnan(v))
        snprintf(buf, n, "-");
    else if (fabs(v) >= 1e4)
        snprintf(buf, n, "%.0f", v);
    else
        snprintf(buf, n, "%.3g", v);
}

/* Writes table t as an HTML table, with only the columns named in cols (NULL: all). */
static void
html_table(FILE *f, const grpo_stats_table *t, const char *const *cols)
{
    char buf[256];
    int idx[64], n = 0;
    for (int32_t j = 0; t && j < t->n_cols && n < 64; j++) {
        int keep = cols == NULL;
        for (int k = 0; cols && cols[k]; k++)
            keep |= strcmp(cols[k], t->cols[j]) == 0;
        if (keep)
            idx[n++] = j;
    }
    fputs("<table><tr>", f);
    for (int k = 0; k < n; k++) {
        fputs("<th>", f);
        html_text(f, t->cols[idx[k]]);
        fputs("</th>", f);
    }
    fputs("</tr>\n", f);
    for (int32_t i = 0; i < n_rows(t); i++) {
        fputs("<tr>", f);
        for (int k = 0; k < n; k++) {
            stats_cell_text(&t->cells[(size_t)i * t->n_cols + idx[k]], buf, sizeof buf, 0);
            fputs("<td>", f);
            html_text(f, buf);
            fputs("</td>", f);
        }
        fputs("</tr>\n", f);
    }
    fputs("</table>\n", f);
}

static void
no_data(FILE *f, const char *why)
{
    fputs("<p class=\"nodata\">no data: ", f);
    html_text(f, why);
    fputs("</p>\n", f);
}

/* ---- axes -------------------------------------------------------------------------------- */

enum { W = 720, H = 300, ML = 60, MR = 160, MT = 30, MB = 40 };
#define PW ((double)(W - ML - MR))
#define PH ((double)(H - MT - MB))

static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                      "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};

static double
nice_step(double span, int ticks)
{
    double raw = span / ticks, mag = pow(10, floor(log10(raw))), r = raw / mag;
    return (r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10) * mag;
}

/* Pads a range whose ends are equal (or equal to 1e-9 relative: float noise) around its middle,
 * to [0, 1] when it is all zeros. */
static void
widen(double *lo, double *hi)
{
    double a = fmax(fabs(*lo), fabs(*hi));
    if (*hi > *lo && *hi - *lo > 1e-9 * a)
        return;
    double m = (*lo + *hi) / 2;
    if (m == 0)
        *lo = 0, *hi = 1;
    else
        *lo = m - fabs(m) * 0.1, *hi = m + fabs(m) * 0.1;
}

/* A tick label: the value k * step, printed with the step's decimals (so no 5.55e-17). */
static void
tick_label(char *buf, size_t n, double v, double step)
{
    if (fabs(v) < step * 1e-6)
        v = 0;
    int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    if (dec > 8 || fabs(v) >= 1e9)
        snprintf(buf, n, "%.3g", v);
    else
        snprintf(buf, n, "%.*f", dec, v);
}

typedef struct {
    double x0, x1, y0, y1, xs, ys;
} frame;

static double
px(const frame *fr, double x)
{
    return ML + (x - fr->x0) / (fr->x1 - fr->x0) * PW;
}

static double
py(const frame *fr, double y)
{
    return MT + (1 - (y - fr->y0) / (fr->y1 - fr->y0)) * PH;
}

static void
svg_open(FILE *f, const char *cls, const char *title)
{
    fputs("<figure><figcaption>", f);
    html_text(f, title);
    fprintf(f,
            "</figcaption>\n<svg class=\"%s\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
            "height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\">\n",
            cls, W, H, W, H);
}

/* The y grid and ticks (from y0 by index), and the x label. */
static void
y_axis(FILE *f, const frame *fr, const char *x_label)
{
    char lab[64];
    fprintf(f,
            "<rect x=\"%d\" y=\"%d\" width=\"%g\" height=\"%g\" fill=\"#fff\" stroke=\"#888\"/>\n",
            ML, MT, PW, PH);
    for (int k = 0; fr->y0 + k * fr->ys <= fr->y1 + fr->ys * 1e-9; k++) {
        double y = fr->y0 + k * fr->ys;
        tick_label(lab, sizeof lab, y, fr->ys);
        fprintf(f,
                "<line x1=\"%d\" x2=\"%g\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                "<text class=\"tick\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\" "
                "font-size=\"11\">%s</text>\n",
                ML, ML + PW, py(fr, y), py(fr, y), ML - 5, py(fr, y) + 4, lab);
    }
    fprintf(f, "<text x=\"%g\" y=\"%d\" text-anchor=\"middle\" font-size=\"12\">", ML + PW / 2,
            H - 6);
    html_text(f, x_label);
    fputs("</text>\n", f);
}

static void
x_ticks(FILE *f, const frame *fr)
{
    char lab[64];
    double first = ceil(fr->x0 / fr->xs - 1e-9) * fr->xs;
    for (int k = 0; first + k * fr->xs <= fr->x1 + fr->xs * 1e-9; k++) {
        double x = first + k * fr->xs;
        tick_label(lab, sizeof lab, x, fr->xs);
        fprintf(f,
                "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%g\" y2=\"%g\" stroke=\"#888\"/>"
                "<text class=\"tick\" x=\"%.1f\" y=\"%g\" text-anchor=\"middle\" "
                "font-size=\"11\">%s</text>\n",
                px(fr, x), px(fr, x), MT + PH, MT + PH + 4, px(fr, x), MT + PH + 16, lab);
    }
}

static void
legend(FILE *f, int k, const char *color, const char *label)
{
    fprintf(f,
            "<line x1=\"%g\" x2=\"%g\" y1=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"3\"/>"
            "<text x=\"%g\" y=\"%d\" font-size=\"12\">",
            ML + PW + 10, ML + PW + 30, MT + 10 + 18 * k, MT + 10 + 18 * k, color, ML + PW + 35,
            MT + 14 + 18 * k);
    html_text(f, label);
    fputs("</text>\n", f);
}

/* ---- line charts ------------------------------------------------------------------------- */

typedef struct {
    const char *col, *label, *color;
    const char *band_col; /* draw col +/- band_col as a shaded band, or NULL */
} series;

typedef struct {
    const char *title, *x_label;
    const char *x_col, *x_col2; /* x is x_col, or the middle of x_col and x_col2 */
    int x_integer;              /* ticks at whole numbers only */
    const series *sv;
    int ns;
} chart_spec;

static double
xval(const grpo_stats_table *t, int32_t i, const chart_spec *c)
{
    double x = num(t, i, c->x_col);
    return c->x_col2 ? (x + num(t, i, c->x_col2)) / 2 : x;
}

/* The data's range, padded when degenerate, on nice steps; 0 when nothing is finite. */
static int
chart_frame(const grpo_stats_table *t, const chart_spec *c, frame *fr)
{
    *fr = (frame){INFINITY, -INFINITY, INFINITY, -INFINITY, 0, 0};
    for (int32_t i = 0; i < n_rows(t); i++)
        for (int k = 0; k < c->ns; k++) {
            double x = xval(t, i, c), y = num(t, i, c->sv[k].col);
            double b = c->sv[k].band_col ? num(t, i, c->sv[k].band_col) : 0;
            if (!isfinite(y) || !isfinite(x))
                continue;
            b = isfinite(b) ? b : 0;
            fr->x0 = fmin(fr->x0, x), fr->x1 = fmax(fr->x1, x);
            fr->y0 = fmin(fr->y0, y - b), fr->y1 = fmax(fr->y1, y + b);
        }
    if (!isfinite(fr->x0))
        return 0;
    if (fr->x1 <= fr->x0) /* one point: centred */
        fr->x0 -= 1, fr->x1 += 1;
    widen(&fr->y0, &fr->y1);
    fr->ys = nice_step(fr->y1 - fr->y0, 5), fr->xs = nice_step(fr->x1 - fr->x0, 8);
    if (c->x_integer && fr->xs < 1)
        fr->xs = 1;
    fr->y0 = floor(fr->y0 / fr->ys) * fr->ys, fr->y1 = ceil(fr->y1 / fr->ys) * fr->ys;
    return 1;
}

static void
band(FILE *f, const grpo_stats_table *t, const chart_spec *c, const series *s, const frame *fr)
{
    fprintf(f, "<polygon fill=\"%s\" fill-opacity=\"0.15\" stroke=\"none\" points=\"", s->color);
    for (int32_t i = 0; i < n_rows(t); i++) {
        double y = num(t, i, s->col), b = num(t, i, s->band_col);
        if (isfinite(y) && isfinite(b))
            fprintf(f, "%.1f,%.1f ", px(fr, xval(t, i, c)), py(fr, y + b));
    }
    for (int32_t i = n_rows(t) - 1; i >= 0; i--) {
        double y = num(t, i, s->col), b = num(t, i, s->band_col);
        if (isfinite(y) && isfinite(b))
            fprintf(f, "%.1f,%.1f ", px(fr, xval(t, i, c)), py(fr, y - b));
    }
    fputs("\"/>\n", f);
}

static int run_slot(const grpo_stats_table *t, int64_t r, int *n);

/* The colour of row i: the series', or with per_run the run's. */
static const char *
color_of(const grpo_stats_table *t, int32_t i, const series *s, int per_run)
{
    int nr;
    return per_run ? palette[run_slot(t, (int64_t)num(t, i, "run_id"), &nr) % 8] : s->color;
}

/* One polyline per run (runs are not joined), then a mark per value; per_run: a colour per run
 * instead of the series'. */
static void
line(FILE *f, const grpo_stats_table *t, const chart_spec *c, const series *s, const frame *fr,
     int per_run)
{
    int64_t run = INT64_MIN;
    int open = 0;
    char v[64];
    for (int32_t i = 0; i < n_rows(t); i++) {
        double x = xval(t, i, c), y = num(t, i, s->col);
        int64_t r = (int64_t)num(t, i, "run_id");
        if (!isfinite(y) || !isfinite(x))
            continue;
        if (r != run && open)
            fputs("\"/>\n", f), open = 0;
        if (!open)
            fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"",
                    color_of(t, i, s, per_run));
        open = 1, run = r;
        fprintf(f, "%.1f,%.1f ", px(fr, x), py(fr, y));
    }
    if (open)
        fputs("\"/>\n", f);
    for (int32_t i = 0; i < n_rows(t); i++) {
        double x = xval(t, i, c), y = num(t, i, s->col);
        if (!isfinite(y) || !isfinite(x))
            continue;
        fmt_num(v, sizeof v, y);
        fprintf(f,
                "<circle class=\"pt\" cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\">"
                "<title>run %lld: %s</title></circle>\n",
                px(fr, x), py(fr, y), color_of(t, i, s, per_run), (long long)num(t, i, "run_id"),
                v);
    }
}

static void
chart(FILE *f, const grpo_stats_table *t, const chart_spec *c)
{
    frame fr;
    if (!chart_frame(t, c, &fr)) {
        fputs("<figure><figcaption>", f);
        html_text(f, c->title);
        fputs("</figcaption>\n", f);
        no_data(f, "no value to draw in the selection");
        fputs("</figure>\n", f);
        return;
    }
    int nr;
    run_slot(t, 0, &nr);
    int per_run = c->ns == 1 && nr > 1; /* one series: tell the runs apart by colour */
    svg_open(f, "chart", c->title);
    y_axis(f, &fr, c->x_label);
    x_ticks(f, &fr);
    for (int k = 0; k < c->ns; k++) {
        if (c->sv[k].band_col)
            band(f, t, c, &c->sv[k], &fr);
        line(f, t, c, &c->sv[k], &fr, per_run);
        if (!per_run)
            legend(f, k, c->sv[k].color, c->sv[k].label);
    }
    for (int32_t i = 0, r = 0; per_run && i < n_rows(t); i++) {
        char lab[160];
        if (i > 0 && num(t, i, "run_id") == num(t, i - 1, "run_id"))
            continue;
        snprintf(lab, sizeof lab, "%s, run %lld", c->sv[0].label, (long long)num(t, i, "run_id"));
        legend(f, r, palette[r % 8], lab), r++;
    }
    fputs("</svg></figure>\n", f);
}

/* ---- histograms -------------------------------------------------------------------------- */

/* Index of run r among the histogram's runs (in row order), counting them into *n. */
static int
run_slot(const grpo_stats_table *t, int64_t r, int *n)
{
    int64_t seen[64];
    int k = 0;
    *n = 0;
    for (int32_t i = 0; i < n_rows(t); i++) {
        int64_t x = (int64_t)num(t, i, "run_id");
        if (*n == 0 || (seen[*n - 1] != x && *n < 64))
            seen[(*n)++] = x;
    }
    for (k = 0; k < *n; k++)
        if (seen[k] == r)
            return k;
    return 0;
}

/* A bin's label: its value, an inclusive integer range, or [lo, hi) ([lo, hi] for the last). */
static void
bin_label(char *buf, size_t n, double lo, double hi, int integer, int last)
{
    char a[32], b[32];
    fmt_num(a, sizeof a, lo);
    fmt_num(b, sizeof b, hi);
    if (lo == hi)
        snprintf(buf, n, "%s", a);
    else if (integer)
        snprintf(buf, n, "%s-%s", a, b);
    else
        snprintf(buf, n, "[%s, %s%c", a, b, last ? ']' : ')');
}

static void
hist_bars(FILE *f, const grpo_stats_table *t, const frame *fr, int nb, int integer)
{
    char lab[96];
    int nr;
    run_slot(t, 0, &nr);
    double slot = PW / nb, bw = slot * 0.9 / nr;
    int every = (nb + 7) / 8;
    for (int32_t i = 0; i < n_rows(t); i++) {
        int b = (int)num(t, i, "bin"), r = run_slot(t, (int64_t)num(t, i, "run_id"), &nr);
        double n = num(t, i, "n"), lo = num(t, i, "lo"), hi = num(t, i, "hi");
        double x = ML + b * slot + slot * 0.05 + r * bw;
        bin_label(lab, sizeof lab, lo, hi, integer, b == nb - 1);
        fprintf(f,
                "<rect class=\"hbar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                "fill=\"%s\"><title>run %lld, %s: %.0f</title></rect>\n",
                x, py(fr, n), bw, py(fr, 0) - py(fr, n), palette[r % 8],
                (long long)num(t, i, "run_id"), lab, n);
        if (r == 0 && b % every == 0)
            fprintf(f,
                    "<text class=\"tick\" x=\"%.1f\" y=\"%g\" text-anchor=\"middle\" "
                    "font-size=\"11\">%s</text>\n",
                    ML + (b + 0.5) * slot, MT + PH + 16, lab);
    }
}

/* Bars of count n per bin, one colour per run; the y axis counts from 0. */
static void
histogram(FILE *f, const grpo_stats_table *t, const char *title, const char *x_label, int integer)
{
    double top = 0;
    int nb = 0, nr;
    for (int32_t i = 0; i < n_rows(t); i++)
        top = fmax(top, num(t, i, "n")), nb = (int)fmax(nb, num(t, i, "bin") + 1);
    if (n_rows(t) == 0 || top <= 0) {
        fputs("<figure><figcaption>", f);
        html_text(f, title);
        fputs("</figcaption>\n", f);
        no_data(f, "no completion in the selection");
        fputs("</figure>\n", f);
        return;
    }
    frame fr = {0, 1, 0, top, 1, fmax(1, nice_step(top, 5))};
    fr.y1 = ceil(top / fr.ys) * fr.ys;
    svg_open(f, "hist", title);
    y_axis(f, &fr, x_label);
    hist_bars(f, t, &fr, nb, integer);
    run_slot(t, 0, &nr);
    int64_t prev = INT64_MIN;
    for (int32_t i = 0, r = -1; i < n_rows(t) && nr > 1; i++) {
        char lab[32];
        int64_t id = (int64_t)num(t, i, "run_id");
        if (id == prev)
            continue;
        prev = id, r++;
        snprintf(lab, sizeof lab, "run %lld", (long long)id);
        legend(f, r, palette[r % 8], lab);
    }
    fputs("</svg></figure>\n", f);
}

/* ---- horizontal bars --------------------------------------------------------------------- */

/* One bar per row of t: column col / scale (so a fraction when scale is 1), labelled by the
 * label_cols' cells (run_id as "run N"). */
static void
bars(FILE *f, const grpo_stats_table *t, const char *const *label_cols, const char *col,
     double scale, const char *color)
{
    enum { BW = 480, BH = 16, LW = 170 };
    char label[256], part[128], v[64];
    fprintf(
        f, "<svg class=\"bars\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\">\n",
        LW + BW + 80, n_rows(t) * (BH + 4) + 4);
    for (int32_t i = 0; i < n_rows(t); i++) {
        double x = num(t, i, col), w = isfinite(x) && scale > 0 ? fmax(0, x / scale) * BW : 0;
        double y = 2 + i * (BH + 4);
        label[0] = '\0';
        for (int k = 0; label_cols[k]; k++) {
            const grpo_stats_cell *c = cell(t, i, label_cols[k]);
            stats_cell_text(c ? c : &(grpo_stats_cell){0}, part, sizeof part, 0);
            snprintf(label + strlen(label), sizeof label - strlen(label), "%s%s%s", k ? " " : "",
                     strcmp(label_cols[k], "run_id") ? "" : "run ", part);
        }
        fmt_num(v, sizeof v, x);
        fprintf(f, "<text x=\"%d\" y=\"%.0f\" text-anchor=\"end\" font-size=\"11\">", LW - 6,
                y + BH - 4);
        html_text(f, label);
        fprintf(f,
                "</text><rect class=\"bar\" x=\"%d\" y=\"%.0f\" width=\"%.1f\" height=\"%d\" "
                "fill=\"%s\"/><text x=\"%.1f\" y=\"%.0f\" font-size=\"11\">%s</text>\n",
                LW, y, w, BH, color, LW + w + 4, y + BH - 4, v);
    }
    fputs("</svg>\n", f);
}

/* ---- sections ---------------------------------------------------------------------------- */

static void
step_charts(FILE *f, const grpo_stats_table *t)
{
    static const series reward[] = {
        {"reward_mean", "mean (band: +/- std)", "#1f77b4", "reward_std"}};
    static const series length[] = {{"len_mean", "mean", "#2ca02c", NULL},
                                    {"len_p50", "p50", "#ff7f0e", NULL},
                                    {"len_p95", "p95", "#d62728", NULL}};
    static const series frac[] = {{"pass_rate", "pass rate", "#9467bd", NULL},
                                  {"frac_reward_zero_std", "zero-std groups", "#8c564b", NULL},
                                  {"frac_truncated", "cut at max length", "#e377c2", NULL}};
    const chart_spec specs[] = {
        {"Reward mean against step", "step", "step", NULL, 1, reward, 1},
        {"Completion length (tokens) against step", "step", "step", NULL, 1, length, 3},
        {"Fractions against step", "step", "step", NULL, 1, frac, 3}};
    for (int k = 0; k < 3; k++)
        chart(f, t, &specs[k]);
}

static void
distributions(FILE *f, const report_tables *rt)
{
    static const char *const one[] = {"finish_reason", NULL}, *const many[] = {
                                                                  "run_id", "finish_reason", NULL};
    fputs("<h2>Distributions: reward, completion length, finish reasons</h2>\n", f);
    histogram(f, rt->reward_hist, "Reward of each completion", "reward", 0);
    histogram(f, rt->length_hist, "Completion length", "tokens", 1);
    fputs("<h3>Finish reasons (fraction of completions)</h3>\n", f);
    if (n_rows(rt->finish) == 0) {
        no_data(f, "no completion in the selection");
        return;
    }
    bars(f, rt->finish, n_rows(rt->runs) > 1 ? many : one, "frac", 1, "#17becf");
    html_table(f, rt->finish, NULL);
}

static void
throughput(FILE *f, const grpo_stats_table *t)
{
    static const series tok[] = {{"tokens_per_s", "tokens/s", "#2ca02c", NULL}};
    static const series comp[] = {{"completions_per_s", "completions/s", "#1f77b4", NULL}};
    const char *x = "seconds since the run's first group started";
    const chart_spec specs[] = {
        {"Generated tokens per second over the run", x, "t_start_s", "t_end_s", 0, tok, 1},
        {"Completions per second over the run", x, "t_start_s", "t_end_s", 0, comp, 1}};
    fputs("<h2>Throughput over time</h2>\n<p>Each group's completions and tokens are spread over "
          "its own start-to-finish span; a mark per time bin.</p>\n",
          f);
    for (int k = 0; k < 2; k++)
        chart(f, t, &specs[k]);
}

static int
pooled(const grpo_stats_table *w)
{
    for (int32_t i = 0; i < n_rows(w); i++)
        if (strcmp(str(w, i, "worker"), "(local)") != 0)
            return 1;
    return 0;
}

/* The per-prompt, per-verifier and per-worker sections. */
static void
per_key(FILE *f, const report_tables *rt)
{
    static const char *const prompt[] = {"prompt_id", NULL}, *const verifier[] = {"verifier", NULL};
    static const char *const worker[] = {"run_id", "worker", NULL};
    fputs("<h2>Per prompt: solve rate and pass@k</h2>\n", f);
    bars(f, rt->prompts, prompt, "solve_rate", 1, "#1f77b4");
    html_table(f, rt->prompts, NULL);
    fputs("<h2>Per verifier: pass rate and latency (ms)</h2>\n", f);
    bars(f, rt->verifiers, verifier, "pass_rate", 1, "#9467bd");
    html_table(f, rt->verifiers, NULL);
    fputs("<h2>Per worker</h2>\n", f);
    if (pooled(rt->workers)) {
        double top = 0;
        for (int32_t i = 0; i < n_rows(rt->workers); i++)
            top = fmax(top, num(rt->workers, i, "tokens_per_s"));
        fputs("<h3>Generated tokens per second, per worker</h3>\n", f);
        bars(f, rt->workers, worker, "tokens_per_s", top, "#ff7f0e");
    } else {
        fputs("<p>One in-process worker (no <code>grpo serve</code> pool).</p>\n", f);
    }
    html_table(f, rt->workers, NULL);
}

static void
kl_section(FILE *f, const grpo_stats_table *t)
{
    static const series kl[] = {{"kl_per_token", "KL per token (k3)", "#d62728", NULL},
                                {"kl_max", "KL max", "#ff7f0e", NULL},
                                {"logprob_gap", "logprob gap per token", "#1f77b4", NULL}};
    const chart_spec spec = {
        "KL to the reference policy against step", "step", "step", NULL, 1, kl, 3};
    fputs("<h2>KL and logprob mismatch to the reference policy</h2>\n", f);
    if (n_rows(t) == 0) {
        no_data(f, "no completion in the selection was sampled with a reference policy "
                   "(grpo rollout --ref-model)");
        return;
    }
    chart(f, t, &spec);
    html_table(f, t, NULL);
}

static void
example(FILE *f, const grpo_stats_table *t, int32_t i)
{
    char meta[512];
    snprintf(meta, sizeof meta,
             "completion %lld: step %lld, prompt %lld, sample %lld, reward %.4g, finish %s, "
             "%lld tokens, label ",
             (long long)num(t, i, "completion_id"), (long long)num(t, i, "step"),
             (long long)num(t, i, "prompt_id"), (long long)num(t, i, "sample_index"),
             num(t, i, "reward"), str(t, i, "finish_reason"), (long long)num(t, i, "n_tokens"));
    fputs("<div class=\"ex\"><p class=\"meta\">", f);
    html_text(f, meta);
    html_text(f, str(t, i, "label")[0] ? str(t, i, "label") : "-");
    fputs("</p><pre>", f);
    html_text(f, str(t, i, "text")[0] ? str(t, i, "text") : "(empty)");
    fputs("</pre>", f);
    if (num(t, i, "text_cut") == 1)
        fprintf(f, "<p class=\"cut\">[&#8230; cut here: the first %zu bytes of %lld shown]</p>",
                strlen(str(t, i, "text")), (long long)num(t, i, "text_bytes"));
    fputs("</div>\n", f);
}

static void
examples_section(FILE *f, const grpo_stats_table *t)
{
    char head[512];
    fputs("<h2>Example completions per verdict</h2>\n", f);
    if (n_rows(t) == 0) {
        no_data(f, "no verdict recorded in the selection");
        return;
    }
    for (int32_t i = 0; i < n_rows(t); i++) {
        if (num(t, i, "rank") == 1) {
            snprintf(head, sizeof head, "run %lld: %s, %s (%lld verdicts)",
                     (long long)num(t, i, "run_id"), str(t, i, "verifier"), str(t, i, "kind"),
                     (long long)num(t, i, "verdicts"));
            fputs("<h3>", f);
            html_text(f, head);
            fputs("</h3>\n", f);
        }
        example(f, t, i);
    }
}

static const char style[] =
    "<style>body{font-family:sans-serif;margin:2em;color:#222;max-width:1100px}"
    "figure{margin:1em 0}figcaption{font-weight:bold;margin-bottom:.3em}"
    "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;"
    "padding:2px 6px;text-align:right}.nodata{color:#a00;font-style:italic}"
    ".ex{border-left:3px solid #ccc;margin:.5em 0;padding-left:.6em}"
    ".ex .meta{font-size:12px;color:#555;margin:0}"
    ".ex pre{white-space:pre-wrap;word-break:break-all;max-height:12em;overflow:auto;"
    "background:#f6f6f6;padding:.4em;margin:.2em 0;font-size:12px}"
    ".cut{font-size:12px;color:#a00;margin:0}</style>\n";

static void
report_body(FILE *f, const char *db, const report_tables *rt)
{
    static const char *const run_cols[] = {
        "run_id",      "status",       "started_at",     "command_line",
        "host",        "grpo_version", "repo_commit",    "repo_branch",
        "repo_dirty",  "dataset_path", "dataset_commit", "groups",
        "completions", "first_step",   "last_step",      NULL};
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>grpo run "
          "report</title>\n",
          f);
    fputs(style, f);
    fputs("</head><body>\n<h1>grpo run report</h1>\n<p>database: <code>", f);
    html_text(f, db);
    fprintf(f, "</code>; %d step rows; made by grpo ", n_rows(rt->steps));
    html_text(f, grpo_version());
    fputs("</p>\n<h2>Runs</h2>\n", f);
    html_table(f, rt->runs, run_cols);
    step_charts(f, rt->steps);
    distributions(f, rt);
    throughput(f, rt->time);
    per_key(f, rt);
    kl_section(f, rt->kl);
    examples_section(f, rt->examples);
    fputs("<h2>Per step</h2>\n", f);
    html_table(f, rt->steps, NULL);
    fputs("</body></html>\n", f);
}

int
report_write(const char *path, const char *db, const report_tables *rt)
{
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        fprintf(stderr, "grpo stats: %s: cannot write the report: %s\n", path, strerror(errno));
        return CLI_FAIL;
    }
    report_body(f, db, rt);
    if (ferror(f) | (fclose(f) != 0)) {
        fprintf(stderr, "grpo stats: %s: writing the report failed: %s\n", path, strerror(errno));
        return CLI_FAIL;
    }
    return CLI_OK;
}
