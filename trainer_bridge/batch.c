/* The batch codec: a grpo_batch as safetensors bytes (schemas/batch_format.md) and back, with
 * every invariant checked on the way in and on the way out. */
#include "trainer_bridge/bridge_int.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

enum { DIM_SEQ, DIM_SEQ1, DIM_TOK };

typedef struct {
    const char *name;
    st_dtype dt;
    int dim;
    uint32_t flag; /* 0 = always present */
    size_t off;    /* offset of the pointer inside grpo_batch */
} field;

/* Ordered by element size so that every tensor is naturally aligned in the data section. */
static const field fields[] = {
    {"seq_offsets", ST_I64, DIM_SEQ1, 0, offsetof(grpo_batch, seq_offsets)},
    {"group_ids", ST_I64, DIM_SEQ, 0, offsetof(grpo_batch, group_ids)},
    {"policy_versions", ST_I64, DIM_SEQ, GRPO_BATCH_HAS_VERSIONS,
     offsetof(grpo_batch, policy_versions)},
    {"tokens", ST_I32, DIM_TOK, 0, offsetof(grpo_batch, tokens)},
    {"prompt_lens", ST_I32, DIM_SEQ, 0, offsetof(grpo_batch, prompt_lens)},
    {"sample_idx", ST_I32, DIM_SEQ, 0, offsetof(grpo_batch, sample_idx)},
    {"logprobs", ST_F32, DIM_TOK, 0, offsetof(grpo_batch, logprobs)},
    {"logprobs_processed", ST_F32, DIM_TOK, GRPO_BATCH_HAS_PROCESSED,
     offsetof(grpo_batch, logprobs_processed)},
    {"ref_logprobs", ST_F32, DIM_TOK, GRPO_BATCH_HAS_REF, offsetof(grpo_batch, ref_logprobs)},
    {"advantages", ST_F32, DIM_SEQ, 0, offsetof(grpo_batch, advantages)},
    {"token_advantages", ST_F32, DIM_TOK, GRPO_BATCH_HAS_TOKEN_ADV,
     offsetof(grpo_batch, token_advantages)},
    {"rewards", ST_F32, DIM_SEQ, 0, offsetof(grpo_batch, rewards)},
    {"loss_mask", ST_U8, DIM_TOK, 0, offsetof(grpo_batch, loss_mask)},
    {"tool_mask", ST_U8, DIM_TOK, GRPO_BATCH_HAS_TOOL_MASK, offsetof(grpo_batch, tool_mask)},
};
#define N_FIELDS (sizeof fields / sizeof fields[0])
#define KNOWN_FLAGS                                                                                \
    (GRPO_BATCH_HAS_REF | GRPO_BATCH_HAS_TOKEN_ADV | GRPO_BATCH_HAS_VERSIONS |                     \
     GRPO_BATCH_HAS_ROUTES | GRPO_BATCH_HAS_PROCESSED | GRPO_BATCH_HAS_TOOL_MASK)
#define MAX_STR 1u << 20 /* run id, sampling JSON, hash: at most 1 MiB each */

/* Pointer fields are read and written with memcpy: no aliasing through void **. */
static void *
fget(const grpo_batch *b, const field *f)
{
    void *p;
    memcpy(&p, (const char *)b + f->off, sizeof p);
    return p;
}

static void
fset(grpo_batch *b, const field *f, void *p)
{
    memcpy((char *)b + f->off, &p, sizeof p);
}

static uint64_t
fcount(const grpo_batch *b, const field *f)
{
    return f->dim == DIM_TOK ? b->n_tok : f->dim == DIM_SEQ1 ? b->n_seq + 1 : b->n_seq;
}

static bool
present(uint32_t flags, const field *f)
{
    return f->flag == 0 || (flags & f->flag);
}

void
grpo_batch_destroy(grpo_batch *b)
{
    if (b == NULL)
        return;
    for (size_t i = 0; i < N_FIELDS; i++)
        free(fget(b, &fields[i]));
    free(b->route_prompt_offsets), free(b->route_prompt), free(b->route_completion);
    free(b->run_id);
    free(b->sampling_json);
    free(b->reward_config_hash);
    free(b);
}

