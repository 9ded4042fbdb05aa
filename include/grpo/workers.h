/* grpo/workers.h: rollout workers on a pool of machines. The pieces `grpo serve` (the
 * coordinator) and `grpo worker` are built from: the wire protocol and its codec, the coordinator's
 * lease table, and a thin request/reply transport over NNG.
 *
 * Pattern: workers PULL. Each worker holds a REQ socket dialed to the coordinator's REP socket and
 * asks for work when it has room (natural load balancing: a fast worker simply asks more often).
 * Results and heartbeats travel the same way, so one listening URL (tcp://host:port between hosts,
 * ipc:///path on one host) is all a deployment needs, and workers may join at any time.
 *
 * Leases: a prompt group is handed out as a lease with a deadline; heartbeats push the deadline
 * back; a lease whose deadline passes is re-issued (attempt + 1) to the next worker that asks.
 * Completions are a pure function of (weights, prompt, params, seed, prompt id, sample index), so a
 * late result of an expired lease is as good as the re-issued one: the first to arrive is recorded,
 * later ones are duplicates.
 *
 * Wire format (little-endian): u32 magic "GRPW", u16 protocol version, u16 message type, then the
 * type's fields. Strings are u32 length + bytes (0xFFFFFFFF = absent), UTF-8 without NUL; the
 * completion text is bytes (model output need not be UTF-8). Arrays are u32 count + elements.
 * The decoder checks every size against the bytes left and the limits below before allocating. */
#ifndef GRPO_WORKERS_H
#define GRPO_WORKERS_H

#include "grpo/common.h"
#include "grpo/rollout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 2: MoE routes with a result (grpo serve --record-routes); 3: tools (the WORK params' tools
 * config, each sample's turns in a result) */
#define GRPO_WORKERS_PROTOCOL 5
#define GRPO_WORKERS_MAGIC 0x57505247u            /* "GRPW" as little-endian bytes */
#define GRPO_WORKERS_MAX_MSG (256u << 20)         /* bytes per message */
#define GRPO_WORKERS_MAX_STR (16u << 20)          /* bytes per string field */
#define GRPO_WORKERS_MAX_ID 256                   /* bytes of a worker id */
#define GRPO_WORKERS_MAX_LEASES 64                /* leases per WORK message / ids per heartbeat */
#define GRPO_WORKERS_MAX_GROUP 65536              /* samples per group */
#define GRPO_WORKERS_MAX_TOKENS (1 << 24)         /* tokens per prompt or completion */
#define GRPO_WORKERS_MAX_TERMS 8                  /* reward terms per sample */
#define GRPO_WORKERS_MAX_TURNS 4096               /* turns per sample */
#define GRPO_WORKERS_MAX_TURN_RECORD (256u << 10) /* bytes of a turn's record_json */
#define GRPO_WORKERS_MAX_TOOLS 4096               /* bytes of the tools list */

typedef enum grpo_wmsg_type {
    /* worker -> coordinator (requests) */
    GRPO_WMSG_PULL = 1,      /* "I can take `want` more groups" */
    GRPO_WMSG_HEARTBEAT = 2, /* "I am alive and hold these leases" */
    GRPO_WMSG_RESULT = 3,    /* one finished group */
    /* coordinator -> worker (replies) */
    GRPO_WMSG_WORK = 16, /* leases + the generation params */
    GRPO_WMSG_WAIT = 17, /* nothing to hand out now; ask again after retry_ms */
    GRPO_WMSG_STOP = 18, /* the run is over: finish and exit */
    GRPO_WMSG_ACK = 19,  /* a heartbeat or result was received (status says how it was taken) */
    GRPO_WMSG_ERROR = 20 /* the request was malformed (message says why) */
} grpo_wmsg_type;

/* The policy the coordinator wants groups sampled from. Sent in every reply, so a worker learns of
 * a new version at its next request. */
typedef struct grpo_wpolicy {
    int64_t version;       /* 0 = the weights the worker started with */
    char *weights_path;    /* safetensors file of `version` (shared filesystem), or NULL for 0 */
    char *sha256;          /* 64 hex chars, or NULL */
    int32_t max_staleness; /* groups of a version more than this behind are refused (-1 = any) */
} grpo_wpolicy;

