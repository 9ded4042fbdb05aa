/* `grpo stats` queries: runs one of the *_stats views of schemas/003_stats.sql (re-run with its
 * stats_* inputs bound to a run and a step range when asked) and returns the rows as a table.
 * Also the SQL functions those queries need. */
#include "store/store_int.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

double
grpo_pass_at_k(int64_t n, int64_t c, int64_t k)
{
    if (n <= 0 || k <= 0 || k > n || c < 0 || c > n)
        return NAN;
    if (n - c < k)
        return 1.0;
    /* C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i), which never overflows. */
    double miss = 1.0;
    for (int64_t i = n - c + 1; i <= n; i++)
        miss *= 1.0 - (double)k / (double)i;
    return 1.0 - miss;
}

static void
sql_pass_at_k(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    for (int i = 0; i < 3; i++)
        if (sqlite3_value_type(argv[i]) == SQLITE_NULL) {
            sqlite3_result_null(ctx);
            return;
        }
    double r = grpo_pass_at_k(sqlite3_value_int64(argv[0]), sqlite3_value_int64(argv[1]),
                              sqlite3_value_int64(argv[2]));
    if (isnan(r))
        sqlite3_result_null(ctx);
    else
        sqlite3_result_double(ctx, r);
}

static void
sql_sqrt(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    if (sqlite3_value_type(argv[0]) == SQLITE_NULL)
        sqlite3_result_null(ctx);
    else
        sqlite3_result_double(ctx, sqrt(sqlite3_value_double(argv[0])));
}

grpo_err
grpo_store__register_functions(grpo_store *s)
{
    int flags = SQLITE_UTF8 | SQLITE_DETERMINISTIC;
    int rc =
        sqlite3_create_function(s->db, "grpo_pass_at_k", 3, flags, NULL, sql_pass_at_k, NULL, NULL);
    /* SQLite built without SQLITE_ENABLE_MATH_FUNCTIONS has no sqrt(); the views need one. */
    sqlite3_stmt *probe = NULL;
    if (rc == SQLITE_OK &&
        sqlite3_prepare_v2(s->db, "SELECT sqrt(4)", -1, &probe, NULL) != SQLITE_OK)
        rc = sqlite3_create_function(s->db, "sqrt", 1, flags, NULL, sql_sqrt, NULL, NULL);
    sqlite3_finalize(probe);
    return rc == SQLITE_OK ? GRPO_OK : grpo_store__db_fail(s, rc, "registering SQL functions");
}

static const char *const view_names[] = {"step_stats", "verifier_stats", "prompt_stats",
                                         "worker_stats", "run_stats"};

static const char *const filtered_inputs =
    "stats_groups AS (SELECT * FROM groups WHERE (?1 <= 0 OR run_id = ?1)"
    " AND step BETWEEN ?2 AND ?3),"
    " stats_completions AS (SELECT * FROM completions WHERE (?1 <= 0 OR run_id = ?1)"
    " AND step BETWEEN ?2 AND ?3),"
    " stats_rewards AS (SELECT * FROM rewards WHERE (?1 <= 0 OR run_id = ?1)"
    " AND step BETWEEN ?2 AND ?3),"
    " stats_group_verifiers AS (SELECT * FROM group_verifiers WHERE (?1 <= 0 OR run_id = ?1)"
    " AND step BETWEEN ?2 AND ?3),"
    " stats_turns AS (SELECT * FROM turns WHERE (?1 <= 0 OR run_id = ?1)"
    " AND step BETWEEN ?2 AND ?3),"
    " stats_runs AS (SELECT * FROM runs WHERE ?1 <= 0 OR id = ?1)";

static const char *
skip_space(const char *p)
{
    while (*p && isspace((unsigned char)*p))
        p++;
    return p;
}

/* The SELECT of "CREATE VIEW name AS <select>", or NULL. */
static const char *
view_body(const char *create_sql, const char *name)
{
    const char *p = strstr(create_sql, name);
    if (p == NULL)
        return NULL;
    p = skip_space(p + strlen(name));
    if (strncasecmp(p, "AS", 2) != 0 || !isspace((unsigned char)p[2]))
        return NULL;
    return skip_space(p + 2);
}