grpo_err
grpo_batch_set_str(grpo_batch *b, char **field, const char *s)
{
    char *c = strdup(s ? s : "");
    if (c == NULL)
        return grpo__fail(GRPO_ENOMEM, "batch: out of memory");
    (void)b;
    free(*field);
    *field = c;
    return GRPO_OK;
}

grpo_err
grpo_batch_create(grpo_batch **out, const char *run_id, size_t n_seq, size_t n_tok, uint32_t flags)
{
    grpo_err err = GRPO_OK;
    *out = NULL;
    if (n_seq > ((size_t)1 << 40) || n_tok > ((size_t)1 << 40) || (flags & ~KNOWN_FLAGS))
        return grpo__fail(GRPO_EINVAL, "batch: bad size (%zu sequences, %zu tokens) or flags",
                          n_seq, n_tok);
    grpo_batch *b = calloc(1, sizeof *b);
    if (b == NULL)
        return grpo__fail(GRPO_ENOMEM, "batch: out of memory");
    b->n_seq = n_seq;
    b->n_tok = n_tok;
    b->flags = flags;
    for (size_t i = 0; i < N_FIELDS && err == GRPO_OK; i++) {
        if (!present(flags, &fields[i]))
            continue;
        size_t n = (size_t)fcount(b, &fields[i]);
        void *p = calloc(n ? n : 1, grpo_bridge__st_dtype_size(fields[i].dt));
        if (p == NULL)
            err = grpo__fail(GRPO_ENOMEM, "batch: out of memory for \"%s\"", fields[i].name);
        fset(b, &fields[i], p);
    }
    if (err == GRPO_OK && (err = grpo_batch_set_str(b, &b->run_id, run_id)) == GRPO_OK &&
        (err = grpo_batch_set_str(b, &b->sampling_json, "{}")) == GRPO_OK)
        err = grpo_batch_set_str(b, &b->reward_config_hash, "");
    if (err != GRPO_OK) {
        grpo_batch_destroy(b);
        return err;
    }
    *out = b;
    return GRPO_OK;
}

/* ---- validation ------------------------------------------------------------------------------ */

static grpo_err
check_str(const char *s, const char *what, bool nonempty)
{
    if (s == NULL)
        return grpo__fail(GRPO_EINVAL, "batch: %s is NULL", what);
    size_t n = strlen(s);
    if ((nonempty && n == 0) || n > MAX_STR || !grpo__utf8_valid(s, n))
        return grpo__fail(GRPO_EINVAL, "batch: %s is %s", what,
                          n == 0        ? "empty"
                          : n > MAX_STR ? "too long"
                                        : "not valid UTF-8");
    return GRPO_OK;
}

static grpo_err
check_meta(const grpo_batch *b)
{
    grpo_err err;
    if ((err = check_str(b->run_id, "run_id", true)) != GRPO_OK ||
        (err = check_str(b->sampling_json, "sampling", false)) != GRPO_OK ||
        (err = check_str(b->reward_config_hash, "reward_config_hash", false)) != GRPO_OK)
        return err;
    if (b->batch_id < 0 || b->step < 0 || b->policy_version < 0)
        return grpo__fail(GRPO_EINVAL,
                          "batch %" PRId64 ": batch_id, step and policy_version "
                          "must be >= 0",
                          b->batch_id);
    if (b->flags & ~KNOWN_FLAGS)
        return grpo__fail(GRPO_EINVAL, "batch %" PRId64 ": unknown flags 0x%x", b->batch_id,
                          (unsigned)b->flags);
    for (size_t i = 0; i < N_FIELDS; i++)
        if (present(b->flags, &fields[i]) && fget(b, &fields[i]) == NULL)
            return grpo__fail(GRPO_EINVAL, "batch %" PRId64 ": \"%s\" is NULL", b->batch_id,
                              fields[i].name);
    return GRPO_OK;
}

/* The per-token checks run over blocks of a fixed length with no early exit inside a block, so
 * that the compiler turns them into vector code (they read every byte of a batch on the way out);
 * the exact position of a fault is looked for only once a block has one. */
