/* The report's stats queries (finish reasons, reward and length histograms, throughput over time,
 * KL, example completions, tool calls): SQL over the same stats_* inputs as the views of
 * schemas/003_stats.sql, kept here rather than as views because they take parameters (?4: bins or
 * examples per verdict). store/stats.c prepends the filtered inputs (?1 run, ?2..?3 steps). */
#include "store/store_int.h"

#include <stdlib.h>
#include <string.h>

static const char finish_sql[] =
    "SELECT run_id, finish_reason, count(*) AS completions,"
    " CAST(count(*) AS REAL) / sum(count(*)) OVER (PARTITION BY run_id) AS frac,"
    " avg(n_tokens) AS len_mean, avg(reward) AS reward_mean"
    " FROM stats_completions GROUP BY run_id, finish_reason ORDER BY run_id, finish_reason";

/* Equal-width bins over [lo, hi] of every selected run's rewards, a row per run and bin. */
static const char reward_hist_sql[] =
    "x AS MATERIALIZED (SELECT run_id, reward AS v FROM stats_completions"
    " WHERE reward IS NOT NULL),"
    " p AS (SELECT lo, hi, CASE WHEN hi > lo THEN ?4 ELSE 1 END AS nb FROM"
    " (SELECT min(v) AS lo, max(v) AS hi FROM x) WHERE lo IS NOT NULL),"
    " rt AS (SELECT run_id, count(*) AS total FROM x GROUP BY run_id),"
    " b(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM b, p WHERE i + 1 < p.nb),"
    " h AS (SELECT x.run_id AS run_id, CASE WHEN p.hi > p.lo"
    " THEN min(CAST((x.v - p.lo) / (p.hi - p.lo) * p.nb AS INTEGER), p.nb - 1) ELSE 0 END AS bin,"
    " count(*) AS n FROM x, p GROUP BY 1, 2)"
    " SELECT rt.run_id AS run_id, b.i AS bin, p.lo + b.i * (p.hi - p.lo) / p.nb AS lo,"
    " CASE WHEN b.i = p.nb - 1 THEN p.hi ELSE p.lo + (b.i + 1) * (p.hi - p.lo) / p.nb END AS hi,"
    " coalesce(h.n, 0) AS n, CAST(coalesce(h.n, 0) AS REAL) / rt.total AS frac"
    " FROM rt CROSS JOIN p CROSS JOIN b LEFT JOIN h ON h.run_id = rt.run_id AND h.bin = b.i"
    " ORDER BY rt.run_id, b.i";

/* Integer bins of width w = ceil((hi - lo + 1) / bins) over the completions' token counts. */
static const char length_hist_sql[] =
    "x AS MATERIALIZED (SELECT run_id, n_tokens AS v FROM stats_completions),"
    " p0 AS (SELECT lo, hi, (hi - lo + ?4) / ?4 AS w FROM"
    " (SELECT min(v) AS lo, max(v) AS hi FROM x) WHERE lo IS NOT NULL),"
    " p AS (SELECT lo, hi, w, (hi - lo) / w + 1 AS nb FROM p0),"
    " rt AS (SELECT run_id, count(*) AS total FROM x GROUP BY run_id),"
    " b(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM b, p WHERE i + 1 < p.nb),"
    " h AS (SELECT x.run_id AS run_id, (x.v - p.lo) / p.w AS bin, count(*) AS n"
    " FROM x, p GROUP BY 1, 2)"
    " SELECT rt.run_id AS run_id, b.i AS bin, p.lo + b.i * p.w AS lo,"
    " min(p.hi, p.lo + (b.i + 1) * p.w - 1) AS hi,"
    " coalesce(h.n, 0) AS n, CAST(coalesce(h.n, 0) AS REAL) / rt.total AS frac"
    " FROM rt CROSS JOIN p CROSS JOIN b LEFT JOIN h ON h.run_id = rt.run_id AND h.bin = b.i"
    " ORDER BY rt.run_id, b.i";

/* Each run's span (first group start to last group finish) in ?4 equal bins; a group's work is
 * spread over its own span in proportion to the overlap, or put whole in the bin of its start
 * when it took no time. */