/* How to generate: the same for every lease of a run. */
typedef struct grpo_wparams {
    int32_t group_size; /* G */
    uint64_t seed;
    grpo_sampling sampling;
    int32_t max_new_tokens;
    int32_t logprobs;    /* GRPO_LOGPROBS_* */
    char *template_name; /* chat template, or NULL for the worker's default */
    int32_t n_stop;
    char *stop[GRPO_ROLLOUT_MAX_STOP];
    int32_t n_stop_ids;
    int32_t stop_ids[GRPO_ROLLOUT_MAX_STOP];
    int32_t record_routes; /* 1: return every group's MoE routes (grpo serve --record-routes) */
    /* Tools and environments (grpo_run_tools of `grpo serve --tools`): the list the worker loads
     * itself ("python" and/or plugin paths on the worker's machine), or NULL for one-turn
     * samples; the limits as grpo_run_tools has them (the tool threads are the worker's own). */
    char *tools;
    int32_t max_calls, max_turns, max_obs_tokens;
    double tool_time_s;
    int32_t speculative; /* MTP draft tokens per step (grpo serve --speculative; 0 = off) */
    int32_t numerics;    /* grpo_numerics the workers load the model with (grpo serve --numerics) */
    int32_t kv_dtype;    /* grpo_kv_dtype of the workers' KV cache (grpo serve --kv-dtype) */
} grpo_wparams;

typedef struct grpo_wlease {
    uint64_t lease_id;
    int32_t attempt;   /* 0 first issue, n after n re-issues */
    double timeout_s;  /* the lease lapses this long after the last heartbeat */
    char *prompt_id;   /* the prompt's id (seeds its samples) */
    char *record_json; /* the prompt's JSONL line */
} grpo_wlease;

typedef struct grpo_wterm {
    char *verifier, *version, *label, *details_json; /* label, details_json may be NULL */
    int32_t kind;                                    /* grpo_verdict_kind */
    double score, ms;
} grpo_wterm;

/* One turn of a completion (grpo_rollout_turn as the store records it, grpo_turn_rec). The
 * decoder checks that a sample's turns lie in its tokens in order: action_end + n_obs <= the
 * next turn's action_end, the last one's <= n_tokens. */
typedef struct grpo_wturn {
    int32_t action_end; /* tokens[0..action_end) came before this turn's observation */
    int32_t n_obs;      /* tokens[action_end .. action_end + n_obs) are the observation */
    int32_t n_obs_cut;  /* observation tokens dropped for lack of room */
    double at_ms;       /* when the sample parked, from the group's admission */
    double wait_ms;     /* from parking to the observation */
    char *record_json;  /* a JSON object (at most GRPO_WORKERS_MAX_TURN_RECORD bytes), or NULL */
} grpo_wturn;

typedef struct grpo_wsample {
    int32_t index;  /* sample index in the group */
    int32_t finish; /* grpo_finish */
    int32_t n_tokens;
    int32_t *tokens; /* n_tokens */
    float *logprobs; /* n_tokens (raw) */
    char *text;      /* text_len bytes + a NUL the decoder adds; may hold NUL */
    uint32_t text_len;
    double reward;
    int32_t skipped; /* the rewarder said skip: excluded from the advantages */
    int32_t n_terms;
    grpo_wterm *terms;
    /* With the result's routes: tokens[0 .. n_tokens - 1)'s, one row of the result's
     * grpo_wresult_route_row_bytes each (the last token never went through the model); else
     * NULL */
    uint8_t *routes;
    int32_t n_turns; /* 0 for a one-turn sample */
    grpo_wturn *turns;
} grpo_wsample;

typedef struct grpo_wresult {
    uint64_t lease_id;
    int32_t attempt;
    int64_t policy_version;
    char *prompt_id;
    int32_t n_prompt;
    int32_t *prompt; /* prompt token ids */
    double gen_ms, verify_ms;
    int32_t n_samples;
    grpo_wsample *samples;
    /* MoE routes (docs/routes.md), or route_experts 0 (then layers and k 0 too): per routed
     * token, per MoE layer, k expert ids below route_experts, 1 byte each when route_experts
     * <= 256, else int16 little-endian. prompt_routes: the n_prompt prompt tokens' rows. */
    int32_t route_experts, route_layers, route_k;
    uint8_t *prompt_routes;
} grpo_wresult;

/* Bytes of one token's routes in r (0 without routes). */
size_t grpo_wresult_route_row_bytes(const grpo_wresult *r);

/* ACK status */
#define GRPO_WACK_OK 0        /* heartbeat taken / result recorded */
#define GRPO_WACK_DUPLICATE 1 /* the group was already recorded (a re-issued lease finished) */
#define GRPO_WACK_STALE 2     /* the result's policy version is too old; the group is re-issued */
#define GRPO_WACK_REFUSED 3   /* the result does not match its lease (wrong prompt, group size) */