#define BLOCK 1024

/* 1 when some x[0..n) is an infinity or a NaN (all exponent bits set). */
static int
block_nonfinite(const float *x, size_t n)
{
    uint32_t acc = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        acc |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
    }
    return acc != 0;
}

static grpo_err
check_finite(const float *x, size_t n, const char *name, int64_t id)
{
    for (size_t lo = 0; lo < n; lo += BLOCK) {
        size_t k = n - lo < BLOCK ? n - lo : BLOCK;
        if (k == BLOCK ? !block_nonfinite(x + lo, BLOCK) : !block_nonfinite(x + lo, k))
            continue;
        for (size_t i = lo; i < lo + k; i++)
            if (block_nonfinite(x + i, 1))
                return grpo__fail(GRPO_EINVAL, "batch %" PRId64 ": %s[%zu] is not finite", id, name,
                                  i);
    }
    return GRPO_OK;
}

/* 1 when some token in [0, n) has a negative id, a loss_mask or tool_mask above 1, or a loss_mask
 * above its tool_mask (tool may be NULL). */
static int
block_bad_tokens(const int32_t *tok, const uint8_t *loss, const uint8_t *tool, size_t n)
{
    uint32_t acc = 0;
    for (size_t i = 0; i < n; i++)
        acc |= (uint32_t)tok[i] >> 31 | (uint32_t)(loss[i] > 1);
    if (tool != NULL)
        for (size_t i = 0; i < n; i++)
            acc |= (uint32_t)(tool[i] > 1) | (uint32_t)(loss[i] > tool[i]);
    return acc != 0;
}

static grpo_err
check_tokens(const grpo_batch *b)
{
    for (size_t lo = 0; lo < b->n_tok; lo += BLOCK) {
        size_t k = b->n_tok - lo < BLOCK ? b->n_tok - lo : BLOCK;
        const uint8_t *tool = b->tool_mask ? b->tool_mask + lo : NULL;
        if (k == BLOCK ? !block_bad_tokens(b->tokens + lo, b->loss_mask + lo, tool, BLOCK)
                       : !block_bad_tokens(b->tokens + lo, b->loss_mask + lo, tool, k))
            continue;
        for (size_t t = lo; t < lo + k; t++) /* the block's first bad token */
            if (block_bad_tokens(b->tokens + t, b->loss_mask + t, tool ? tool + (t - lo) : NULL, 1))
                return grpo__fail(GRPO_EINVAL,
                                  "batch %" PRId64 ": token %zu has a negative id, a loss_mask "
                                  "or tool_mask other than 0/1, or a loss_mask set where "
                                  "tool_mask is 0",
                                  b->batch_id, t);
    }
    return GRPO_OK;
}

static grpo_err
check_seqs(const grpo_batch *b)
{
    const int64_t *off = b->seq_offsets;
    int64_t id = b->batch_id;
    if (off[0] != 0 || (uint64_t)off[b->n_seq] != b->n_tok)
        return grpo__fail(GRPO_EINVAL, "batch %" PRId64 ": seq_offsets must run from 0 to %zu", id,
                          b->n_tok);
    for (size_t i = 0; i < b->n_seq; i++) {
        if (off[i + 1] < off[i] || (uint64_t)off[i + 1] > b->n_tok)
            return grpo__fail(GRPO_EINVAL,
                              "batch %" PRId64 ": seq_offsets[%zu] = %" PRId64
                              " is out of order or out of bounds",
                              id, i + 1, off[i + 1]);
        if (b->prompt_lens[i] < 0 || b->prompt_lens[i] > off[i + 1] - off[i])
            return grpo__fail(GRPO_EINVAL,
                              "batch %" PRId64 ": prompt_lens[%zu] = %d is outside "
                              "[0, %" PRId64 "]",
                              id, i, b->prompt_lens[i], off[i + 1] - off[i]);
        if (b->group_ids[i] < 0 || b->sample_idx[i] < 0 ||
            (b->policy_versions && b->policy_versions[i] < 0))
            return grpo__fail(GRPO_EINVAL,
                              "batch %" PRId64 ": sequence %zu has a negative group "
                              "id, sample index or policy version",
                              id, i);
        for (int64_t t = off[i]; t < off[i] + b->prompt_lens[i]; t++)
            if (b->loss_mask[t])
                return grpo__fail(GRPO_EINVAL,
                                  "batch %" PRId64 ": loss_mask is set on prompt "
                                  "token %" PRId64,
                                  id, t);
    }
    return GRPO_OK;
}