static const char time_sql[] =
    "gs AS MATERIALIZED (SELECT run_id, started_at AS t0, max(finished_at, started_at) AS t1,"
    " g, tokens"
    " FROM stats_groups WHERE started_at IS NOT NULL AND finished_at IS NOT NULL),"
    " p AS (SELECT run_id, min(t0) AS lo, max(t1) AS hi,"
    " CASE WHEN max(t1) > min(t0) THEN ?4 ELSE 1 END AS nb FROM gs GROUP BY run_id),"
    " b(run_id, i, nb, lo, hi) AS (SELECT run_id, 0, nb, lo, hi FROM p UNION ALL"
    " SELECT run_id, i + 1, nb, lo, hi FROM b WHERE i + 1 < nb),"
    " e AS (SELECT run_id, i, nb, lo, hi, lo + i * (hi - lo) / nb AS b0,"
    " CASE WHEN i = nb - 1 THEN hi ELSE lo + (i + 1) * (hi - lo) / nb END AS b1 FROM b),"
    " w AS (SELECT e.run_id AS run_id, e.i AS i, CASE WHEN gs.t1 > gs.t0"
    " THEN (min(gs.t1, e.b1) - max(gs.t0, e.b0)) / (gs.t1 - gs.t0) ELSE 1.0 END AS share,"
    " gs.g AS g, gs.tokens AS tokens"
    " FROM e JOIN gs ON gs.run_id = e.run_id AND CASE WHEN gs.t1 > gs.t0"
    " THEN gs.t1 > e.b0 AND gs.t0 < e.b1"
    " ELSE e.i = CASE WHEN e.hi > e.lo"
    " THEN min(CAST((gs.t0 - e.lo) / (e.hi - e.lo) * e.nb AS INTEGER), e.nb - 1) ELSE 0 END END)"
    " SELECT e.run_id AS run_id, e.i AS bin, e.b0 - e.lo AS t_start_s, e.b1 - e.lo AS t_end_s,"
    " count(w.i) AS groups, coalesce(sum(w.share * w.g), 0.0) AS completions,"
    " coalesce(sum(w.share * w.tokens), 0.0) AS tokens,"
    " CASE WHEN e.b1 > e.b0 THEN coalesce(sum(w.share * w.g), 0.0) / (e.b1 - e.b0) END"
    " AS completions_per_s,"
    " CASE WHEN e.b1 > e.b0 THEN coalesce(sum(w.share * w.tokens), 0.0) / (e.b1 - e.b0) END"
    " AS tokens_per_s"
    " FROM e LEFT JOIN w ON w.run_id = e.run_id AND w.i = e.i"
    " GROUP BY e.run_id, e.i ORDER BY e.run_id, e.i";

/* Completions recorded with a reference policy (kl_mean stored) only. */
static const char kl_sql[] =
    "SELECT run_id, step, count(*) AS completions,"
    " sum(kl_mean * n_tokens) / nullif(sum(n_tokens), 0) AS kl_per_token,"
    " max(kl_max) AS kl_max,"
    " sum(logprob_sum) / nullif(sum(n_tokens), 0) AS logprob_per_token,"
    " sum(ref_logprob_sum) / nullif(sum(n_tokens), 0) AS ref_logprob_per_token,"
    " (sum(logprob_sum) - sum(ref_logprob_sum)) / nullif(sum(n_tokens), 0) AS logprob_gap,"
    " max(abs(logprob_sum - ref_logprob_sum) / nullif(n_tokens, 0)) AS logprob_gap_max"
    " FROM stats_completions WHERE kl_mean IS NOT NULL AND ref_logprob_sum IS NOT NULL"
    " GROUP BY run_id, step ORDER BY run_id, step";

/* ?4 completions of each (run, verifier, kind), chosen among its first 64 * ?4 verdicts (by
 * completion id; a bound, so a big run's report does not sort every verdict by prompt): the first
 * of each prompt in id order, then the second of each, and so on, so the examples differ; text is
 * cut in C (grpo_store__cut_texts). */
static const char example_sql[] =
    "r0 AS (SELECT run_id, verifier, kind, label, completion_id, idx,"
    " row_number() OVER (PARTITION BY run_id, verifier, kind ORDER BY completion_id, idx) AS k,"
    " count(*) OVER (PARTITION BY run_id, verifier, kind) AS verdicts FROM stats_rewards),"
    " v0 AS (SELECT r.*, g.prompt_id AS prompt_id,"
    " row_number() OVER (PARTITION BY r.run_id, r.verifier, r.kind, g.prompt_id"
    " ORDER BY r.completion_id, r.idx) AS per_prompt"
    " FROM r0 AS r JOIN completions AS c ON c.id = r.completion_id"
    " JOIN groups AS g ON g.id = c.group_id WHERE r.k <= 64 * ?4),"
    " v AS (SELECT *, row_number() OVER (PARTITION BY run_id, verifier, kind"
    " ORDER BY per_prompt, completion_id, idx) AS rank FROM v0)"
    " SELECT v.run_id AS run_id, v.verifier AS verifier, v.kind AS kind, v.verdicts AS verdicts,"
    " v.rank AS rank, v.label AS label, c.id AS completion_id, c.step AS step,"
    " v.prompt_id AS prompt_id, c.sample_index AS sample_index, c.reward AS reward,"
    " c.finish_reason AS finish_reason, c.n_tokens AS n_tokens,"
    " coalesce(length(CAST(c.text AS BLOB)), 0) AS text_bytes, coalesce(c.text, '') AS text,"
    " 0 AS text_cut"
    " FROM v JOIN completions AS c ON c.id = v.completion_id"
    " WHERE v.rank <= ?4 ORDER BY v.run_id, v.verifier, v.kind, v.rank";