/* One message. Which fields a type uses is written beside them. A decoded message owns every
 * pointer in it (grpo_wmsg_fini frees them); for encoding the pointers are only read. */
typedef struct grpo_wmsg {
    int32_t type;           /* grpo_wmsg_type */
    char *worker_id;        /* PULL, HEARTBEAT, RESULT */
    int64_t worker_version; /* PULL, HEARTBEAT: policy version the worker has loaded */
    double tokens_per_s;    /* PULL, HEARTBEAT: the worker's recent throughput */
    uint64_t groups_done;   /* PULL, HEARTBEAT: groups it returned so far */
    int32_t want;           /* PULL: groups it can take now (1..GRPO_WORKERS_MAX_LEASES) */
    int32_t n_ids;          /* HEARTBEAT: leases held */
    uint64_t *ids;
    grpo_wpolicy policy; /* WORK, WAIT, ACK */
    grpo_wparams params; /* WORK */
    int32_t n_leases;    /* WORK */
    grpo_wlease *leases;
    uint32_t retry_ms;   /* WAIT */
    int32_t status;      /* ACK: GRPO_WACK_* */
    char *message;       /* ERROR */
    grpo_wresult result; /* RESULT */
} grpo_wmsg;

/* Encodes m into a new buffer (*bytes, free()). GRPO_EINVAL when a field breaks a limit. */
grpo_err grpo_wmsg_encode(const grpo_wmsg *m, void **bytes, size_t *len);
/* Decodes bytes into *out (zeroed first). Never reads past len; every count and size is checked
 * before allocating; strings must be UTF-8 without NUL. GRPO_EFORMAT (with a message naming the
 * field) for anything malformed, GRPO_EVERSION for another protocol version. *out is valid to
 * fini either way. */
grpo_err grpo_wmsg_decode(grpo_wmsg *out, const void *bytes, size_t len);
/* Frees what a decoded message owns and zeroes it. NULL harmless. */
void grpo_wmsg_fini(grpo_wmsg *m);
/* "pull", "heartbeat", ... ("?" for others). */
const char *grpo_wmsg_type_name(int32_t type);

/* ---- the lease table (coordinator state) ---------------------------------------------------- */

/* Items 0..n-1 (prompt groups) move pending -> leased -> done. A lease lapses `timeout_s` after
 * it was issued or last heartbeat; its item then goes to the front of the queue and is re-issued
 * with attempt + 1. Lease ids are (attempt << 40 | item) + 1, so a result names its item even after
 * a coordinator restart. Not thread-safe (the coordinator has one thread). */
typedef struct grpo_lease_table grpo_lease_table;

typedef struct grpo_lease_counts {
    size_t items, pending, leased, done;
    uint64_t issued;   /* leases handed out */
    uint64_t reissued; /* of those, re-issues of an expired or refused lease */
    uint64_t expired;  /* leases that lapsed */
    uint64_t backups;  /* of the issued, backup leases (issue_backup) */
} grpo_lease_counts;

typedef enum grpo_lease_outcome {
    GRPO_LEASE_NEW = 0,       /* first result for the item: record it */
    GRPO_LEASE_DUPLICATE = 1, /* the item is done already */
    GRPO_LEASE_UNKNOWN = 2    /* the id names no item */
} grpo_lease_outcome;

/* Called for each lease that lapses or whose worker left: its item and attempt, the worker, and
 * the tag set on the lease (0 when none). */
typedef void (*grpo_lease_lapse_fn)(void *ctx, size_t item, int32_t attempt, const char *worker,
                                    int64_t tag);

grpo_err grpo_lease_table_create(grpo_lease_table **out, size_t n_items, double timeout_s);
void grpo_lease_table_destroy(grpo_lease_table *t);
/* Marks an item done before any lease (recorded by an earlier coordinator). */
void grpo_lease_table_mark_done(grpo_lease_table *t, size_t item);
/* Hands the next item (a lapsed one first, else the next pending one) to `worker` at time now.
 * Returns 1 and fills the outputs, or 0 when nothing is left to hand out. */
int grpo_lease_table_issue(grpo_lease_table *t, const char *worker, double now, size_t *item,
                           uint64_t *lease_id, int32_t *attempt);
/* At a run's tail (nothing pending), a backup lease for `worker`: a second lease on the item
 * leased longest ago (at least min_age_s before now) to another worker and without a backup
 * yet. Both leases stand; the first result is recorded (the other is then a duplicate), and if
 * the primary lapses the backup becomes the primary. Returns 1 and fills the outputs, or 0. */