/* ids = 0: the route ids are left to the encoding's copy when it checks them (fused_check). */
static grpo_err
validate(const grpo_batch *b, int ids)
{
    grpo_err err;
    if (b == NULL)
        return grpo__fail(GRPO_EINVAL, "batch: NULL");
    if ((err = check_meta(b)) != GRPO_OK || (err = check_seqs(b)) != GRPO_OK ||
        (err = check_tokens(b)) != GRPO_OK)
        return err;
    if ((err = check_finite(b->logprobs, b->n_tok, "logprobs", b->batch_id)) != GRPO_OK ||
        (err = check_finite(b->advantages, b->n_seq, "advantages", b->batch_id)) != GRPO_OK ||
        (err = check_finite(b->rewards, b->n_seq, "rewards", b->batch_id)) != GRPO_OK)
        return err;
    if (b->ref_logprobs &&
        (err = check_finite(b->ref_logprobs, b->n_tok, "ref_logprobs", b->batch_id)) != GRPO_OK)
        return err;
    if (b->logprobs_processed && (err = check_finite(b->logprobs_processed, b->n_tok,
                                                     "logprobs_processed", b->batch_id)) != GRPO_OK)
        return err;
    if (b->token_advantages && (err = check_finite(b->token_advantages, b->n_tok,
                                                   "token_advantages", b->batch_id)) != GRPO_OK)
        return err;
    return grpo_bridge__routes_check(b, ids);
}

grpo_err
grpo_batch_validate(const grpo_batch *b)
{
    return validate(b, 1);
}

/* ---- encode ---------------------------------------------------------------------------------- */

static grpo_err
meta_kv(grpo_buf *o, const char *k, const char *v, bool last)
{
    grpo_err err;
    if ((err = grpo__buf_json_str(o, k)) != GRPO_OK ||
        (err = grpo__buf_append(o, ":", 1)) != GRPO_OK ||
        (err = grpo__buf_json_str(o, v)) != GRPO_OK)
        return err;
    return last ? GRPO_OK : grpo__buf_append(o, ",", 1);
}

static grpo_err
write_meta(grpo_buf *o, const grpo_batch *b)
{
    char num[7][32];
    int routes = (b->flags & GRPO_BATCH_HAS_ROUTES) != 0;
    int proc = (b->flags & GRPO_BATCH_HAS_PROCESSED) != 0;
    int tools = (b->flags & GRPO_BATCH_HAS_TOOL_MASK) != 0;
    /* the oldest version that holds what the batch carries: version 1 readers read the rest */
    snprintf(num[0], sizeof num[0], "%d", tools ? 4 : proc ? 3 : routes ? 2 : 1);
    snprintf(num[6], sizeof num[6], "%d", b->route_experts);
    snprintf(num[1], sizeof num[1], "%" PRId64, b->batch_id);
    snprintf(num[2], sizeof num[2], "%" PRId64, b->step);
    snprintf(num[3], sizeof num[3], "%" PRId64, b->policy_version);
    snprintf(num[4], sizeof num[4], "%zu", b->n_seq);
    snprintf(num[5], sizeof num[5], "%zu", b->n_tok);
    grpo_err err = grpo__buf_append(o, "{\"__metadata__\":{", 17);
    if (err == GRPO_OK)
        err = meta_kv(o, "schema", GRPO_BATCH_SCHEMA, false);
    if (err == GRPO_OK)
        err = meta_kv(o, "schema_version", num[0], false);
    if (err == GRPO_OK)
        err = meta_kv(o, "run_id", b->run_id, false);
    if (err == GRPO_OK)
        err = meta_kv(o, "batch_id", num[1], false);
    if (err == GRPO_OK)
        err = meta_kv(o, "step", num[2], false);
    if (err == GRPO_OK)
        err = meta_kv(o, "policy_version", num[3], false);
    if (err == GRPO_OK)
        err = meta_kv(o, "n_seq", num[4], false);
    if (err == GRPO_OK)
        err = meta_kv(o, "n_tok", num[5], false);
    if (err == GRPO_OK && routes)
        err = meta_kv(o, "route_experts", num[6], false);
    if (err == GRPO_OK)
        err = meta_kv(o, "sampling", b->sampling_json, false);
    if (err == GRPO_OK)
        err = meta_kv(o, "reward_config_hash", b->reward_config_hash, true);
    return err == GRPO_OK ? grpo__buf_append(o, "}", 1) : err;
}