/* Builds the query text: the view itself, or its body with filtered stats_* inputs; a report
 * query always with them. */
static grpo_err
build_query(grpo_store *s, const grpo_stats_opts *o, grpo_buf *q)
{
    int is_select = 0;
    const char *report = grpo_store__report_sql(o->by, &is_select);
    if (report != NULL)
        return grpo__buf_printf(q, "WITH RECURSIVE %s%s %s", filtered_inputs, is_select ? "" : ",",
                                report);
    const char *view = view_names[o->by];
    int filtered = o->run_id > 0 || o->has_step_range;
    grpo_err err = GRPO_OK;
    if (!filtered)
        err = grpo__buf_printf(q, "SELECT * FROM %s", view);
    else {
        sqlite3_stmt *st = NULL;
        int rc = sqlite3_prepare_v2(s->db,
                                    "SELECT sql FROM sqlite_master WHERE type = 'view'"
                                    " AND name = ?",
                                    -1, &st, NULL);
        if (rc == SQLITE_OK) {
            sqlite3_bind_text(st, 1, view, -1, SQLITE_STATIC);
            rc = sqlite3_step(st);
        }
        const char *body =
            rc == SQLITE_ROW ? view_body((const char *)sqlite3_column_text(st, 0), view) : NULL;
        if (rc != SQLITE_ROW && rc != SQLITE_DONE)
            err = grpo_store__db_fail(s, rc, "reading a stats view");
        else if (body == NULL)
            err = grpo__fail(GRPO_EFORMAT,
                             "store: %s: view %s is missing or not a plain "
                             "CREATE VIEW ... AS SELECT",
                             s->path, view);
        else if (strncasecmp(body, "WITH", 4) == 0 && isspace((unsigned char)body[4]))
            err = grpo__buf_printf(q, "WITH %s, %s", filtered_inputs, body + 5);
        else
            err = grpo__buf_printf(q, "WITH %s %s", filtered_inputs, body);
        sqlite3_finalize(st);
    }
    if (err == GRPO_OK && o->by == GRPO_STATS_BY_PROMPT) {
        int k = o->pass_k > 0 ? o->pass_k : 8;
        grpo_buf w = {0};
        if ((err = grpo__buf_printf(&w,
                                    "SELECT *, grpo_pass_at_k(n, c, %d) AS pass_at_%d FROM"
                                    " (%s) ORDER BY run_id, prompt_id",
                                    k, k, q->data)) == GRPO_OK) {
            grpo__buf_fini(q);
            *q = w;
        } else {
            grpo__buf_fini(&w);
        }
    }
    return err;
}

void
grpo_stats_table_free(grpo_stats_table *t)
{
    if (t == NULL)
        return;
    for (int32_t i = 0; i < t->n_cols; i++)
        free((void *)t->cols[i]);
    for (int64_t i = 0; i < (int64_t)t->n_rows * t->n_cols; i++)
        free((void *)t->cells[i].s);
    free(t->cols);
    free(t->cells);
    free(t);
}

/* Appends the current row of st to t; returns 0 on ENOMEM. */
static int
add_row(grpo_stats_table *t, sqlite3_stmt *st, size_t *cap)
{
    size_t need = (size_t)(t->n_rows + 1) * (size_t)t->n_cols;
    if (need > *cap) {
        size_t nc = *cap ? 2 * *cap : (size_t)t->n_cols * 64;
        while (nc < need)
            nc *= 2;
        grpo_stats_cell *v = realloc(t->cells, nc * sizeof *v);
        if (v == NULL)
            return 0;
        t->cells = v;
        *cap = nc;
    }
    grpo_stats_cell *row = t->cells + (size_t)t->n_rows * (size_t)t->n_cols;
    memset(row, 0, (size_t)t->n_cols * sizeof *row);
    t->n_rows++;
    for (int32_t j = 0; j < t->n_cols; j++) {
        switch (sqlite3_column_type(st, j)) {
        case SQLITE_INTEGER:
            row[j].type = GRPO_STATS_INT;
            row[j].i = sqlite3_column_int64(st, j);
            break;
        case SQLITE_FLOAT:
            row[j].type = GRPO_STATS_REAL;
            row[j].r = sqlite3_column_double(st, j);
            break;
        case SQLITE_NULL:
            break;
        default: /* text (or a blob) as valid UTF-8 whatever its bytes */
            row[j].type = GRPO_STATS_TEXT;
            const char *txt = (const char *)sqlite3_column_text(st, j);
            size_t len = (size_t)sqlite3_column_bytes(st, j);
            if ((row[j].s = grpo__utf8_sanitize(txt ? txt : "", txt ? len : 0, NULL)) == NULL)
                return 0;
        }
    }
    return 1;
}

