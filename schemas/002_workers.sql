-- Schema version 2: distributed workers. A group remembers which worker produced it and how many
-- times its lease was re-issued; leases records every lease the coordinator handed out.

ALTER TABLE groups ADD COLUMN worker_id TEXT;
ALTER TABLE groups ADD COLUMN lease_attempt INTEGER NOT NULL DEFAULT 0;

CREATE TABLE leases (
    id              INTEGER PRIMARY KEY,
    run_id          INTEGER NOT NULL REFERENCES runs(id),
    step            INTEGER NOT NULL,
    prompt_id       INTEGER NOT NULL REFERENCES prompts(id),
    seed            INTEGER NOT NULL,
    attempt         INTEGER NOT NULL DEFAULT 0,  -- 0 first issue, n after n re-issues
    worker_id       TEXT,
    issued_at       REAL NOT NULL,
    deadline        REAL,
    finished_at     REAL,
    state           TEXT NOT NULL DEFAULT 'issued'
                    CHECK (state = 'issued' OR state = 'done' OR state = 'expired'
                           OR state = 'failed')
);
CREATE INDEX leases_key ON leases (run_id, step, prompt_id, seed);
