-- Schema version 3: indexes and views for `grpo stats`.
--
-- Every *_stats view reads only the stats_* base views below (and prompts), never the tables: `grpo
-- stats --step-range A:B` (and --run) re-runs a view's own text with stats_groups/completions/
-- rewards bound to filtered rows, so the numbers come from one definition. Percentiles are
-- nearest-rank: the value at rank ceil(p * n) in ascending order. Standard deviations are
-- population ones (divide by n). Rewards of kind 'skip' are excluded from scores and pass rates.

-- Length and latency percentiles read these indexes only.
CREATE INDEX completions_step_len ON completions (run_id, step, n_tokens);
CREATE INDEX rewards_verifier_ms ON rewards (run_id, verifier, version, ms);

CREATE VIEW stats_groups AS SELECT * FROM groups;
CREATE VIEW stats_completions AS SELECT * FROM completions;
CREATE VIEW stats_rewards AS SELECT * FROM rewards;
CREATE VIEW stats_group_verifiers AS SELECT * FROM group_verifiers;
CREATE VIEW stats_runs AS SELECT * FROM runs;

-- Per step: rewards, pass rate, zero-variance groups, completion lengths, generated tokens/s.
-- Sums come from the groups' summaries; length percentiles from a histogram of n_tokens.
CREATE VIEW step_stats AS
WITH gs AS (
    SELECT run_id, step, count(*) AS n_groups, sum(g) AS completions,
           sum(reward_mean * n_rewarded) / nullif(sum(n_rewarded), 0) AS reward_mean,
           sum(n_rewarded * (reward_std * reward_std + reward_mean * reward_mean))
               / nullif(sum(n_rewarded), 0) AS reward_sq,
           avg(reward_zero_std) AS frac_reward_zero_std,
           CAST(sum(n_correct) AS REAL) / nullif(sum(n_judged), 0) AS pass_rate,
           CAST(sum(tokens) AS REAL) / nullif(sum(g), 0) AS len_mean,
           CAST(sum(n_truncated) AS REAL) / nullif(sum(g), 0) AS frac_truncated,
           sum(tokens) AS tokens,
           max(finished_at) - min(started_at) AS wall_s
    FROM stats_groups GROUP BY run_id, step),
h AS (
    SELECT run_id, step, n_tokens, count(*) AS k
    FROM stats_completions GROUP BY run_id, step, n_tokens),
hc AS (
    SELECT run_id, step, n_tokens,
           sum(k) OVER (PARTITION BY run_id, step ORDER BY n_tokens
                        ROWS UNBOUNDED PRECEDING) AS cum,
           sum(k) OVER (PARTITION BY run_id, step) AS cnt
    FROM h),
lp AS (
    SELECT run_id, step,
           min(CASE WHEN cum >= (cnt + 1) / 2 THEN n_tokens END) AS len_p50,
           min(CASE WHEN cum >= (cnt * 95 + 99) / 100 THEN n_tokens END) AS len_p95
    FROM hc GROUP BY run_id, step)
SELECT gs.run_id AS run_id, gs.step AS step, gs.n_groups AS groups, gs.completions AS completions,
       gs.reward_mean AS reward_mean,
       sqrt(max(gs.reward_sq - gs.reward_mean * gs.reward_mean, 0.0)) AS reward_std,
       gs.frac_reward_zero_std AS frac_reward_zero_std, gs.pass_rate AS pass_rate,
       gs.len_mean AS len_mean, lp.len_p50 AS len_p50, lp.len_p95 AS len_p95,
       gs.frac_truncated AS frac_truncated, gs.tokens AS tokens,
       CASE WHEN gs.wall_s > 0 THEN gs.tokens / gs.wall_s END AS tokens_per_s
FROM gs LEFT JOIN lp ON lp.run_id = gs.run_id AND lp.step = gs.step
ORDER BY gs.run_id, gs.step;