static grpo_err
run_query(grpo_store *s, sqlite3_stmt *st, grpo_stats_table *t)
{
    size_t cap = 0;
    t->n_cols = sqlite3_column_count(st);
    if ((t->cols = calloc((size_t)t->n_cols + 1, sizeof *t->cols)) == NULL)
        return grpo__fail(GRPO_ENOMEM, "store: stats: out of memory");
    for (int32_t j = 0; j < t->n_cols; j++)
        if ((t->cols[j] = strdup(sqlite3_column_name(st, j))) == NULL)
            return grpo__fail(GRPO_ENOMEM, "store: stats: out of memory");
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        if (!add_row(t, st, &cap))
            return grpo__fail(GRPO_ENOMEM, "store: stats: out of memory");
    return rc == SQLITE_DONE ? GRPO_OK : grpo_store__db_fail(s, rc, "running the stats query");
}

grpo_err
grpo_store_stats(grpo_stats_table **out, grpo_store *s, const grpo_stats_opts *opts)
{
    static const grpo_stats_opts defaults = {0};
    grpo_err err;
    grpo_buf q = {0};
    sqlite3_stmt *st = NULL;
    *out = NULL;
    if (opts == NULL)
        opts = &defaults;
    if (s == NULL || opts->by < GRPO_STATS_BY_STEP || opts->by > GRPO_STATS_BY_TOOLS)
        return grpo__fail(GRPO_EINVAL, "store: stats: NULL store or unknown grouping");
    if (opts->bins < 0 || opts->bins > 1000 || opts->examples < 0 || opts->examples > 1000 ||
        opts->text_bytes < 0)
        return grpo__fail(GRPO_EINVAL,
                          "store: stats: bins %d or examples %d outside 1..1000, or text_bytes %d "
                          "negative",
                          (int)opts->bins, (int)opts->examples, (int)opts->text_bytes);
    if ((err = grpo_store_flush(s)) != GRPO_OK)
        return err;
    grpo_stats_table *t = calloc(1, sizeof *t);
    if (t == NULL)
        return grpo__fail(GRPO_ENOMEM, "store: stats: out of memory");
    pthread_mutex_lock(&s->mu);
    if ((err = build_query(s, opts, &q)) != GRPO_OK)
        goto done;
    int rc = sqlite3_prepare_v2(s->db, q.data, -1, &st, NULL);
    if (rc != SQLITE_OK) {
        err = grpo_store__db_fail(s, rc, "preparing the stats query");
        goto done;
    }
    if (opts->run_id > 0 || opts->has_step_range || opts->by >= GRPO_STATS_BY_FINISH) {
        sqlite3_bind_int64(st, 1, opts->run_id);
        sqlite3_bind_int64(st, 2, opts->has_step_range ? opts->step_min : INT64_MIN);
        sqlite3_bind_int64(st, 3, opts->has_step_range ? opts->step_max : INT64_MAX);
    }
    if (opts->by == GRPO_STATS_BY_EXAMPLE)
        sqlite3_bind_int(st, 4, opts->examples > 0 ? opts->examples : 3);
    else if (opts->by >= GRPO_STATS_BY_REWARD_HIST && opts->by != GRPO_STATS_BY_TOOLS)
        sqlite3_bind_int(st, 4, opts->bins > 0 ? opts->bins : 20);
    err = run_query(s, st, t);
    if (err == GRPO_OK && opts->by == GRPO_STATS_BY_EXAMPLE)
        err = grpo_store__cut_texts(t, opts->text_bytes > 0 ? opts->text_bytes : 600);
done:
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->mu);
    grpo__buf_fini(&q);
    if (err != GRPO_OK) {
        grpo_stats_table_free(t);
        return err;
    }
    *out = t;
    return GRPO_OK;
}
