/* The routes of a version-2 batch (schemas/batch_format.md, "Routes"): the MoE experts the
 * rollout chose for every token, the prompt part once per group. Sizing, the header entries and
 * bytes of the three tensors, and every check the decoder makes on them. */
#include "trainer_bridge/bridge_int.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define MAX_EXPERTS 32767 /* int16 ids */
#define MAX_ROUTE_IDS ((uint64_t)1 << 40)

static const char *const names[3] = {"route_prompt_offsets", "route_prompt", "route_completion"};

int
grpo_bridge__routes_is_name(const char *name)
{
    for (int i = 0; i < 3; i++)
        if (strcmp(name, names[i]) == 0)
            return 1;
    return 0;
}

int
grpo_bridge__routes_any(const grpo__st_header *f)
{
    for (int i = 0; i < 3; i++)
        if (grpo_bridge__st_find(f, names[i]) != NULL)
            return 1;
    return 0;
}

static size_t
row_ids(const grpo_batch *b)
{
    return (size_t)b->route_layers * (size_t)b->route_k;
}

grpo_err
grpo_batch_set_routes(grpo_batch *b, int32_t experts, int32_t layers, int32_t k,
                      size_t n_prompt_rows, size_t n_completion_rows)
{
    if (b == NULL || experts < 1 || experts > MAX_EXPERTS || layers < 1 || k < 1 || k > experts ||
        (uint64_t)layers * (uint64_t)k * ((uint64_t)n_prompt_rows + n_completion_rows) >
            MAX_ROUTE_IDS)
        return grpo__fail(GRPO_EINVAL,
                          "batch: routes of %d experts, %d layers, top-%d, %zu + %zu tokens are "
                          "out of range",
                          experts, layers, k, n_prompt_rows, n_completion_rows);
    int bytes = experts <= 256 ? 1 : 2;
    size_t row = (size_t)layers * (size_t)k * (size_t)bytes;
    int64_t *off = calloc(b->n_seq ? b->n_seq : 1, sizeof *off);
    void *p = calloc(n_prompt_rows ? n_prompt_rows : 1, row);
    void *c = calloc(n_completion_rows ? n_completion_rows : 1, row);
    if (off == NULL || p == NULL || c == NULL) {
        free(off), free(p), free(c);
        return grpo__fail(GRPO_ENOMEM, "batch: out of memory for routes");
    }
    free(b->route_prompt_offsets), free(b->route_prompt), free(b->route_completion);
    b->route_prompt_offsets = off, b->route_prompt = p, b->route_completion = c;
    b->route_experts = experts, b->route_layers = layers, b->route_k = k, b->route_bytes = bytes;
    b->n_route_prompt = n_prompt_rows, b->n_route_completion = n_completion_rows;
    b->flags |= GRPO_BATCH_HAS_ROUTES;
    return GRPO_OK;
}

static int
id_at(const grpo_batch *b, const void *ids, size_t i)
{
    if (b->route_bytes == 1)
        return ((const uint8_t *)ids)[i];
    int16_t v;
    memcpy(&v, (const char *)ids + 2 * i, 2);
    return v;
}

/* 1 when some byte of v is zero (the classic test: exact, no false positives). */
static inline uint64_t
zero_byte(uint64_t v)
{
    return (v - 0x0101010101010101ull) & ~v & 0x8080808080808080ull;
}

static inline uint64_t
rot8(uint64_t v, int bytes)
{
    return v >> (8 * bytes) | v << (64 - 8 * bytes);
}

/* The common shape at batch speed: uint8 ids, k = 8 (DeepSeek-V3/R1, Qwen3-MoE). A row of 8 ids
 * is one word; two of its bytes are equal exactly when the word XOR its rotation by 1, 2, 3 or
 * 4 bytes has a zero byte (a rotation by r and by 8 - r find the same pairs). Nonzero when some
 * of the n rows (a fixed count, so the compiler vectorizes the loop) has a repeated id or an id
 * of experts or more. */