/* Data order, so that every tensor is naturally aligned: the route offsets (8-byte), the table's
 * wider fields, the route ids (1 or 2 bytes), the table's byte fields. Without routes this is
 * the table's order. */
static bool
in_pass(const field *f, int pass)
{
    return (grpo_bridge__st_dtype_size(f->dt) > 1) == (pass == 0);
}

static grpo_err
write_header(grpo_buf *o, const grpo_batch *b, uint64_t *data_len)
{
    grpo_err err = write_meta(o, b);
    uint64_t pos = 0;
    if (err == GRPO_OK)
        err = grpo_bridge__routes_header(o, b, 0, &pos);
    for (size_t j = 0; j < 2 * N_FIELDS && err == GRPO_OK; j++) {
        const field *f = &fields[j % N_FIELDS];
        if (j == N_FIELDS && (err = grpo_bridge__routes_header(o, b, 1, &pos)) != GRPO_OK)
            break;
        if (!present(b->flags, f) || !in_pass(f, j >= N_FIELDS))
            continue;
        uint64_t n = fcount(b, f), nb = n * grpo_bridge__st_dtype_size(f->dt);
        err = grpo__buf_printf(o,
                               ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%" PRIu64 "],"
                               "\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}",
                               f->name, grpo_bridge__st_dtype_name(f->dt), n, pos, pos + nb);
        pos += nb;
    }
    if (err == GRPO_OK)
        err = grpo__buf_append(o, "}", 1);
    while (err == GRPO_OK && (o->len - 8) % 8 != 0) /* pad so the data starts 8-aligned */
        err = grpo__buf_append(o, " ", 1);
    *data_len = pos;
    return err;
}

grpo_err
grpo_bridge__encode_head(const grpo_batch *b, grpo_buf *o, uint64_t *data_len)
{
    grpo_err err;
    uint8_t zero[8] = {0};
    o->len = 0; /* reuses o's memory: large batches then avoid faulting in fresh pages */
    if ((err = validate(b, 0)) != GRPO_OK || (err = grpo__buf_append(o, zero, 8)) != GRPO_OK ||
        (err = write_header(o, b, data_len)) != GRPO_OK)
        return err;
    grpo_bridge__put_u64((uint8_t *)o->data, o->len - 8);
    return GRPO_OK;
}

grpo_err
grpo_bridge__encode_data(const grpo_batch *b, uint8_t *dst)
{
    grpo_err err = GRPO_OK;
    dst = grpo_bridge__routes_data(dst, b, 0, &err);
    for (size_t j = 0; j < 2 * N_FIELDS; j++) {
        const field *f = &fields[j % N_FIELDS];
        if (j == N_FIELDS)
            dst = grpo_bridge__routes_data(dst, b, 1, &err);
        if (present(b->flags, f) && in_pass(f, j >= N_FIELDS)) {
            size_t n = fcount(b, f) * grpo_bridge__st_dtype_size(f->dt);
            if (n) {
                memcpy(dst, fget(b, f), n);
                dst += n;
            }
        }
    }
    return err;
}

