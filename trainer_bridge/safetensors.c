/* The bridge's view of the shared safetensors parser (common/safetensors.c) for untrusted bytes:
 * used by the batch decoder and by the weight-update check, with the strict options (dtype names,
 * shapes, byte sizes, offsets inside the data section, no overlaps, no gaps, string metadata). */
#include "trainer_bridge/bridge_int.h"

#include <stdlib.h>
#include <string.h>

/* Batches and weight files: strict JSON text, names of 1..255 bytes, string metadata kept, the
 * data section covered exactly (no gaps). */
static const grpo__st_opts bridge_opts = {
    .max_header = GRPO_BATCH_MAX_HEADER,
    .max_int = (uint64_t)1 << 53,
    .max_elems = (uint64_t)1 << 53,
    .max_name = ST_MAX_NAME,
    .strict_json = true,
    .strict_meta = true,
    .no_gaps = true,
};

size_t
grpo_bridge__st_dtype_size(st_dtype d)
{
    return grpo__st_dtype_size(d);
}

const char *
grpo_bridge__st_dtype_name(st_dtype d)
{
    return grpo__st_dtype_name(d);
}

void
grpo_bridge__put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

uint64_t
grpo_bridge__get_u64(const uint8_t *p)
{
    return grpo__st_get_u64(p);
}

void
grpo_bridge__st_free(st_file *f)
{
    grpo__st_header_fini(f);
}

grpo_err
grpo_bridge__st_parse_header(const char *json, size_t json_len, uint64_t data_len,
                             const char *where, st_file *out)
{
    return grpo__st_parse_header(json, json_len, data_len, where, &bridge_opts, out);
}

grpo_err
grpo_bridge__st_parse(const void *bytes, size_t len, const char *where, st_file *out)
{
    return grpo__st_parse(bytes, len, where, &bridge_opts, out);
}

const st_tensor *
grpo_bridge__st_find(const st_file *f, const char *name)
{
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0)
            return &f->t[i];
    return NULL;
}

const char *
grpo_bridge__st_meta(const st_file *f, const char *key)
{
    for (size_t i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_keys[i], key) == 0)
            return f->meta_vals[i];
    return NULL;
}
