/* The little-endian binary codec under the wire protocols (run/workers/wire.c, sandbox/proto.c,
 * verifiers/code/plugin.c): a writer that grows a heap buffer and a reader bounded by its buffer.
 *
 * Format: integers fixed-width little-endian; f32/f64 their IEEE-754 bits as u32/u64 (NaN payloads
 * kept); bytes and strings a u32 length then the bytes, GRPO_CODEC_NULL as the length of an absent
 * (NULL) string. Failures stick: after the first, puts write nothing and gets read nothing (they
 * return 0 or NULL), so a record is encoded or decoded whole and checked once. What a protocol
 * adds (limits, UTF-8, finite numbers, field names in messages) stays with its module. */
#ifndef GRPO_COMMON_CODEC_H
#define GRPO_COMMON_CODEC_H

#include "common/common_int.h"
#include <stdbool.h>
#include <stdint.h>

#define GRPO_CODEC_NULL 0xFFFFFFFFu /* the length that stands for a NULL string */

/* A float and its bits: the codec reinterprets, never converts, so NaN payloads and -0 survive. */
typedef union grpo_f32_bits {
    float f;
    uint32_t u;
} grpo_f32_bits;
typedef union grpo_f64_bits {
    double f;
    uint64_t u;
} grpo_f64_bits;

/* A writer starts zeroed (grpo_wr w = {0}). The caller owns w.b.data and frees it with
 * grpo__buf_fini(&w.b), after a failure too. */
typedef struct grpo_wr {
    grpo_buf b; /* the bytes so far */
    bool oom;   /* an append failed or a field was too long (grpo__fail has the message): b is
                   incomplete and must not be sent */
} grpo_wr;

/* Fixed-width fields. Nothing is allocated beyond w->b. */
void grpo__put_u32(grpo_wr *w, uint32_t v);
void grpo__put_u64(grpo_wr *w, uint64_t v);
void grpo__put_i32(grpo_wr *w, int32_t v);
void grpo__put_f32(grpo_wr *w, float v);
void grpo__put_f64(grpo_wr *w, double v);
/* u32 n, then n bytes of p (read, not kept; NULL allowed when n is 0). Always a length, never
 * GRPO_CODEC_NULL: n of GRPO_CODEC_NULL or more fails the writer. */
void grpo__put_bytes(grpo_wr *w, const void *p, size_t n);
/* n bytes of s (which may hold NULs) like grpo__put_bytes, or GRPO_CODEC_NULL when s is NULL. */
void grpo__put_strn(grpo_wr *w, const char *s, size_t n);
/* grpo__put_strn(w, s, strlen(s)); NULL stays NULL. */
void grpo__put_str(grpo_wr *w, const char *s);

/* A reader over len bytes at p, which the caller owns and keeps alive while it reads (and while
 * it uses pointers from grpo__get_raw or grpo__get_bytes): grpo_rd r = {p, len, 0, false}. */
typedef struct grpo_rd {
    const char *p;
    size_t len, off; /* off <= len always */
    bool bad;        /* a get ran past the end (or grpo__get_str ran out of memory); callers may
                        also set it to stop reading after a check of their own fails */
} grpo_rd;

/* Fixed-width fields; 0 when fewer bytes are left (r->bad is then set). */
uint32_t grpo__get_u32(grpo_rd *r);
uint64_t grpo__get_u64(grpo_rd *r);
int32_t grpo__get_i32(grpo_rd *r);
float grpo__get_f32(grpo_rd *r);
double grpo__get_f64(grpo_rd *r);
/* The next n bytes in place (no length before them), or NULL when fewer are left. The pointer
 * borrows from r->p. */
const char *grpo__get_raw(grpo_rd *r, size_t n);
/* A length-prefixed field in place: the pointer borrows from r->p and *n gets its length. NULL
 * with *n = 0 for GRPO_CODEC_NULL (r->bad untouched) or a failure (r->bad set). */
const char *grpo__get_bytes(grpo_rd *r, size_t *n);
/* A length-prefixed field as a new NUL-terminated copy the caller frees; n (may be NULL) gets
 * its length. NULL for GRPO_CODEC_NULL (r->bad untouched) or a failure (r->bad set; running out
 * of memory is a failure too). */
char *grpo__get_str(grpo_rd *r, size_t *n);
/* Bytes not yet read. */
size_t grpo__rd_left(const grpo_rd *r);

#endif