-- Per verifier (name + version): scores, pass rate, outcome counts (from the group summaries),
-- latency percentiles (from a histogram of the verdicts' durations).
CREATE VIEW verifier_stats AS
WITH vs AS (
    SELECT run_id, verifier, version, sum(n) AS n,
           sum(n - n_skip) AS scored,
           sum(score_sum) / nullif(sum(n - n_skip), 0) AS reward_mean,
           sum(score_sq_sum) / nullif(sum(n - n_skip), 0) AS reward_sq,
           CAST(sum(n_pass) AS REAL) / nullif(sum(n - n_skip), 0) AS pass_rate,
           sum(n_fail) AS n_fail, sum(n_timeout) AS n_timeout,
           sum(n_error) AS n_error, sum(n_skip) AS n_skip,
           sum(ms_sum) / nullif(sum(n), 0) AS latency_mean_ms
    FROM stats_group_verifiers GROUP BY run_id, verifier, version),
h AS (
    SELECT run_id, verifier, version, ms, count(*) AS k
    FROM stats_rewards WHERE ms IS NOT NULL GROUP BY run_id, verifier, version, ms),
hc AS (
    SELECT run_id, verifier, version, ms,
           sum(k) OVER (PARTITION BY run_id, verifier, version ORDER BY ms
                        ROWS UNBOUNDED PRECEDING) AS cum,
           sum(k) OVER (PARTITION BY run_id, verifier, version) AS cnt
    FROM h),
lp AS (
    SELECT run_id, verifier, version,
           min(CASE WHEN cum >= (cnt + 1) / 2 THEN ms END) AS latency_p50_ms,
           min(CASE WHEN cum >= (cnt * 99 + 99) / 100 THEN ms END) AS latency_p99_ms
    FROM hc GROUP BY run_id, verifier, version)
SELECT vs.run_id AS run_id, vs.verifier AS verifier, vs.version AS version, vs.n AS n,
       vs.scored AS scored, vs.reward_mean AS reward_mean,
       sqrt(max(vs.reward_sq - vs.reward_mean * vs.reward_mean, 0.0)) AS reward_std,
       vs.pass_rate AS pass_rate, vs.n_fail AS n_fail, vs.n_timeout AS n_timeout,
       vs.n_error AS n_error, vs.n_skip AS n_skip, vs.latency_mean_ms AS latency_mean_ms,
       lp.latency_p50_ms AS latency_p50_ms, lp.latency_p99_ms AS latency_p99_ms
FROM vs LEFT JOIN lp ON lp.run_id = vs.run_id AND lp.verifier = vs.verifier
                    AND lp.version = vs.version
ORDER BY vs.run_id, vs.verifier, vs.version;

-- Per prompt: samples judged (n), samples correct (c), solve rate (= unbiased pass@1), and the
-- mean of its groups' mean rewards. `grpo stats --by prompt` adds pass@k = 1 - C(n-c, k) / C(n, k)
-- with the grpo_pass_at_k() function the store registers.
CREATE VIEW prompt_stats AS
SELECT g.run_id AS run_id, g.prompt_id AS prompt_id, p.dataset AS dataset, p.idx AS idx,
       count(*) AS groups,
       sum(g.n_judged) AS n, sum(g.n_correct) AS c,
       CAST(sum(g.n_correct) AS REAL) / nullif(sum(g.n_judged), 0) AS solve_rate,
       avg(g.reward_mean) AS reward_mean
FROM stats_groups AS g
JOIN prompts AS p ON p.id = g.prompt_id
GROUP BY g.run_id, g.prompt_id
ORDER BY g.run_id, g.prompt_id;

-- Per worker: groups, tokens, throughput over its active span, re-issued leases.
CREATE VIEW worker_stats AS
SELECT run_id, coalesce(worker_id, '(local)') AS worker, count(*) AS groups,
       sum(g) AS completions, sum(tokens) AS tokens,
       CASE WHEN max(finished_at) - min(started_at) > 0
            THEN sum(tokens) / (max(finished_at) - min(started_at)) END AS tokens_per_s,
       sum(lease_attempt > 0) AS reissued_groups,
       sum(lease_attempt) AS reissues
FROM stats_groups
GROUP BY run_id, coalesce(worker_id, '(local)')
ORDER BY run_id, worker;

-- Per run: its provenance and how much it recorded (times as UTC ISO 8601 text).
CREATE VIEW run_stats AS
WITH gs AS (
    SELECT run_id, count(*) AS groups, sum(g) AS completions, sum(tokens) AS tokens,
           min(step) AS first_step, max(step) AS last_step,
           sum(reward_mean * n_rewarded) / nullif(sum(n_rewarded), 0) AS reward_mean
    FROM stats_groups GROUP BY run_id)
SELECT r.id AS run_id, r.status AS status,
       strftime('%Y-%m-%dT%H:%M:%SZ', r.started_at, 'unixepoch') AS started_at,
       strftime('%Y-%m-%dT%H:%M:%SZ', r.ended_at, 'unixepoch') AS ended_at,
       r.command_line AS command_line, r.host AS host, r.grpo_version AS grpo_version,
       r.repo_commit AS repo_commit, r.repo_branch AS repo_branch, r.repo_dirty AS repo_dirty,
       r.dataset_path AS dataset_path, r.dataset_commit AS dataset_commit,
       coalesce(gs.groups, 0) AS groups, coalesce(gs.completions, 0) AS completions,
       coalesce(gs.tokens, 0) AS tokens, gs.first_step AS first_step, gs.last_step AS last_step,
       gs.reward_mean AS reward_mean
FROM stats_runs AS r LEFT JOIN gs ON gs.run_id = r.id
ORDER BY r.id;
