-- Schema version 5: the MoE routes `grpo rollout --record-routes` records, kept per group: the
-- prompt's once (its samples share one prefill), each completion's beside it (every token but the
-- last, which the rollout never fed to the model). Each blob is a zlib stream of the ids, token
-- after token, per token [moe_layer][k]: one byte each when experts <= 256, else int16
-- little-endian. raw_bytes and stored_bytes sum the group's blobs before and after compression.

CREATE TABLE group_routes (
    group_id        INTEGER PRIMARY KEY REFERENCES groups(id),
    experts         INTEGER NOT NULL,           -- n_routed_experts (ids are below it)
    layers          INTEGER NOT NULL,           -- MoE layers
    k               INTEGER NOT NULL,           -- experts per token
    n_prompt        INTEGER NOT NULL,           -- prompt tokens in prompt_routes
    raw_bytes       INTEGER NOT NULL,
    stored_bytes    INTEGER NOT NULL,
    prompt_routes   BLOB NOT NULL
);

CREATE TABLE completion_routes (
    group_id        INTEGER NOT NULL REFERENCES groups(id),
    sample_index    INTEGER NOT NULL,
    n_tokens        INTEGER NOT NULL,           -- routed tokens: the completion's but its last
    routes          BLOB NOT NULL,
    PRIMARY KEY (group_id, sample_index)
) WITHOUT ROWID;
