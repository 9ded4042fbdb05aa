/* Private to rollout/engine: the scheduler's state (scheduler.c), shared with the multi-turn
 * steps (turns.c). */
#ifndef GRPO_SCHED_INT_H
#define GRPO_SCHED_INT_H

#include "rollout/engine/engine_int.h"

#include <pthread.h>

/* A sample's phase: waiting for its group's shared prompt, prefilling privately, decoding,
 * done, parked while a tool or an environment answers, feeding an observation. */
enum { PH_WAIT = 0, PH_PREFILL = 1, PH_DECODE = 2, PH_DONE = 3, PH_PARKED = 4, PH_OBS = 5 };

#define SPEC_MAX 3 /* most draft tokens per step (grpo_rollout_opts.speculative) */

typedef struct sample_state {
    int phase;
    int32_t kv;        /* KV sequence, -1 when none */
    int32_t prefilled; /* private mode: prompt tokens prefilled so far */
    int32_t pending;   /* last sampled token, to feed at the next step */
    int32_t cap;
    grpo_buf text;          /* decoded bytes so far */
    size_t route_row_bytes; /* routes kept per token (record_routes), else 0 */
    int32_t feed_from;      /* PH_OBS: the next token of tokens[] to feed */
    size_t scan_from;       /* text before this byte belongs to earlier turns */
    int32_t turns_cap;
    /* speculative decoding (spec_sched.c) */
    int32_t mkv, mlen; /* MTP sequence (-1 when none) and the positions it holds */
    const float *hsrc; /* this step's final hidden rows, from position hpos0, or NULL */
    int32_t hpos0;
    int32_t n_draft;          /* drafts made for the next verify */
    int32_t vt[1 + SPEC_MAX]; /* the verify item: the pending token, then the drafts */
    float *dlogits;           /* (SPEC_MAX, vocab): each draft's MTP logits */
    uint8_t *vroutes;         /* (1 + SPEC_MAX) routes rows of the verify item */
} sample_state;

typedef struct group_state {
    grpo_rollout_group *g; /* the result being built */
    sample_state *s;
    int32_t parent_kv, parent_prefilled;
    int32_t parent_mkv, parent_mlen; /* speculation: the prompt's MTP sequence */
    int32_t n_active;
    int32_t prompt_routed;                 /* every prompt token's routes are in g->prompt_routes */
    size_t pages_shared, pages_per_sample; /* reservation */
    char *stop_store[GRPO_ROLLOUT_MAX_STOP];
    struct group_state *next;
} group_state;

typedef struct done_node {
    grpo_rollout_group *g;
    struct done_node *next;
} done_node;

/* One forward row: which group and which sample (-1: the shared parent) it belongs to. */
typedef struct row_ref {
    group_state *gs;
    int32_t sample;
    int32_t last_chunk; /* 1: the row's logits are used (end of a prompt, or a decode row) */
    int32_t verify;     /* speculation: a verify item (pending token + drafts) */
} row_ref;

struct grpo_rollout {
    grpo_rollout_backend be;
    grpo_rollout_opts opts;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    group_state *queue_head, *queue_tail; /* submitted, not admitted (mu) */
    group_state *active;                  /* admitted (scheduler thread only) */
    done_node *done_head, *done_tail;     /* completed, not popped (mu) */
    uint64_t next_id, queued, popped;     /* ids handed out; groups queued; groups popped */
    int closed, cancel, paused;
    int64_t policy_version;
    size_t budget, reserved;
    grpo_rollout_stats st;
    /* per-step buffers */
    grpo_fwd_item *items;
    void **routes; /* per item: where its routes go (record_routes), else NULL */
    row_ref *rows;
    int32_t items_cap;
    float *logits;
    size_t logits_cap;
    void **scratch;     /* one sampler scratch per sampling thread */
    grpo_pool *pool;    /* sampling threads, or NULL */
    struct draw *draws; /* this step's draws */
    grpo_rollout_draw *dreq; /* the same, for the backend's own sampler (be.forward_sample) */
    int32_t n_draws, draws_cap;
    int n_scratch;
    uint32_t rr; /* round-robin start for capped decode batches */
    /* speculation: logits rows per item, every position's hidden state, the MTP passes */
    int32_t *tail;
    float *hidden;
    size_t hidden_cap;
    struct spec_bufs *spec;
};

/* One draw to make this step: the index of its logits row (in r->logits, or the backend's when
 * it draws itself) and the sample it is for. */
typedef struct draw {
    int32_t ix;
    group_state *gs;
    int32_t sample, tok;
    float lr, lp;
} draw;

/* scheduler.c */
grpo_err grpo_engine__grow_sample(grpo_rollout *r, grpo_rollout_sample *o, sample_state *s,
                                  int want_proc);
grpo_err grpo_engine__add_item(grpo_rollout *r, int32_t *n, int32_t seq, int32_t pos0,
                               int32_t len, const int32_t *tok, group_state *gs, int32_t sample,
                               int32_t last);
grpo_err grpo_engine__finish_sample(grpo_rollout *r, group_state *gs, int32_t i);

/* spec_sched.c: speculative decoding with the backend's MTP module. */
grpo_err grpo_engine__spec_init(grpo_rollout *r);
void grpo_engine__spec_fini(grpo_rollout *r);
/* The verify item of a decoding sample: its pending token and its drafts. */
grpo_err grpo_engine__spec_item(grpo_rollout *r, int32_t *n, group_state *gs, int32_t i);
/* The step's forward: logits rows per r->tail, hidden states of every position. */
grpo_err grpo_engine__spec_forward(grpo_rollout *r, int32_t n);
/* Before the draws: the prompt chunks' MTP positions (every one whose next token is known). */
grpo_err grpo_engine__spec_prefill(grpo_rollout *r, int32_t n);
/* A group's samples were forked from its parent: fork its MTP sequence too. */
grpo_err grpo_engine__spec_fork(grpo_rollout *r, group_state *gs, const float *parent_hidden);
/* Accepts or replaces the verify items' drafts and emits the tokens. */
grpo_err grpo_engine__spec_verify(grpo_rollout *r, int32_t n);
/* After the draws: the MTP catches up with every sample that moved, then drafts. */
grpo_err grpo_engine__spec_draft(grpo_rollout *r);
void grpo_engine__spec_free_sample(grpo_rollout *r, sample_state *s);
void grpo_engine__spec_free_group(grpo_rollout *r, group_state *gs);
/* scheduler.c's emit, for the verify step. */
grpo_err grpo_engine__emit(grpo_rollout *r, group_state *gs, int32_t i, int32_t tok, float lr,
                           float lp);

/* turns.c: parks a sample whose text now ends an action (after emit appended its token). */
grpo_err grpo_engine__turns_detect(grpo_rollout *r, group_state *gs, int32_t i, size_t new_from);
/* Polls the parked samples: a sample whose observation came is fed (PH_OBS) or finished.
 * *parked: samples still parked. */
grpo_err grpo_engine__turns_poll(grpo_rollout *r, int32_t *parked);
/* Adds this step's observation chunks (before prefill; they share its token budget). */
grpo_err grpo_engine__turns_build(grpo_rollout *r, int32_t *n, int32_t *budget);
void grpo_engine__turns_free(grpo_rollout_sample *o);

#endif
