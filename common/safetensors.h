/* The one safetensors header parser: the 8-byte little-endian header length, the JSON object of
 * tensors {dtype, shape, data_offsets} and __metadata__, dtype names and sizes, shape * dtype size
 * == byte length, offsets inside the data section, no overlaps, unique names. The model loader
 * (files, mmap'd) and the trainer bridge (batches and weight files, untrusted bytes) differ only
 * in the options below (limits, JSON and metadata strictness, gaps). Every message starts with
 * `where` (the file or buffer name) and names the tensor. Private: modules include it as
 * "common/safetensors.h". */
#ifndef GRPO_COMMON_SAFETENSORS_H
#define GRPO_COMMON_SAFETENSORS_H

#include "common/common_int.h"
#include <stdint.h>

typedef enum {
    GRPO__ST_BOOL,
    GRPO__ST_U8,
    GRPO__ST_I8,
    GRPO__ST_I16,
    GRPO__ST_U16,
    GRPO__ST_F16,
    GRPO__ST_BF16,
    GRPO__ST_I32,
    GRPO__ST_U32,
    GRPO__ST_F32,
    GRPO__ST_F64,
    GRPO__ST_I64,
    GRPO__ST_U64,
    GRPO__ST_F8_E4M3,
    GRPO__ST_F8_E5M2,
    GRPO__ST_N_DTYPES
} grpo__st_dtype;

#define GRPO__ST_MAX_DIMS 8

typedef struct grpo__st_tensor {
    char *name; /* heap; grpo__st_header_fini frees it (a caller may take it and set NULL) */
    grpo__st_dtype dtype;
    size_t ndim;
    uint64_t shape[GRPO__ST_MAX_DIMS];
    uint64_t begin, end; /* byte range inside the data section */
} grpo__st_tensor;

typedef struct grpo__st_header {
    grpo__st_tensor *t; /* in header order */
    size_t n;
    char **meta_keys, **meta_vals; /* __metadata__ (string -> string), with strict_meta only */
    size_t n_meta;
    uint64_t header_len; /* JSON bytes */
    uint64_t data_off;   /* 8 + header_len */
    uint64_t data_len;
} grpo__st_header;

/* Where the two users legitimately differ. */
typedef struct grpo__st_opts {
    uint64_t max_header; /* grpo__st_parse: JSON header bytes at most */
    uint64_t max_int;    /* dimensions and offsets: exact JSON integers in [0, max_int], max_int
                            <= 2^53 */
    uint64_t max_elems;  /* no partial product of the shape over max_elems (<= UINT64_MAX / 8) */
    size_t max_name;     /* 0: any tensor name; else names of 1 .. max_name-1 bytes */
    bool strict_json;    /* the header starts with '{' and only spaces (the format's padding)
                            follow the object; else cJSON's leniency (leading whitespace,
                            anything after the object) */
    bool strict_meta;    /* __metadata__ at most once, its values strings, kept in
                            meta_keys/meta_vals; else any object (repeats too), not kept */
    bool no_gaps;        /* the tensors cover the data section exactly; else gaps are allowed */
} grpo__st_opts;

size_t grpo__st_dtype_size(grpo__st_dtype d);
const char *grpo__st_dtype_name(grpo__st_dtype d);
uint64_t grpo__st_get_u64(const uint8_t *p); /* little-endian */

/* A whole image bytes[0..len): the 8-byte length (2 <= it <= min(max_header, len - 8)), the
 * header, the data section (the rest). On failure *out is empty (fini not needed). */
grpo_err grpo__st_parse(const void *bytes, size_t len, const char *where, const grpo__st_opts *o,
                        grpo__st_header *out);
/* Only the header JSON (json, json_len) for a data section of data_len bytes (the caller has
 * checked the length prefix). */
grpo_err grpo__st_parse_header(const char *json, size_t json_len, uint64_t data_len,
                               const char *where, const grpo__st_opts *o, grpo__st_header *out);
void grpo__st_header_fini(grpo__st_header *h);

#endif