static inline uint64_t
rows_bad_u8k8(const uint8_t *ids, size_t n, int experts)
{
    uint64_t bad = 0;
    for (size_t r = 0; r < n; r++) {
        uint64_t v;
        memcpy(&v, ids + 8 * r, 8);
        bad |= zero_byte(v ^ rot8(v, 1)) | zero_byte(v ^ rot8(v, 2)) | zero_byte(v ^ rot8(v, 3)) |
               zero_byte(v ^ rot8(v, 4));
    }
    uint8_t top = 0; /* byte-wide max: one compare after the loop */
    for (size_t i = 0; i < 8 * n; i++)
        top = ids[i] > top ? ids[i] : top;
    return bad | (uint64_t)(top >= experts);
}

#define ROW_BLOCK 64

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* The same test with byte shuffles: each 32 bytes (4 rows) against their rows rotated by 1..4
 * bytes, equal bytes flagged by one compare; the max byte for the range. With dst, the rows are
 * also copied there: one pass over memory instead of two (the check of a 64 MiB batch's routes
 * took as long as their copy). Inlined into both callers, so the test without dst has no store. */
__attribute__((target("avx2"), always_inline)) static inline uint64_t
rows_bad_avx2_into(uint8_t *dst, const uint8_t *ids, size_t n_rows, int experts)
{
    __m256i any = _mm256_setzero_si256(), top = _mm256_setzero_si256(), rot[4];
    for (int r = 1; r <= 4; r++) {
        uint8_t ix[32];
        for (int j = 0; j < 32; j++)
            ix[j] = (uint8_t)(((j & 15) & ~7) | ((j + r) & 7));
        rot[r - 1] = _mm256_loadu_si256((const __m256i *)(const void *)ix);
    }
    size_t r = 0;
    for (; r + 4 <= n_rows; r += 4) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(ids + 8 * r));
        if (dst)
            _mm256_storeu_si256((__m256i *)(void *)(dst + 8 * r), v);
        __m256i e0 = _mm256_cmpeq_epi8(v, _mm256_shuffle_epi8(v, rot[0]));
        __m256i e1 = _mm256_cmpeq_epi8(v, _mm256_shuffle_epi8(v, rot[1]));
        __m256i e2 = _mm256_cmpeq_epi8(v, _mm256_shuffle_epi8(v, rot[2]));
        __m256i e3 = _mm256_cmpeq_epi8(v, _mm256_shuffle_epi8(v, rot[3]));
        any =
            _mm256_or_si256(any, _mm256_or_si256(_mm256_or_si256(e0, e1), _mm256_or_si256(e2, e3)));
        top = _mm256_max_epu8(top, v);
    }
    uint8_t t[32];
    _mm256_storeu_si256((__m256i *)(void *)t, top);
    uint8_t m = 0;
    for (int j = 0; j < 32; j++)
        m = t[j] > m ? t[j] : m;
    if (dst)
        memcpy(dst + 8 * r, ids + 8 * r, 8 * (n_rows - r));
    uint64_t bad = (uint64_t)!_mm256_testz_si256(any, any) | (uint64_t)(m >= experts);
    return bad | rows_bad_u8k8(ids + 8 * r, n_rows - r, experts);
}

__attribute__((target("avx2"))) static uint64_t
rows_bad_avx2(const uint8_t *ids, size_t n_rows, int experts)
{
    return rows_bad_avx2_into(NULL, ids, n_rows, experts);
}

__attribute__((target("avx2"))) static uint64_t
rows_copy_bad_avx2(uint8_t *dst, const uint8_t *ids, size_t n_rows, int experts)
{
    return rows_bad_avx2_into(dst, ids, n_rows, experts);
}
#endif

/* 1 when the ids of b are checked while they are copied into an encoding (uint8 ids, k = 8, on
 * a CPU with AVX2), so validation before it can leave them out. */
static int
fused_check(const grpo_batch *b)
{
#if defined(__x86_64__) && defined(__GNUC__)
    return (b->flags & GRPO_BATCH_HAS_ROUTES) && b->route_bytes == 1 && b->route_k == 8 &&
           __builtin_cpu_supports("avx2");
#else
    (void)b;
    return 0;
#endif
}

static bool
ids_ok_u8k8(const uint8_t *ids, size_t n_rows, int experts)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx2"))
        return rows_bad_avx2(ids, n_rows, experts) == 0;