grpo_err
grpo_bridge__encode_into(const grpo_batch *b, grpo_buf *o)
{
    uint64_t data_len = 0;
    grpo_err err = grpo_bridge__encode_head(b, o, &data_len);
    if (err != GRPO_OK)
        return err;
    char *had = o->data;
    if ((err = grpo__buf_reserve(o, data_len)) != GRPO_OK)
        return err;
    if (o->data != had) /* a new (or moved) allocation: its pages are not faulted in yet */
        grpo_bridge__hint_huge(o->data, o->cap);
    if ((err = grpo_bridge__encode_data(b, (uint8_t *)o->data + o->len)) != GRPO_OK)
        return err;
    o->len += data_len;
    return GRPO_OK;
}

grpo_err
grpo_batch_encode(const grpo_batch *b, void **out, size_t *len)
{
    grpo_buf o = {0};
    grpo_err err = grpo_bridge__encode_into(b, &o);
    *out = err == GRPO_OK ? o.data : NULL;
    *len = err == GRPO_OK ? o.len : 0;
    if (err != GRPO_OK)
        grpo__buf_fini(&o);
    return err;
}

/* ---- decode ---------------------------------------------------------------------------------- */

static grpo_err
meta_i64(const st_file *f, const char *key, int64_t *out)
{
    const char *s = grpo_bridge__st_meta(f, key);
    if (s == NULL)
        return grpo__fail(GRPO_EFORMAT, "batch: __metadata__ has no \"%s\"", key);
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (s[0] == '\0' || s[0] == ' ' || s[0] == '+' || *end != '\0' || errno != 0 || v < 0)
        return grpo__fail(GRPO_EFORMAT,
                          "batch: __metadata__ \"%s\" = \"%.40s\" is not an "
                          "integer >= 0",
                          key, s);
    *out = (int64_t)v;
    return GRPO_OK;
}

static grpo_err
read_meta(const st_file *f, grpo_batch *b, int64_t *n_seq, int64_t *n_tok, int64_t *version)
{
    grpo_err err;
    const char *schema = grpo_bridge__st_meta(f, "schema");
    int64_t ver = 0;
    *version = 0;
    if (schema == NULL || strcmp(schema, GRPO_BATCH_SCHEMA) != 0)
        return grpo__fail(GRPO_EFORMAT, "batch: __metadata__ \"schema\" is not \"%s\"",
                          GRPO_BATCH_SCHEMA);
    if ((err = meta_i64(f, "schema_version", &ver)) != GRPO_OK)
        return err;
    if (ver < 1 || ver > GRPO_BATCH_SCHEMA_VERSION)
        return grpo__fail(GRPO_EVERSION,
                          "batch: schema_version %" PRId64 "; this build reads 1 to %d", ver,
                          GRPO_BATCH_SCHEMA_VERSION);
    *version = ver;
    if ((err = meta_i64(f, "batch_id", &b->batch_id)) != GRPO_OK ||
        (err = meta_i64(f, "step", &b->step)) != GRPO_OK ||
        (err = meta_i64(f, "policy_version", &b->policy_version)) != GRPO_OK ||
        (err = meta_i64(f, "n_seq", n_seq)) != GRPO_OK ||
        (err = meta_i64(f, "n_tok", n_tok)) != GRPO_OK)
        return err;
    const char *run = grpo_bridge__st_meta(f, "run_id");
    const char *samp = grpo_bridge__st_meta(f, "sampling");
    const char *hash = grpo_bridge__st_meta(f, "reward_config_hash");
    if (run == NULL)
        return grpo__fail(GRPO_EFORMAT, "batch: __metadata__ has no \"run_id\"");
    if ((err = grpo_batch_set_str(b, &b->run_id, run)) != GRPO_OK ||
        (err = grpo_batch_set_str(b, &b->sampling_json, samp ? samp : "{}")) != GRPO_OK)
        return err;
    return grpo_batch_set_str(b, &b->reward_config_hash, hash ? hash : "");
}

