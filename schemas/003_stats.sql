-- Schema version 3: indexes and views for `grpo stats`.
--
-- Every *_stats view reads only the stats_* base views below, never the tables directly: `grpo
-- stats --step-range A:B` (and --run) re-runs a view's own text with stats_groups/completions/
-- rewards bound to filtered rows, so the numbers come from one definition. Percentiles are
-- nearest-rank: the value at rank ceil(p * n) in ascending order. Standard deviations are
-- population ones (divide by n). Rewards of kind 'skip' are excluded from scores and pass rates.

CREATE INDEX completions_step_len ON completions (run_id, step, n_tokens);
CREATE INDEX rewards_verifier_ms ON rewards (run_id, verifier, version, ms);

CREATE VIEW stats_groups AS SELECT * FROM groups;
CREATE VIEW stats_completions AS SELECT * FROM completions;
CREATE VIEW stats_rewards AS SELECT * FROM rewards;

-- Per step: rewards, pass rate, zero-variance groups, completion lengths, generated tokens/s.
CREATE VIEW step_stats AS
WITH cq AS (
    SELECT run_id, step, reward, correct, n_tokens, finish_reason,
           row_number() OVER (PARTITION BY run_id, step ORDER BY n_tokens) AS rn,
           count(*) OVER (PARTITION BY run_id, step) AS cnt
    FROM stats_completions),
cs AS (
    SELECT run_id, step, count(*) AS completions,
           avg(reward) AS reward_mean,
           sqrt(max(avg(reward * reward) - avg(reward) * avg(reward), 0.0)) AS reward_std,
           avg(correct) AS pass_rate,
           avg(n_tokens) AS len_mean,
           max(CASE WHEN rn = (cnt + 1) / 2 THEN n_tokens END) AS len_p50,
           max(CASE WHEN rn = (cnt * 95 + 99) / 100 THEN n_tokens END) AS len_p95,
           avg(finish_reason = 'length') AS frac_truncated,
           sum(n_tokens) AS tokens
    FROM cq GROUP BY run_id, step),
gz AS (
    SELECT group_id, max(reward) IS min(reward) AS zero_std
    FROM stats_completions GROUP BY group_id),
gs AS (
    SELECT g.run_id, g.step, count(*) AS n_groups,
           avg(gz.zero_std) AS frac_reward_zero_std,
           max(g.finished_at) - min(g.started_at) AS wall_s
    FROM stats_groups AS g LEFT JOIN gz ON gz.group_id = g.id
    GROUP BY g.run_id, g.step)
SELECT cs.run_id AS run_id, cs.step AS step, gs.n_groups AS groups, cs.completions AS completions,
       cs.reward_mean AS reward_mean, cs.reward_std AS reward_std,
       gs.frac_reward_zero_std AS frac_reward_zero_std, cs.pass_rate AS pass_rate,
       cs.len_mean AS len_mean, cs.len_p50 AS len_p50, cs.len_p95 AS len_p95,
       cs.frac_truncated AS frac_truncated, cs.tokens AS tokens,
       CASE WHEN gs.wall_s > 0 THEN cs.tokens / gs.wall_s END AS tokens_per_s
FROM cs JOIN gs ON gs.run_id = cs.run_id AND gs.step = cs.step
ORDER BY cs.run_id, cs.step;

-- Per verifier (name + version): scores, pass rate, outcome counts, latency.
CREATE VIEW verifier_stats AS
WITH rq AS (
    SELECT run_id, verifier, version, kind, score, ms,
           row_number() OVER (PARTITION BY run_id, verifier, version ORDER BY ms NULLS LAST) AS rn,
           count(ms) OVER (PARTITION BY run_id, verifier, version) AS cnt
    FROM stats_rewards)
SELECT run_id, verifier, version, count(*) AS n,
       sum(kind <> 'skip') AS scored,
       avg(CASE WHEN kind <> 'skip' THEN score END) AS reward_mean,
       sqrt(max(avg(CASE WHEN kind <> 'skip' THEN score * score END)
                - avg(CASE WHEN kind <> 'skip' THEN score END)
                  * avg(CASE WHEN kind <> 'skip' THEN score END), 0.0)) AS reward_std,
       CAST(sum(kind = 'pass') AS REAL) / nullif(sum(kind <> 'skip'), 0) AS pass_rate,
       sum(kind = 'fail') AS n_fail, sum(kind = 'timeout') AS n_timeout,
       sum(kind = 'error') AS n_error, sum(kind = 'skip') AS n_skip,
       avg(ms) AS latency_mean_ms,
       max(CASE WHEN rn = (cnt + 1) / 2 THEN ms END) AS latency_p50_ms,
       max(CASE WHEN rn = (cnt * 99 + 99) / 100 THEN ms END) AS latency_p99_ms
FROM rq GROUP BY run_id, verifier, version
ORDER BY run_id, verifier, version;

-- Per prompt: samples judged, samples correct, solve rate (= unbiased pass@1), mean reward.
-- `grpo stats --by prompt` adds pass@k = 1 - C(n-c, k) / C(n, k) with the grpo_pass_at_k() function.
CREATE VIEW prompt_stats AS
SELECT g.run_id AS run_id, g.prompt_id AS prompt_id, p.dataset AS dataset, p.idx AS idx,
       count(DISTINCT g.id) AS groups,
       count(c.correct) AS n, coalesce(sum(c.correct), 0) AS c,
       avg(c.correct) AS solve_rate,
       avg(c.reward) AS reward_mean
FROM stats_completions AS c
JOIN stats_groups AS g ON g.id = c.group_id
JOIN prompts AS p ON p.id = g.prompt_id
GROUP BY g.run_id, g.prompt_id
ORDER BY g.run_id, g.prompt_id;

-- Per worker: groups, tokens, throughput over its active span, re-issued leases.
CREATE VIEW worker_stats AS
WITH per_group AS (
    SELECT group_id, count(*) AS n, sum(n_tokens) AS tokens
    FROM stats_completions GROUP BY group_id)
SELECT g.run_id AS run_id, coalesce(g.worker_id, '(local)') AS worker, count(*) AS groups,
       sum(pg.n) AS completions, sum(pg.tokens) AS tokens,
       CASE WHEN max(g.finished_at) - min(g.started_at) > 0
            THEN sum(pg.tokens) / (max(g.finished_at) - min(g.started_at)) END AS tokens_per_s,
       sum(g.lease_attempt > 0) AS reissued_groups,
       sum(g.lease_attempt) AS reissues
FROM stats_groups AS g JOIN per_group AS pg ON pg.group_id = g.id
GROUP BY g.run_id, coalesce(g.worker_id, '(local)')
ORDER BY g.run_id, worker;
