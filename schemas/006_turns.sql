-- Schema version 6: the turns of multi-turn completions (grpo_turn_rec): each tool call or
-- environment step, in order (idx), with where its action ended and how many observation tokens
-- followed it in the completion's token_ids (those have loss mask 0). record_json is the turn's
-- record as the rollout gave it, kept whole; env, label, tool_ms, ran, done and reward are copied
-- out of it at insert so the stats need no JSON. A record_json that is not a JSON object (or a
-- field of the wrong type) does not fail the group: its columns are NULL and label 'unknown'.
-- run_id and step repeat the completion's so the stats need no join, as on completions.

CREATE TABLE turns (
    completion_id   INTEGER NOT NULL REFERENCES completions(id),
    idx             INTEGER NOT NULL,           -- 0, 1, ... in the order the turns happened
    run_id          INTEGER NOT NULL,
    step            INTEGER NOT NULL,
    env             TEXT,                       -- record_json's "env" (e.g. 'python'), or NULL
    label           TEXT NOT NULL,              -- its "label" ('ok', 'timeout', ...), or 'unknown'
    action_end      INTEGER NOT NULL,           -- token index just past the action
    n_obs           INTEGER NOT NULL,           -- observation tokens appended after it
    n_obs_cut       INTEGER NOT NULL,           -- observation tokens cut off to fit
    at_ms           REAL,                       -- when the sample parked, from group admission
    wait_ms         REAL,                       -- how long it stayed parked
    tool_ms         REAL,                       -- "tool_ms": the tool's own run time
    ran             INTEGER,                    -- "ran": 1 the tool ran, 0 refused before running
    done            INTEGER,                    -- "done": 1 the environment ended the episode
    reward          REAL,                       -- "reward" of the step, NULL when absent
    record_json     TEXT,
    PRIMARY KEY (completion_id, idx)
) WITHOUT ROWID;

-- `grpo stats --by tools --run R --step-range A:B` reads a run's turns without a full scan.
CREATE INDEX turns_run_step ON turns (run_id, step);

CREATE VIEW stats_turns AS SELECT * FROM turns;