#endif
    uint64_t bad = 0;
    size_t r = 0;
    for (; r + ROW_BLOCK <= n_rows; r += ROW_BLOCK)
        bad |= rows_bad_u8k8(ids + 8 * r, ROW_BLOCK, experts);
    return (bad | rows_bad_u8k8(ids + 8 * r, n_rows - r, experts)) == 0;
}

/* Any shape: a bitset of the experts seen in the current row (k ids). */
static bool
ids_ok_any(const grpo_batch *b, const void *ids, size_t rows)
{
    size_t K = (size_t)b->route_k, n = rows * row_ids(b);
    uint64_t seen[(MAX_EXPERTS + 64) / 64];
    memset(seen, 0, sizeof seen); /* empty between rows: each row clears what it set */
    for (size_t at = 0; at < n; at += K) {
        int ok = 1;
        for (size_t j = 0; j < K && ok; j++) {
            int id = id_at(b, ids, at + j);
            ok = id >= 0 && id < b->route_experts && !(seen[id >> 6] >> (id & 63) & 1);
            if (ok)
                seen[id >> 6] |= 1ull << (id & 63);
        }
        for (size_t j = 0; j < K; j++) { /* clear what this row set, whatever it held */
            int id = id_at(b, ids, at + j);
            if (id >= 0 && id < b->route_experts)
                seen[id >> 6] = 0;
        }
        if (!ok)
            return false;
    }
    return true;
}

/* Every id in [0, route_experts), the k of one token and layer distinct: the fast test, then,
 * only for a batch that fails it, the scalar walk that names the first fault. */
static grpo_err
check_ids(const grpo_batch *b, const void *ids, size_t rows, const char *name)
{
    if (b->route_bytes == 1 && b->route_k == 8
            ? ids_ok_u8k8(ids, rows * (size_t)b->route_layers, b->route_experts)
            : ids_ok_any(b, ids, rows))
        return GRPO_OK;
    size_t K = (size_t)b->route_k, n = rows * row_ids(b);
    for (size_t at = 0; at < n; at += K)
        for (size_t j = 0; j < K; j++) {
            int id = id_at(b, ids, at + j);
            if (id < 0 || id >= b->route_experts)
                return grpo__fail(GRPO_EINVAL,
                                  "batch %" PRId64 ": %s token %zu layer %zu: expert %d is "
                                  "outside [0, %d)",
                                  b->batch_id, name, at / row_ids(b), at % row_ids(b) / K, id,
                                  b->route_experts);
            for (size_t q = 0; q < j; q++)
                if (id_at(b, ids, at + q) == id)
                    return grpo__fail(GRPO_EINVAL,
                                      "batch %" PRId64 ": %s token %zu layer %zu: expert %d "
                                      "twice",
                                      b->batch_id, name, at / row_ids(b), at % row_ids(b) / K, id);
        }
    return GRPO_OK;
}

/* Sequence i either shares the previous sequence's prompt block (same group, same prompt
 * tokens) or starts the next block right after it; the blocks cover route_prompt exactly. */
static grpo_err
check_blocks(const grpo_batch *b)
{
    const int64_t *off = b->route_prompt_offsets, *so = b->seq_offsets;
    const int32_t *pl = b->prompt_lens;
    uint64_t next = 0;
    for (size_t i = 0; i < b->n_seq; i++) {
        if (i > 0 && off[i] == off[i - 1]) {
            if (b->group_ids[i] != b->group_ids[i - 1] || pl[i] != pl[i - 1] ||
                memcmp(b->tokens + so[i], b->tokens + so[i - 1], (size_t)pl[i] * 4) != 0)
                return grpo__fail(GRPO_EINVAL,
                                  "batch %" PRId64 ": route_prompt_offsets[%zu] shares the "
                                  "routes of sequence %zu, whose group or prompt differ",
                                  b->batch_id, i, i - 1);
            continue;
        }
        if (off[i] < 0 || (uint64_t)off[i] != next)
            return grpo__fail(GRPO_EINVAL,
                              "batch %" PRId64 ": route_prompt_offsets[%zu] = %" PRId64
                              "; expected %" PRIu64 " (the next block) or the previous offset",
                              b->batch_id, i, off[i], next);
        next += (uint64_t)pl[i];
    }
    if (next != b->n_route_prompt)
        return grpo__fail(GRPO_EINVAL,
                          "batch %" PRId64 ": the prompts' route blocks cover %" PRIu64
                          " tokens; route_prompt has %zu",
                          b->batch_id, next, b->n_route_prompt);
    return GRPO_OK;
}

