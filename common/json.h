/* JSON helpers over cJSON: typed, bounded field access whose errors name the file and the key.
 * `where` is a prefix for messages, e.g. "model/config.json". */
#ifndef GRPO_COMMON_JSON_H
#define GRPO_COMMON_JSON_H

#include "common/common_int.h"
#include <cjson/cJSON.h>

/* Parses a file (size-capped) into *out; the caller frees it with cJSON_Delete. */
grpo_err grpo__json_parse_file(const char *path, size_t max_bytes, cJSON **out);
/* Parses n bytes of text; `where` names the source in messages. */
grpo_err grpo__json_parse(const char *text, size_t n, const char *where, cJSON **out);
/* grpo__json_parse for text that becomes model input or records (prompts, chat messages): also
 * refuses invalid UTF-8 and the \u0000 escape (cJSON would cut the string there), naming the byte
 * offset. */
grpo_err grpo__json_parse_text(const char *text, size_t n, const char *where, cJSON **out);

/* Required fields: fail with GRPO_EFORMAT naming where and key when missing or mistyped.
 * Integers must be integral and within [lo, hi]. */
grpo_err grpo__json_int(const cJSON *obj, const char *key, const char *where, int64_t lo,
                        int64_t hi, int64_t *out);
grpo_err grpo__json_num(const cJSON *obj, const char *key, const char *where, double *out);
grpo_err grpo__json_bool(const cJSON *obj, const char *key, const char *where, bool *out);
/* Borrowed pointer into obj; valid while obj lives. */
grpo_err grpo__json_str(const cJSON *obj, const char *key, const char *where, const char **out);

/* Optional fields: leave *out unchanged and return OK when the key is absent or null;
 * fail when present with the wrong type or out of range. */
grpo_err grpo__json_int_opt(const cJSON *obj, const char *key, const char *where, int64_t lo,
                            int64_t hi, int64_t *out);
grpo_err grpo__json_num_opt(const cJSON *obj, const char *key, const char *where, double *out);
grpo_err grpo__json_bool_opt(const cJSON *obj, const char *key, const char *where, bool *out);
grpo_err grpo__json_str_opt(const cJSON *obj, const char *key, const char *where, const char **out);

/* Fails with GRPO_EFORMAT naming where and the first key of obj that is not in the
 * NULL-terminated list known: `WHERE: unknown key "K" (expected a, b, c)`. */
grpo_err grpo__json_check_keys(const cJSON *obj, const char *where, const char *const *known);

/* Serializes compactly into a heap string (caller frees with free()). */
char *grpo__json_print(const cJSON *obj);
/* grpo__json_print for output lines (grpo verify, rollout --out, stats): always valid UTF-8 JSON,
 * whatever bytes the strings in obj carry (cJSON copies them as they came). Invalid bytes become
 * U+FFFD as grpo__utf8_sanitize says; JSON's own syntax is ASCII, so only string contents change.
 * NULL when out of memory. */
char *grpo__json_print_utf8(const cJSON *obj);

#endif
