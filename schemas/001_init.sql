-- Schema version 1: the provenance tables. Applied by the store on a new database; later files
-- (002_..., 003_...) migrate it forward. Never edit a released file: add a new one.
-- Times are Unix seconds (REAL); *_ms columns are milliseconds.
-- CHECKs spell lists as x = 'a' OR x = 'b': SQLite builds a temporary b-tree for every
-- execution of x IN ('a', 'b', ...), which doubled the cost of an insert.

CREATE TABLE runs (
    id              INTEGER PRIMARY KEY,
    started_at      REAL NOT NULL,
    ended_at        REAL,
    status          TEXT,                       -- 'running', then 'ok', 'failed', ...
    command_line    TEXT,
    config_json     TEXT NOT NULL DEFAULT '{}',
    host            TEXT,
    grpo_version    TEXT,
    repo_path       TEXT,                       -- working repository (libgit2)
    repo_commit     TEXT,
    repo_branch     TEXT,
    repo_dirty      INTEGER,
    repo_remote     TEXT,
    dataset_path    TEXT,                       -- dataset file or repository
    dataset_rev     TEXT,                       -- revision asked for, if any
    dataset_commit  TEXT,
    dataset_branch  TEXT,
    dataset_dirty   INTEGER,
    dataset_remote  TEXT
);

CREATE TABLE policy_versions (
    id          INTEGER PRIMARY KEY,
    run_id      INTEGER NOT NULL REFERENCES runs(id),
    version     INTEGER NOT NULL,
    location    TEXT,
    sha256      TEXT,
    loaded_at   REAL NOT NULL,
    UNIQUE (run_id, version)
);

CREATE TABLE prompts (
    id              INTEGER PRIMARY KEY,
    dataset         TEXT NOT NULL,
    idx             INTEGER NOT NULL,
    text            TEXT,
    messages_json   TEXT,
    gold_json       TEXT,
    tests_json      TEXT,
    content_hash    TEXT NOT NULL UNIQUE       -- sha256 of dataset, text, messages, gold, tests
);

CREATE TABLE groups (
    id              INTEGER PRIMARY KEY,
    run_id          INTEGER NOT NULL REFERENCES runs(id),
    step            INTEGER NOT NULL,
    prompt_id       INTEGER NOT NULL REFERENCES prompts(id),
    policy_version  INTEGER NOT NULL,
    seed            INTEGER NOT NULL,           -- uint64 stored as its int64 bit pattern
    g               INTEGER NOT NULL,           -- number of completions (G)
    sampling_json   TEXT,
    max_tokens      INTEGER,
    started_at      REAL,
    finished_at     REAL,
    prefill_ms      REAL,
    gen_ms          REAL,
    verify_ms       REAL,
    -- A summary of the completions, written with them, so per-step stats read groups only:
    n_rewarded      INTEGER,                    -- completions with a reward
    reward_mean     REAL,                       -- mean of those rewards
    reward_std      REAL,                       -- their population std
    reward_zero_std INTEGER,                    -- 1 when those rewards are all equal
    n_judged        INTEGER,                    -- completions whose correctness is known
    n_correct       INTEGER,                    -- completions judged correct
    n_truncated     INTEGER,                    -- completions cut at max_tokens
    tokens          INTEGER,                    -- sum of the completions' n_tokens
    UNIQUE (run_id, step, prompt_id, seed)
);

-- run_id and step repeat the group's so the stats need no join. The advantage and KL summary
-- sit on the completion row (the `advantages` view shows them as their own table): one insert
-- per completion instead of two.
CREATE TABLE completions (
    id              INTEGER PRIMARY KEY,
    group_id        INTEGER NOT NULL REFERENCES groups(id),
    run_id          INTEGER NOT NULL,
    step            INTEGER NOT NULL,
    sample_index    INTEGER NOT NULL,
    n_tokens        INTEGER NOT NULL,
    finish_reason   TEXT NOT NULL CHECK (finish_reason = 'eos' OR finish_reason = 'stop'
                                         OR finish_reason = 'length' OR finish_reason = 'abort'),
    logprob_sum     REAL,
    first_token_ms  REAL,
    gen_ms          REAL,
    reward          REAL,                       -- the reward the advantage was computed from
    correct         INTEGER,                    -- 1 solved, 0 not, NULL unknown
    advantage       REAL,                       -- NULL until computed
    kl_mean         REAL,                       -- per-token KL to the reference policy
    kl_max          REAL,
    ref_logprob_sum REAL,
    token_ids       BLOB,                       -- little-endian int32 x n_tokens
    token_logprobs  BLOB,                       -- little-endian float32 x n_tokens
    text            TEXT,
    UNIQUE (group_id, sample_index)
);

CREATE VIEW advantages AS
SELECT id AS completion_id, advantage, kl_mean, kl_max, ref_logprob_sum
FROM completions WHERE advantage IS NOT NULL;

-- A completion's verdicts in the order they were given (idx), stored clustered by completion.
CREATE TABLE rewards (
    completion_id   INTEGER NOT NULL REFERENCES completions(id),
    idx             INTEGER NOT NULL,
    run_id          INTEGER NOT NULL,
    step            INTEGER NOT NULL,
    verifier        TEXT NOT NULL,
    version         TEXT NOT NULL,
    kind            TEXT NOT NULL CHECK (kind = 'pass' OR kind = 'fail' OR kind = 'skip'
                                         OR kind = 'timeout' OR kind = 'error'),
    label           TEXT,
    score           REAL NOT NULL,
    details_json    TEXT,
    ms              REAL,
    PRIMARY KEY (completion_id, idx)
) WITHOUT ROWID;

-- Per group and verifier: a summary of that verifier's verdicts on the group's completions,
-- written with them, so per-verifier stats read one row per group instead of one per verdict.
CREATE TABLE group_verifiers (
    group_id        INTEGER NOT NULL REFERENCES groups(id),
    verifier        TEXT NOT NULL,
    version         TEXT NOT NULL,
    run_id          INTEGER NOT NULL,
    step            INTEGER NOT NULL,
    n               INTEGER NOT NULL,           -- verdicts
    n_pass          INTEGER NOT NULL,
    n_fail          INTEGER NOT NULL,
    n_skip          INTEGER NOT NULL,
    n_timeout       INTEGER NOT NULL,
    n_error         INTEGER NOT NULL,
    score_sum       REAL NOT NULL,              -- over the non-skip verdicts
    score_sq_sum    REAL NOT NULL,              -- sum of squared scores, same verdicts
    ms_sum          REAL NOT NULL,
    PRIMARY KEY (group_id, verifier, version)
) WITHOUT ROWID;

CREATE TABLE batches (
    id              INTEGER PRIMARY KEY,        -- the trainer bridge's batch id
    run_id          INTEGER REFERENCES runs(id),
    step            INTEGER NOT NULL,
    n_groups        INTEGER NOT NULL,
    n_bytes         INTEGER NOT NULL,
    bytes           BLOB,                       -- kept until acknowledged, then dropped
    created_at      REAL NOT NULL,
    published_at    REAL,
    acked_at        REAL
);
CREATE INDEX batches_unacked ON batches (run_id, id) WHERE acked_at IS NULL;
