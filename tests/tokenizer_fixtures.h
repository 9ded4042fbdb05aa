/* Readers for the oracle fixtures of tests/data/tokenizer/ (written by
 * tools/make_tokenizer_fixtures.py; format described there) and the path of the real
 * DeepSeek-V3 tokenizer in data/deepseek-v3-tokenizer/. Header-only: each tokenizer test includes
 * it once. */
#ifndef GRPO_TOKENIZER_FIXTURES_H
#define GRPO_TOKENIZER_FIXTURES_H

#include "common/common_int.h"
#include "grpo/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fx_item {
    const char *text; /* points into the file buffer; not NUL-terminated */
    size_t len;
    int32_t *ids;
    size_t n;
    int flag;      /* decode: skip_special */
    size_t index;  /* encode: index into the corpus */
    uint32_t hash; /* hash files: FNV-1a 64 (low half) of the ids, n their count */
} fx_item;

typedef struct fx_file {
    char *buf;
    size_t len;
    fx_item *items;
    size_t n;
} fx_file;

static inline const char *
fx_source_dir(void)
{
    const char *s = getenv("GRPO_SOURCE_DIR");
    return s != NULL && s[0] ? s : "..";
}

/* Path of a file under tests/data/tokenizer/. */
static inline void
fx_path(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/tests/data/tokenizer/%s", fx_source_dir(), name);
}

/* The real DeepSeek-V3 tokenizer.json (data/deepseek-v3-tokenizer/ in the repository). Prints a
 * clear message and returns NULL when it is missing. */
static inline const char *
fx_v3_path(void)
{
    static char p[4096];
    snprintf(p, sizeof p, "%s/data/deepseek-v3-tokenizer/tokenizer.json", fx_source_dir());
    FILE *f = fopen(p, "rb");
    if (f == NULL) {
        fprintf(stderr,
                "FATAL: %s is missing: the DeepSeek-V3 tokenizer ships with the repository "
                "(GRPO_SOURCE_DIR/data/deepseek-v3-tokenizer/)\n",
                p);
        return NULL;
    }
    fclose(f);
    return p;
}

static inline int
fx_varint(const fx_file *f, size_t *pos, size_t *out)
{
    size_t v = 0;
    int shift = 0;
    while (*pos < f->len && shift < 63) {
        unsigned char b = (unsigned char)f->buf[(*pos)++];
        v |= (size_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return 0;
        }
        shift += 7;
    }
    return -1;
}

static inline int
fx_bytes(const fx_file *f, size_t *pos, fx_item *it)
{
    size_t len;
    if (fx_varint(f, pos, &len) != 0 || len > f->len - *pos)
        return -1;
    it->text = f->buf + *pos;
    it->len = len;
    *pos += len;
    return 0;
}

static inline int
fx_ids(const fx_file *f, size_t *pos, fx_item *it)
{
    size_t n, x;
    if (fx_varint(f, pos, &n) != 0 || n > f->len)
        return -1;
    it->ids = malloc((n ? n : 1) * sizeof *it->ids);
    if (it->ids == NULL)
        return -1;
    it->n = n;
    for (size_t i = 0; i < n; i++) {
        if (fx_varint(f, pos, &x) != 0)
            return -1;
        it->ids[i] = (int32_t)x;
    }
    return 0;
}

/* kind: 'C' corpus, 'E' encodings by index, 'T' texts with ids, 'D' decodes. */
/* A hash-file record: v(n), then the 4-byte little-endian hash. */
static inline int
fx_hashed(const fx_file *f, size_t *pos, fx_item *it)
{
    if (fx_varint(f, pos, &it->n) != 0 || f->len - *pos < 4)
        return -1;
    const unsigned char *b = (const unsigned char *)f->buf + *pos;
    it->hash = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    *pos += 4;
    return 0;
}

static inline int
fx_load(fx_file *f, const char *name, char kind)
{
    char path[4096], magic[8];
    memset(f, 0, sizeof *f);
    fx_path(path, sizeof path, name);
    if (grpo__read_file(path, 0, &f->buf, &f->len) != GRPO_OK) {
        fprintf(stderr, "FATAL: %s\n", grpo_error_last());
        return -1;
    }
    snprintf(magic, sizeof magic, "GTK%c1\n", kind);
    size_t pos = 6, n;
    if (f->len < 6 || memcmp(f->buf, magic, 6) != 0 || fx_varint(f, &pos, &n) != 0 || n > f->len) {
        fprintf(stderr, "FATAL: %s: bad header\n", path);
        return -1;
    }
    f->items = calloc(n ? n : 1, sizeof *f->items);
    if (f->items == NULL)
        return -1;
    for (size_t i = 0; i < n; i++) {
        fx_item *it = &f->items[i];
        size_t flag = 0;
        int rc = 0;
        if (kind == 'C')
            rc = fx_bytes(f, &pos, it);
        else if (kind == 'E')
            rc = fx_varint(f, &pos, &it->index) != 0 ? -1 : fx_ids(f, &pos, it);
        else if (kind == 'T')
            rc = fx_bytes(f, &pos, it) != 0 ? -1 : fx_ids(f, &pos, it);
        else if (kind == 'H')
            rc = fx_hashed(f, &pos, it);
        else
            rc = (fx_varint(f, &pos, &flag) != 0 || fx_ids(f, &pos, it) != 0)
                     ? -1
                     : fx_bytes(f, &pos, it);
        it->flag = (int)flag;
        if (rc != 0) {
            fprintf(stderr, "FATAL: %s: record %zu is malformed\n", path, i);
            return -1;
        }
        f->n = i + 1;
    }
    return 0;
}

static inline void
fx_free(fx_file *f)
{
    for (size_t i = 0; i < f->n; i++)
        free(f->items[i].ids);
    free(f->items);
    free(f->buf);
    memset(f, 0, sizeof *f);
}

/* The low half of the FNV-1a 64 hash of ids as little-endian uint32, as the hash files hold. */
static inline uint32_t
fx_ids_hash(const int32_t *ids, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < 4; k++)
            h = (h ^ (((uint32_t)ids[i] >> (8 * k)) & 0xFF)) * 0x100000001b3ULL;
    return (uint32_t)h;
}

/* Directory of a tokenizer unpacked from data/family-tokenizers/tokenizers.tar.xz into the build
 * tree ("qwen2.5", "llama3.1", ...). */
static inline const char *
fx_family_dir(const char *variant)
{
    static char p[4096];
    const char *b = getenv("GRPO_BINARY_DIR");
    snprintf(p, sizeof p, "%s/family-tokenizers/%s", b != NULL && b[0] ? b : "../build", variant);
    return p;
}

/* Prints the first difference between two id sequences. */
static inline void
fx_show_diff(const char *what, size_t idx, const char *text, size_t len, const int32_t *want,
             size_t nw, const int32_t *got, size_t ng)
{
    size_t k = 0;
    while (k < nw && k < ng && want[k] == got[k])
        k++;
    fprintf(stderr,
            "%s %zu (%zu bytes) differs at id %zu: want %d got %d (lens %zu/%zu); text: ", what,
            idx, len, k, k < nw ? want[k] : -1, k < ng ? got[k] : -1, nw, ng);
    for (size_t i = 0; i < len && i < 160; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c >= 0x20 && c < 0x7F && c != '\\')
            fputc(c, stderr);
        else
            fprintf(stderr, "\\x%02x", c);
    }
    fputc('\n', stderr);
}

#endif
