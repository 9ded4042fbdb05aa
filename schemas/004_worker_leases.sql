-- Schema version 4: `grpo stats --by worker` also counts leases (issue 11, `grpo serve`). Per run
-- and worker: the groups it recorded, their tokens/s and groups/s over its wall span, the groups
-- it recorded from a re-issued lease, and from the leases table the leases it was handed and how
-- many of them lapsed (it died, stopped or went silent) and were re-issued to another worker. A
-- worker that held leases but recorded nothing (killed early) still gets a row.

DROP VIEW worker_stats;
CREATE VIEW worker_stats AS
WITH gs AS (
    SELECT run_id, coalesce(worker_id, '(local)') AS worker, count(*) AS groups,
           sum(g) AS completions, sum(tokens) AS tokens,
           CASE WHEN max(finished_at) - min(started_at) > 0
                THEN sum(tokens) / (max(finished_at) - min(started_at)) END AS tokens_per_s,
           CASE WHEN max(finished_at) - min(started_at) > 0
                THEN count(*) / (max(finished_at) - min(started_at)) END AS groups_per_s,
           sum(lease_attempt > 0) AS reissued_groups,
           sum(lease_attempt) AS reissues
    FROM stats_groups
    GROUP BY run_id, coalesce(worker_id, '(local)')),
ls AS (
    SELECT run_id, coalesce(worker_id, '(local)') AS worker, count(*) AS leases,
           sum(state = 'expired') AS leases_expired
    FROM leases WHERE run_id IN (SELECT id FROM stats_runs)
    GROUP BY run_id, coalesce(worker_id, '(local)')),
keys AS (SELECT run_id, worker FROM gs UNION SELECT run_id, worker FROM ls)
SELECT k.run_id AS run_id, k.worker AS worker, coalesce(gs.groups, 0) AS groups,
       coalesce(gs.completions, 0) AS completions, coalesce(gs.tokens, 0) AS tokens,
       gs.tokens_per_s AS tokens_per_s, gs.groups_per_s AS groups_per_s,
       coalesce(gs.reissued_groups, 0) AS reissued_groups, coalesce(gs.reissues, 0) AS reissues,
       coalesce(ls.leases, 0) AS leases, coalesce(ls.leases_expired, 0) AS leases_expired
FROM keys k
LEFT JOIN gs ON gs.run_id = k.run_id AND gs.worker = k.worker
LEFT JOIN ls ON ls.run_id = k.run_id AND ls.worker = k.worker
ORDER BY k.run_id, k.worker;