/* Every tensor must be a known field with the right dtype and a 1-D shape of the right length. */
static grpo_err
check_tensors(const st_file *f, uint64_t n_seq, uint64_t n_tok, uint32_t *flags)
{
    *flags = 0;
    for (size_t j = 0; j < f->n; j++) {
        const st_tensor *t = &f->t[j];
        const field *fd = NULL;
        for (size_t i = 0; i < N_FIELDS; i++)
            if (strcmp(t->name, fields[i].name) == 0)
                fd = &fields[i];
        if (fd == NULL && grpo_bridge__routes_is_name(t->name))
            continue; /* grpo_bridge__routes_tensors checks them */
        if (fd == NULL)
            return grpo__fail(GRPO_EFORMAT, "batch: unknown tensor \"%s\"", t->name);
        uint64_t want = fd->dim == DIM_TOK ? n_tok : fd->dim == DIM_SEQ1 ? n_seq + 1 : n_seq;
        if (t->dtype != fd->dt || t->ndim != 1 || t->shape[0] != want)
            return grpo__fail(GRPO_EFORMAT, "batch: tensor \"%s\" must be %s [%" PRIu64 "]",
                              t->name, grpo_bridge__st_dtype_name(fd->dt), want);
        *flags |= fd->flag;
    }
    for (size_t i = 0; i < N_FIELDS; i++)
        if (fields[i].flag == 0 && grpo_bridge__st_find(f, fields[i].name) == NULL)
            return grpo__fail(GRPO_EFORMAT, "batch: tensor \"%s\" is missing", fields[i].name);
    return GRPO_OK;
}

/* logprobs_processed: present exactly in version 3 (optional from version 4 on, where a batch
 * may be version 4 for its tool_mask alone); tool_mask only from version 4. */
static grpo_err
check_processed(int64_t ver, uint32_t flags)
{
    if ((flags & GRPO_BATCH_HAS_TOOL_MASK) && ver < 4)
        return grpo__fail(GRPO_EFORMAT, "batch: tensor \"tool_mask\" needs schema_version 4");
    if (ver >= 4)
        return GRPO_OK;
    if ((flags & GRPO_BATCH_HAS_PROCESSED) && ver < 3)
        return grpo__fail(GRPO_EFORMAT,
                          "batch: tensor \"logprobs_processed\" needs schema_version 3");
    if (!(flags & GRPO_BATCH_HAS_PROCESSED) && ver >= 3)
        return grpo__fail(GRPO_EFORMAT, "batch: tensor \"logprobs_processed\" is missing "
                                        "(schema_version 3)");
    return GRPO_OK;
}

grpo_err
grpo_batch_decode(grpo_batch **out, const void *bytes, size_t len)
{
    grpo_err err;
    st_file f;
    grpo_batch *b = NULL, tmp;
    int64_t n_seq = 0, n_tok = 0, ver = 0, experts = 0;
    uint32_t flags = 0;
    grpo_bridge__route_tensors rt;
    *out = NULL;
    if (len > GRPO_BATCH_MAX_BYTES)
        return grpo__fail(GRPO_EFORMAT, "batch: %zu bytes is over the limit", len);
    if ((err = grpo_bridge__st_parse(bytes, len, "batch", &f)) != GRPO_OK)
        return err;
    memset(&tmp, 0, sizeof tmp);
    if ((err = read_meta(&f, &tmp, &n_seq, &n_tok, &ver)) != GRPO_OK)
        goto done;
    if ((err = check_tensors(&f, (uint64_t)n_seq, (uint64_t)n_tok, &flags)) != GRPO_OK)
        goto done;
    if ((err = check_processed(ver, flags)) != GRPO_OK)
        goto done;
    /* routes: required in version 2, optional (all three tensors or none) in version 3 */
    int64_t rver = ver == 2 || (ver >= 3 && grpo_bridge__routes_any(&f)) ? 2 : 1;
    if ((rver >= 2 && (err = meta_i64(&f, "route_experts", &experts)) != GRPO_OK) ||
        (err = grpo_bridge__routes_tensors(&f, rver, (uint64_t)n_seq, experts, &rt)) != GRPO_OK)
        goto done;
    /* Shapes are now bounded by the data actually present, so allocating is safe. */
    if ((err = grpo_batch_create(&b, tmp.run_id, (size_t)n_seq, (size_t)n_tok, flags)) != GRPO_OK)
        goto done;
    b->batch_id = tmp.batch_id;
    b->step = tmp.step;
    b->policy_version = tmp.policy_version;
    if ((err = grpo_batch_set_str(b, &b->sampling_json, tmp.sampling_json)) != GRPO_OK ||
        (err = grpo_batch_set_str(b, &b->reward_config_hash, tmp.reward_config_hash)) != GRPO_OK)
        goto done;
    for (size_t i = 0; i < N_FIELDS; i++) {
        const st_tensor *t = grpo_bridge__st_find(&f, fields[i].name);
        if (t != NULL)
            memcpy(fget(b, &fields[i]), (const char *)bytes + f.data_off + t->begin,
                   (size_t)(t->end - t->begin));
    }
    if (rver >= 2 && (err = grpo_bridge__routes_read(b, &f, &rt, experts, bytes)) != GRPO_OK)
        goto done;
    if ((err = grpo_batch_validate(b)) != GRPO_OK)
        err = GRPO_EFORMAT; /* the message names the problem; bytes on the wire are a format */
done:
    free(tmp.run_id);
    free(tmp.sampling_json);
    free(tmp.reward_config_hash);
    grpo_bridge__st_free(&f);
    if (err != GRPO_OK) {
        grpo_batch_destroy(b);
        b = NULL;
    }
    *out = b;
    return err;
}