grpo_err
grpo_bridge__routes_check(const grpo_batch *b, int ids)
{
    if (!(b->flags & GRPO_BATCH_HAS_ROUTES))
        return GRPO_OK;
    if (b->route_prompt_offsets == NULL || b->route_prompt == NULL || b->route_completion == NULL)
        return grpo__fail(GRPO_EINVAL, "batch %" PRId64 ": route arrays are NULL", b->batch_id);
    if (b->route_experts < 1 || b->route_experts > MAX_EXPERTS || b->route_layers < 1 ||
        b->route_k < 1 || b->route_k > b->route_experts ||
        b->route_bytes != (b->route_experts <= 256 ? 1 : 2))
        return grpo__fail(GRPO_EINVAL,
                          "batch %" PRId64 ": routes of %d experts, %d layers, top-%d in %d-byte "
                          "ids",
                          b->batch_id, b->route_experts, b->route_layers, b->route_k,
                          b->route_bytes);
    grpo_err err = check_blocks(b);
    if (err != GRPO_OK)
        return err;
    uint64_t rows = 0;
    for (size_t i = 0; i < b->n_seq; i++) {
        int64_t c = b->seq_offsets[i + 1] - b->seq_offsets[i] - b->prompt_lens[i];
        rows += c > 1 ? (uint64_t)(c - 1) : 0;
    }
    if (rows != b->n_route_completion)
        return grpo__fail(GRPO_EINVAL,
                          "batch %" PRId64 ": route_completion has %zu tokens; the completions "
                          "but their last tokens are %" PRIu64,
                          b->batch_id, b->n_route_completion, rows);
    if (!ids && fused_check(b)) /* checked while copied (grpo_bridge__routes_data) */
        return GRPO_OK;
    if ((err = check_ids(b, b->route_prompt, b->n_route_prompt, "route_prompt")) != GRPO_OK)
        return err;
    return check_ids(b, b->route_completion, b->n_route_completion, "route_completion");
}

grpo_err
grpo_bridge__routes_header(grpo_buf *o, const grpo_batch *b, int pass, uint64_t *pos)
{
    if (!(b->flags & GRPO_BATCH_HAS_ROUTES))
        return GRPO_OK;
    if (pass == 0) {
        uint64_t nb = (uint64_t)b->n_seq * 8;
        grpo_err err = grpo__buf_printf(o,
                                        ",\"%s\":{\"dtype\":\"I64\",\"shape\":[%zu],"
                                        "\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}",
                                        names[0], b->n_seq, *pos, *pos + nb);
        *pos += nb;
        return err;
    }
    const char *dt = b->route_bytes == 1 ? "U8" : "I16";
    size_t rows[2] = {b->n_route_prompt, b->n_route_completion};
    grpo_err err = GRPO_OK;
    for (int i = 0; i < 2 && err == GRPO_OK; i++) {
        uint64_t nb = (uint64_t)rows[i] * row_ids(b) * (uint64_t)b->route_bytes;
        err = grpo__buf_printf(o,
                               ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%zu,%d,%d],"
                               "\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}",
                               names[i + 1], dt, rows[i], b->route_layers, b->route_k, *pos,
                               *pos + nb);
        *pos += nb;
    }
    return err;
}