/* Per run, a row '(all)' over every turn, then one per environment ('(unknown)' for a turn whose
 * record names none, and for one naming itself '(all)'). Completions with a turn of the row's env
 * are "with tools", the run's others "without"; the reward without is the run's reward sum less
 * the sum with, over the counts. Percentiles are nearest-rank (rank ceil(p * n)), of the tool
 * times of the turns that ran and of the wait times of every turn. A completion's turns share its
 * run and step, so the turns of selected completions are the selected turns: the joins to
 * `completions` and `turns` by id need no filter of their own. Cost: a few sorts of the selected
 * turns (two per percentile column). */
static const char tools_sql[] =
    "t AS MATERIALIZED (SELECT completion_id, run_id, CASE WHEN env IS NULL OR env ="
    " '(all)' THEN '(unknown)' ELSE env END AS env, label, ran, n_obs, tool_ms, wait_ms"
    " FROM stats_turns),"
    " ae AS (SELECT run_id, env AS k, count(*) AS turns, coalesce(sum(ran = 1), 0) AS"
    " calls, sum(CASE WHEN ran = 1 THEN n_obs END) AS obs, coalesce(sum(label = 'ok'), 0)"
    " AS n_ok, coalesce(sum(label = 'error'), 0) AS n_error, coalesce(sum(label ="
    " 'timeout'), 0) AS n_timeout, coalesce(sum(label <> 'ok' AND label <> 'error' AND"
    " label <> 'timeout'), 0) AS n_other, coalesce(sum(ran = 1 AND tool_ms IS NOT NULL), 0)"
    " AS n_tool, count(wait_ms) AS n_wait FROM t GROUP BY run_id, env),"
    " a AS (SELECT * FROM ae UNION ALL SELECT run_id, '(all)', sum(turns), sum(calls),"
    " sum(obs), sum(n_ok), sum(n_error), sum(n_timeout), sum(n_other), sum(n_tool),"
    " sum(n_wait) FROM ae GROUP BY run_id),"
    " cr AS (SELECT run_id, count(*) AS n, sum(reward) AS r_sum, count(reward) AS r_n FROM"
    " stats_completions GROUP BY run_id),"
    " ce AS (SELECT DISTINCT run_id, env, completion_id FROM t),"
    " w AS (SELECT ce.run_id AS run_id, ce.env AS k, count(*) AS n, sum(c.reward) AS r_sum,"
    " count(c.reward) AS r_n FROM ce JOIN completions AS c ON c.id = ce.completion_id GROUP"
    " BY ce.run_id, ce.env"
    " UNION ALL SELECT run_id, '(all)', count(*), sum(reward), count(reward) FROM"
    " stats_completions AS c WHERE EXISTS (SELECT 1 FROM turns AS x WHERE x.completion_id ="
    " c.id) GROUP BY run_id),"
    " pt AS (SELECT run_id, env AS k, tool_ms AS v, row_number() OVER (PARTITION BY run_id,"
    " env ORDER BY tool_ms) AS rn FROM t WHERE ran = 1 AND tool_ms IS NOT NULL"
    " UNION ALL SELECT run_id, '(all)', tool_ms, row_number() OVER (PARTITION BY run_id"
    " ORDER BY tool_ms) FROM t WHERE ran = 1 AND tool_ms IS NOT NULL),"
    " pw AS (SELECT run_id, env AS k, wait_ms AS v, row_number() OVER (PARTITION BY run_id,"
    " env ORDER BY wait_ms) AS rn FROM t WHERE wait_ms IS NOT NULL"
    " UNION ALL SELECT run_id, '(all)', wait_ms, row_number() OVER (PARTITION BY run_id"
    " ORDER BY wait_ms) FROM t WHERE wait_ms IS NOT NULL),"
    " qt AS (SELECT pt.run_id AS run_id, pt.k AS k, min(CASE WHEN rn = (n_tool + 1) / 2"
    " THEN v END) AS p50, min(CASE WHEN rn = (n_tool * 99 + 99) / 100 THEN v END) AS p99"
    " FROM pt JOIN a ON a.run_id = pt.run_id AND a.k = pt.k WHERE rn = (n_tool + 1) / 2 OR"
    " rn = (n_tool * 99 + 99) / 100 GROUP BY pt.run_id, pt.k),"
    " qw AS (SELECT pw.run_id AS run_id, pw.k AS k, min(CASE WHEN rn = (n_wait + 1) / 2"
    " THEN v END) AS p50, min(CASE WHEN rn = (n_wait * 99 + 99) / 100 THEN v END) AS p99"
    " FROM pw JOIN a ON a.run_id = pw.run_id AND a.k = pw.k WHERE rn = (n_wait + 1) / 2 OR"
    " rn = (n_wait * 99 + 99) / 100 GROUP BY pw.run_id, pw.k),"
    " keys AS (SELECT run_id, '(all)' AS k FROM cr UNION SELECT run_id, k FROM ae)"
    " SELECT keys.run_id AS run_id, keys.k AS env, cr.n AS completions, CAST(coalesce(w.n,"
    " 0) AS REAL) / cr.n AS samples_with_tools, coalesce(a.turns, 0) AS turns,"
    " coalesce(a.calls, 0) AS calls, CAST(coalesce(a.calls, 0) AS REAL) / cr.n AS"
    " calls_per_sample, qt.p50 AS tool_ms_p50, qt.p99 AS tool_ms_p99, qw.p50 AS"
    " wait_ms_p50, qw.p99 AS wait_ms_p99, CAST(a.obs AS REAL) / nullif(a.calls, 0) AS"
    " obs_tokens, coalesce(a.n_ok, 0) AS n_ok, coalesce(a.n_error, 0) AS n_error,"
    " coalesce(a.n_timeout, 0) AS n_timeout, coalesce(a.n_other, 0) AS n_other, w.r_sum /"
    " nullif(w.r_n, 0) AS reward_with_tools, (cr.r_sum - coalesce(w.r_sum, 0)) /"
    " nullif(cr.r_n - coalesce(w.r_n, 0), 0) AS reward_without_tools"
    " FROM keys JOIN cr ON cr.run_id = keys.run_id LEFT JOIN a ON a.run_id = keys.run_id"
    " AND a.k = keys.k LEFT JOIN w ON w.run_id = keys.run_id AND w.k = keys.k LEFT JOIN qt"
    " ON qt.run_id = keys.run_id AND qt.k = keys.k LEFT JOIN qw ON qw.run_id = keys.run_id"
    " AND qw.k = keys.k ORDER BY keys.run_id, keys.k <> '(all)', keys.k";

