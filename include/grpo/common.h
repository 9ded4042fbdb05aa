/* grpo/common.h: error codes, the thread-local error message, logging, version, hashing,
 * arenas and the thread pool. Every other public header includes this one. */
#ifndef GRPO_COMMON_H
#define GRPO_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GRPO_VERSION_MAJOR 0
#define GRPO_VERSION_MINOR 1
#define GRPO_VERSION_PATCH 0
#define GRPO_VERSION_STRING "0.1.0"

/* Runtime version, e.g. "0.1.0". */
const char *grpo_version(void);
/* Build features as a short string, e.g. "cuda=yes nccl=yes blas=openblas". */
const char *grpo_build_features(void);

/* 0 = OK; every failure is negative. A message naming the file, the place and the problem is kept
 * per thread and read with grpo_error_last(). */
typedef enum grpo_err {
    GRPO_OK = 0,
    GRPO_EINVAL = -1,       /* bad argument or bad input data */
    GRPO_ENOMEM = -2,       /* allocation failed */
    GRPO_EIO = -3,          /* read/write/open failed */
    GRPO_EFORMAT = -4,      /* malformed file or message */
    GRPO_ENOTFOUND = -5,    /* missing file, tensor, key, row */
    GRPO_EUNSUPPORTED = -6, /* valid but not supported by this build */
    GRPO_ETIMEOUT = -7,     /* a deadline passed */
    GRPO_ESTATE = -8,       /* call not valid in the object's current state */
    GRPO_EDB = -9,          /* SQLite failure */
    GRPO_ENET = -10,        /* NNG / network failure */
    GRPO_EVERSION = -11,    /* version or ABI mismatch (newer schema, unknown plugin ABI) */
    GRPO_EFULL = -12,       /* disk full, budget exhausted */
    GRPO_EPERM = -13,       /* permission denied, read-only file */
    GRPO_ECANCELED = -14,   /* stopped by request */
    GRPO_ESYS = -15,        /* an OS call failed (fork, namespaces, seccomp, ...) */
    GRPO_EINTERNAL = -16    /* a bug: an invariant did not hold */
} grpo_err;

/* The message of the last failure on this thread ("" if none). Valid until the next failure. */
const char *grpo_error_last(void);
/* Short constant name of a code, e.g. "EINVAL". */
const char *grpo_err_name(grpo_err err);
/* Clears this thread's message. */
void grpo_error_clear(void);

/* How a completion ended: one enum for the engine, the store, the worker protocol and the JSONL. */
typedef enum grpo_finish {
    GRPO_FINISH_NONE = 0,   /* still running (never stored) */
    GRPO_FINISH_EOS = 1,    /* sampled the end-of-sequence id */
    GRPO_FINISH_STOP = 2,   /* a stop id or stop string */
    GRPO_FINISH_LENGTH = 3, /* max_new_tokens (or the model's context) reached */
    GRPO_FINISH_ABORT = 4   /* cancelled (interrupt, lease lost, error) */
} grpo_finish;
/* "eos", "stop", "length", "abort" (as the store writes them), "running" for NONE. */
const char *grpo_finish_name(grpo_finish f);
/* The reason named so, or GRPO_FINISH_NONE for any other text (or NULL). */
grpo_finish grpo_finish_parse(const char *name);

/* Logging to stderr. Level from GRPO_LOG=error|warn|info|debug (default info) or set here. */
typedef enum grpo_log_level {
    GRPO_LOG_ERROR = 0,
    GRPO_LOG_WARN = 1,
    GRPO_LOG_INFO = 2,
    GRPO_LOG_DEBUG = 3
} grpo_log_level;
void grpo_log_set_level(grpo_log_level level);
grpo_log_level grpo_log_get_level(void);
void grpo_log(grpo_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* SHA-256. */
typedef struct grpo_sha256 {
    uint32_t h[8];
    uint64_t nbytes;
    uint8_t buf[64];
    size_t nbuf;
} grpo_sha256;
void grpo_sha256_init(grpo_sha256 *s);
void grpo_sha256_update(grpo_sha256 *s, const void *data, size_t n);
void grpo_sha256_final(grpo_sha256 *s, uint8_t out[32]);
/* grpo_sha256_final as 64 lowercase hex characters plus NUL. */
void grpo_sha256_final_hex(grpo_sha256 *s, char out[65]);
/* One-shot digest as 64 lowercase hex characters plus NUL. */
void grpo_sha256_hex(const void *data, size_t n, char out[65]);
/* Digest of a whole file, streamed. */
grpo_err grpo_sha256_file(const char *path, char out[65]);

/* Bump allocator: many small allocations freed together. */
typedef struct grpo_arena grpo_arena;
grpo_err grpo_arena_create(grpo_arena **out, size_t block_bytes);
void grpo_arena_destroy(grpo_arena *a);
/* Returns 16-byte aligned zeroed memory owned by the arena, or NULL (with a message) on ENOMEM. */
void *grpo_arena_alloc(grpo_arena *a, size_t n);
char *grpo_arena_strdup(grpo_arena *a, const char *s);
/* Frees everything allocated so far but keeps the first block for reuse. */
void grpo_arena_reset(grpo_arena *a);
size_t grpo_arena_used(const grpo_arena *a);

/* A fixed pool of worker threads. parallel_for splits [0, n) into contiguous chunks, a function of
 * n and the chunk count only, so work assignment never depends on timing. */
typedef struct grpo_pool grpo_pool;
typedef void (*grpo_pool_fn)(void *ctx, size_t begin, size_t end, int worker);
grpo_err grpo_pool_create(grpo_pool **out, int n_threads); /* n_threads <= 0: number of CPUs */
void grpo_pool_destroy(grpo_pool *p);
int grpo_pool_size(const grpo_pool *p);
/* Runs fn over [0, n) in at most pool-size chunks (fewer when n is small); blocks until done.
 * The calling thread takes part. Not reentrant: do not call from inside fn. */
void grpo_pool_parallel_for(grpo_pool *p, size_t n, grpo_pool_fn fn, void *ctx);
/* Barrier accounting (off by default; costs two clock reads per parallel_for): on != 0 resets
 * and starts it. *calls: parallel_fors run on the pool since; *wait_s: time the caller spent
 * waiting for the other threads after finishing its own chunk (load imbalance plus wake-up). */
void grpo_pool_set_timing(grpo_pool *p, int on);
void grpo_pool_timing(const grpo_pool *p, uint64_t *calls, double *wait_s);
int grpo_cpu_count(void);

/* Monotonic clock in seconds. */
double grpo_now(void);

#ifdef __cplusplus
}
#endif
#endif