uint8_t *
grpo_bridge__routes_data(uint8_t *dst, const grpo_batch *b, int pass, grpo_err *err)
{
    if (!(b->flags & GRPO_BATCH_HAS_ROUTES))
        return dst;
#if defined(__x86_64__) && defined(__GNUC__)
    if (pass == 1 && fused_check(b)) {
        const uint8_t *src[2] = {b->route_prompt, b->route_completion};
        size_t n[2] = {b->n_route_prompt, b->n_route_completion}, L = (size_t)b->route_layers;
        uint64_t bad = 0;
        for (int i = 0; i < 2; i++) {
            bad |= rows_copy_bad_avx2(dst, src[i], n[i] * L, b->route_experts);
            dst += n[i] * L * 8;
        }
        if (bad) /* the scalar walk names the first fault */
            *err = grpo_bridge__routes_check(b, 1);
        return dst;
    }
#endif
    (void)err;
    size_t row = row_ids(b) * (size_t)b->route_bytes;
    const void *src[2] = {b->route_prompt, b->route_completion};
    size_t n[2] = {b->n_route_prompt * row, b->n_route_completion * row};
    if (pass == 0) {
        src[0] = b->route_prompt_offsets;
        n[0] = b->n_seq * 8;
        n[1] = 0;
    }
    for (int i = 0; i < 2; i++)
        if (n[i]) {
            memcpy(dst, src[i], n[i]);
            dst += n[i];
        }
    return dst;
}

static grpo_err
check_ids_tensor(const grpo__st_tensor *t, st_dtype dt, const grpo__st_tensor *like)
{
    if (t->dtype != dt || t->ndim != 3 || t->shape[1] < 1 || t->shape[2] < 1 ||
        (like && (like->shape[1] != t->shape[1] || like->shape[2] != t->shape[2])))
        return grpo__fail(GRPO_EFORMAT,
                          "batch: tensor \"%s\" must be %s [tokens, moe_layers, k] with the "
                          "layers and k of route_prompt",
                          t->name, grpo_bridge__st_dtype_name(dt));
    return GRPO_OK;
}

grpo_err
grpo_bridge__routes_tensors(const grpo__st_header *f, int64_t version, uint64_t n_seq,
                            int64_t experts, grpo_bridge__route_tensors *rt)
{
    const grpo__st_tensor *t[3];
    for (int i = 0; i < 3; i++) {
        t[i] = grpo_bridge__st_find(f, names[i]);
        if (version < 2 && t[i] != NULL)
            return grpo__fail(GRPO_EFORMAT, "batch: tensor \"%s\" needs schema_version 2",
                              names[i]);
        if (version >= 2 && t[i] == NULL)
            return grpo__fail(GRPO_EFORMAT, "batch: tensor \"%s\" is missing", names[i]);
    }
    rt->offsets = t[0], rt->prompt = t[1], rt->completion = t[2];
    if (version < 2)
        return GRPO_OK;
    if (experts < 1 || experts > MAX_EXPERTS)
        return grpo__fail(GRPO_EFORMAT,
                          "batch: __metadata__ \"route_experts\" = %" PRId64 " is outside [1, %d]",
                          experts, MAX_EXPERTS);
    if (t[0]->dtype != ST_I64 || t[0]->ndim != 1 || t[0]->shape[0] != n_seq)
        return grpo__fail(GRPO_EFORMAT, "batch: tensor \"%s\" must be I64 [%" PRIu64 "]", names[0],
                          n_seq);
    st_dtype dt = experts <= 256 ? ST_U8 : ST_I16;
    grpo_err err = check_ids_tensor(t[1], dt, NULL);
    return err != GRPO_OK ? err : check_ids_tensor(t[2], dt, t[1]);
}

grpo_err
grpo_bridge__routes_read(grpo_batch *b, const grpo__st_header *f,
                         const grpo_bridge__route_tensors *rt, int64_t experts, const void *bytes)
{
    const grpo__st_tensor *p = rt->prompt, *c = rt->completion;
    if (p->shape[1] > INT32_MAX || p->shape[2] > INT32_MAX)
        return grpo__fail(GRPO_EFORMAT, "batch: route_prompt's shape is too large");
    grpo_err err =
        grpo_batch_set_routes(b, (int32_t)experts, (int32_t)p->shape[1], (int32_t)p->shape[2],
                              (size_t)p->shape[0], (size_t)c->shape[0]);
    if (err != GRPO_OK)
        return GRPO_EFORMAT;
    const char *data = (const char *)bytes + f->data_off;
    memcpy(b->route_prompt_offsets, data + rt->offsets->begin,
           (size_t)(rt->offsets->end - rt->offsets->begin));
    memcpy(b->route_prompt, data + p->begin, (size_t)(p->end - p->begin));
    memcpy(b->route_completion, data + c->begin, (size_t)(c->end - c->begin));
    return GRPO_OK;
}
