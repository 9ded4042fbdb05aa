/* Private helpers shared by every module: failing with a message, reading files, JSON access.
 * Not installed; modules include it as "common/common_int.h". */
#ifndef GRPO_COMMON_INT_H
#define GRPO_COMMON_INT_H

#include "grpo/common.h"
#include <stdbool.h>
#include <stdio.h>

/* Stores a formatted message as this thread's last error and returns code. */
grpo_err grpo__fail(grpo_err code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Like grpo__fail, appending ": strerror(errno_value)". */
grpo_err grpo__fail_errno(grpo_err code, int errno_value, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Maps an errno to the closest grpo_err (EACCES/EROFS -> EPERM, ENOSPC -> EFULL, ...). */
grpo_err grpo__err_from_errno(int e);

/* Reads a whole file (at most max_bytes; 0 = no limit) into a NUL-terminated heap buffer.
 * The caller frees *out. */
grpo_err grpo__read_file(const char *path, size_t max_bytes, char **out, size_t *len);
/* Writes buf to path atomically (temp file + fsync + rename). */
grpo_err grpo__write_file_atomic(const char *path, const void *buf, size_t len);

/* True if s[0..n) is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF). */
bool grpo__utf8_valid(const char *s, size_t n);
/* Length of the longest valid UTF-8 prefix of s[0..n) (n when all of it is valid): the byte
 * offset to name in an "invalid UTF-8" message. */
size_t grpo__utf8_valid_len(const char *s, size_t n);
/* A NUL-terminated heap copy of s[0..n) that is valid UTF-8 whatever s holds: every byte that does
 * not begin a well-formed sequence (a stray continuation byte, a truncated or overlong sequence, a
 * surrogate, a code point past U+10FFFF) becomes U+FFFD (EF BF BD), one per byte; valid text comes
 * back byte for byte. *out_len (may be NULL) gets the length. NULL when out of memory. */
char *grpo__utf8_sanitize(const char *s, size_t n, size_t *out_len);
/* The same in place for a fixed NUL-terminated buffer of cap bytes (a verdict label): the result
 * is cut at a character boundary when the replacements make it longer. */
void grpo__utf8_sanitize_buf(char *buf, size_t cap);

/* Growable byte buffer. */
typedef struct grpo_buf {
    char *data;
    size_t len, cap;
} grpo_buf;
grpo_err grpo__buf_reserve(grpo_buf *b, size_t extra);
grpo_err grpo__buf_append(grpo_buf *b, const void *p, size_t n);
grpo_err grpo__buf_printf(grpo_buf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void grpo__buf_fini(grpo_buf *b);
/* Appends s as a JSON string literal: quotes, \" and \\ escaped, control bytes as \u00XX, every
 * other byte as it is (the caller keeps s UTF-8). */
grpo_err grpo__buf_json_str(grpo_buf *b, const char *s);

#endif