int grpo_lease_table_issue_backup(grpo_lease_table *t, const char *worker, double now,
                                  double min_age_s, size_t *item, uint64_t *lease_id,
                                  int32_t *attempt);
/* Attaches the caller's tag (e.g. the lease's store row) to a lease still held (primary or
 * backup); a backup promoted to primary keeps its tag. */
void grpo_lease_table_set_tag(grpo_lease_table *t, uint64_t lease_id, int64_t tag);
/* Pushes the deadline of a lease `worker` still holds; 0 when it holds it no longer. */
int grpo_lease_table_heartbeat(grpo_lease_table *t, uint64_t lease_id, const char *worker,
                               double now);
/* Returns every lease `worker` holds to the queue at once (its connection closed); calls fn like
 * expire(). Returns how many. */
size_t grpo_lease_table_expire_worker(grpo_lease_table *t, const char *worker,
                                      grpo_lease_lapse_fn fn, void *ctx);
/* Returns the leases whose deadline is before now to the queue; calls fn (may be NULL) for each
 * with the item and the lapsed attempt. Returns how many lapsed. */
size_t grpo_lease_table_expire(grpo_lease_table *t, double now, grpo_lease_lapse_fn fn, void *ctx);
/* What a result for lease_id is; sets *item (NEW, DUPLICATE) and *attempt. It does not change
 * the table: call complete() once the group is recorded, or release() to re-queue it. */
grpo_lease_outcome grpo_lease_table_lookup(const grpo_lease_table *t, uint64_t lease_id,
                                           size_t *item, int32_t *attempt);
/* The item is recorded: done for good (from any state). */
void grpo_lease_table_complete(grpo_lease_table *t, size_t item);
/* Re-queues a leased item at once (its result was refused); a backup lease, if any, becomes
 * the primary instead. */
void grpo_lease_table_release(grpo_lease_table *t, size_t item);
/* The attempt number of an item's current primary lease. */
int32_t grpo_lease_table_attempt(const grpo_lease_table *t, size_t item);
void grpo_lease_table_counts(const grpo_lease_table *t, grpo_lease_counts *out);

/* ---- transport: NNG REQ/REP ------------------------------------------------------------------ */

/* The coordinator's end: a REP socket listening on url. One request is answered before the next
 * is received. Not thread-safe. */
typedef struct grpo_wserver grpo_wserver;
grpo_err grpo_wserver_create(grpo_wserver **out, const char *url);
void grpo_wserver_destroy(grpo_wserver *s);
/* Receives the next request into *req (fini it). GRPO_ETIMEOUT when none came within timeout_ms.
 * A malformed request is answered with an ERROR message here, logged, and GRPO_EFORMAT returned;
 * the caller just receives again. */
grpo_err grpo_wserver_recv(grpo_wserver *s, grpo_wmsg *req, int timeout_ms);
/* The connection (NNG pipe id, > 0) the request last received came on. */
uint32_t grpo_wserver_last_pipe(const grpo_wserver *s);
/* Moves up to max ids of connections that closed since the last call into ids; returns how many.
 * A worker whose every connection closed has died or been cut off: its leases need not wait for
 * their deadline. (At most 4096 closures are remembered between calls; older ones are dropped and
 * their leases lapse by deadline as usual.) */
int grpo_wserver_closed_pipes(grpo_wserver *s, uint32_t *ids, int max);
/* Answers the request last received. */
grpo_err grpo_wserver_reply(grpo_wserver *s, const grpo_wmsg *rep);
/* Bytes received and sent so far. */
void grpo_wserver_bytes(const grpo_wserver *s, uint64_t *in, uint64_t *out);

/* A worker's end: a REQ socket dialed to url (redials on its own while the coordinator is away).
 * Not thread-safe: use one per thread. */
typedef struct grpo_wclient grpo_wclient;
grpo_err grpo_wclient_create(grpo_wclient **out, const char *url);
void grpo_wclient_destroy(grpo_wclient *c);
/* Sends req and waits up to timeout_ms for the reply (*rep, fini it). GRPO_ETIMEOUT when none came
 * (the coordinator is away or busy: call again), GRPO_EFORMAT for a malformed reply; an ERROR
 * reply is returned as a message of that type. */
grpo_err grpo_wclient_call(grpo_wclient *c, const grpo_wmsg *req, grpo_wmsg *rep, int timeout_ms);

#ifdef __cplusplus
}
#endif
#endif