const char *
grpo_store__report_sql(grpo_stats_by by, int *is_select)
{
    *is_select = by == GRPO_STATS_BY_FINISH || by == GRPO_STATS_BY_KL;
    switch (by) {
    case GRPO_STATS_BY_FINISH:
        return finish_sql;
    case GRPO_STATS_BY_REWARD_HIST:
        return reward_hist_sql;
    case GRPO_STATS_BY_LENGTH_HIST:
        return length_hist_sql;
    case GRPO_STATS_BY_TIME:
        return time_sql;
    case GRPO_STATS_BY_KL:
        return kl_sql;
    case GRPO_STATS_BY_EXAMPLE:
        return example_sql;
    case GRPO_STATS_BY_TOOLS:
        return tools_sql;
    default:
        return NULL;
    }
}

/* The example query's text column cut to text_bytes at a character boundary, text_cut set. */
grpo_err
grpo_store__cut_texts(grpo_stats_table *t, int32_t text_bytes)
{
    int jt = -1, jc = -1;
    for (int32_t j = 0; j < t->n_cols; j++) {
        if (strcmp(t->cols[j], "text") == 0)
            jt = j;
        if (strcmp(t->cols[j], "text_cut") == 0)
            jc = j;
    }
    if (jt < 0 || jc < 0)
        return grpo__fail(GRPO_EINVAL, "store: stats: example query without text columns");
    for (int32_t i = 0; i < t->n_rows; i++) {
        grpo_stats_cell *c = &t->cells[(size_t)i * t->n_cols + jt];
        grpo_stats_cell *cut = &t->cells[(size_t)i * t->n_cols + jc];
        if (c->type != GRPO_STATS_TEXT)
            continue;
        size_t len = strlen(c->s);
        /* c->s is valid UTF-8, so its longest valid prefix of text_bytes ends on a boundary */
        size_t keep = len <= (size_t)text_bytes ? len : grpo__utf8_valid_len(c->s, text_bytes);
        cut->type = GRPO_STATS_INT;
        cut->i = keep < len;
        ((char *)c->s)[keep] = '\0';
    }
    return GRPO_OK;
}