grpo_err
grpo_batch_peek(const void *bytes, size_t len, int64_t *batch_id, int64_t *policy_version,
                char *run_id, size_t run_id_cap)
{
    grpo_err err;
    st_file f;
    grpo_batch tmp;
    int64_t n_seq, n_tok, ver;
    uint32_t flags;
    if ((err = grpo_bridge__st_parse(bytes, len, "batch", &f)) != GRPO_OK)
        return err;
    memset(&tmp, 0, sizeof tmp);
    if ((err = read_meta(&f, &tmp, &n_seq, &n_tok, &ver)) == GRPO_OK &&
        (err = check_tensors(&f, (uint64_t)n_seq, (uint64_t)n_tok, &flags)) == GRPO_OK) {
        if (batch_id)
            *batch_id = tmp.batch_id;
        if (policy_version)
            *policy_version = tmp.policy_version;
        if (run_id && run_id_cap > 0)
            snprintf(run_id, run_id_cap, "%s", tmp.run_id);
    }
    free(tmp.run_id);
    free(tmp.sampling_json);
    free(tmp.reward_config_hash);
    grpo_bridge__st_free(&f);
    return err;
}

grpo_err
grpo_batch_peek_info(const void *bytes, size_t len, grpo_batch_info *info)
{
    grpo_err err;
    st_file f;
    grpo_batch tmp;
    int64_t n_seq = 0, n_tok = 0, ver;
    uint32_t flags;
    memset(info, 0, sizeof *info);
    if ((err = grpo_bridge__st_parse(bytes, len, "batch", &f)) != GRPO_OK)
        return err;
    memset(&tmp, 0, sizeof tmp);
    if ((err = read_meta(&f, &tmp, &n_seq, &n_tok, &ver)) == GRPO_OK &&
        (err = check_tensors(&f, (uint64_t)n_seq, (uint64_t)n_tok, &flags)) == GRPO_OK) {
        info->batch_id = tmp.batch_id;
        info->step = tmp.step;
        info->policy_version = tmp.policy_version;
        info->n_seq = (size_t)n_seq;
        info->n_tok = (size_t)n_tok;
        snprintf(info->run_id, sizeof info->run_id, "%s", tmp.run_id);
        const st_tensor *g = grpo_bridge__st_find(&f, "group_ids");
        const uint8_t *p = (const uint8_t *)bytes + f.data_off + g->begin;
        int64_t prev = 0;
        for (size_t i = 0; i < info->n_seq; i++) {
            int64_t v = (int64_t)grpo_bridge__get_u64(p + 8 * i);
            info->n_groups += i == 0 || v != prev;
            prev = v;
        }
    }
    free(tmp.run_id);
    free(tmp.sampling_json);
    free(tmp.reward_config_hash);
    grpo_bridge__st_free(&f);
    return err;
}
