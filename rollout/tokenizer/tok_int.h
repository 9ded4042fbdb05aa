/* Private structures of the tokenizer: the loaded model (vocabulary, merges, added tokens,
 * pre-tokenizer stages) and the per-call scratch space (regex match data, BPE cache). */
#ifndef GRPO_TOK_INT_H
#define GRPO_TOK_INT_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include "common/common_int.h"
#include "grpo/tokenizer.h"
#include <pcre2.h>
#include <stdatomic.h>
#include <stdbool.h>

/* ---- hashing ---- */
uint64_t grpo_tok__hash(const void *p, size_t n);
static inline uint64_t
grpo_tok__hash_u64(uint64_t h)
{
    h ^= h >> 31;
    h *= 0x9e3779b97f4a7c15ULL;
    h ^= h >> 29;
    return h;
}

/* Byte-string -> int32 map, open addressing; keys point into memory the owner keeps alive. */
typedef struct tok_strmap {
    struct tok_strslot {
        const char *key;
        uint32_t len;
        int32_t val;
    } * slots;
    size_t mask, count;
} tok_strmap;
grpo_err grpo_tok__strmap_init(tok_strmap *m, size_t expected);
void grpo_tok__strmap_fini(tok_strmap *m);
/* Inserts or replaces. */
grpo_err grpo_tok__strmap_put(tok_strmap *m, const char *key, size_t len, int32_t val);
int32_t grpo_tok__strmap_get(const tok_strmap *m, const char *key, size_t len); /* -1: absent */

/* (left id, right id) -> (rank, merged id). */
typedef struct tok_merge {
    uint64_t key; /* left << 32 | right; UINT64_MAX = empty */
    uint32_t rank;
    int32_t id;
} tok_merge;

/* ---- added tokens: a byte trie searched leftmost-longest ---- */
typedef struct tok_trie_node {
    int32_t child;   /* first child node, -1 none */
    int32_t sibling; /* next sibling, -1 none */
    int32_t token;   /* index into tok->added when a token ends here, else -1 */
    uint8_t byte;
} tok_trie_node;

typedef struct tok_trie {
    tok_trie_node *nodes; /* node 0 is the root */
    size_t n, cap;
    int32_t root_child[256]; /* children of the root by byte, -1 none */
    bool empty;
} tok_trie;

typedef struct tok_added {
    char *content;
    size_t len;
    int32_t id;
    bool special, lstrip, rstrip, normalized;
} tok_added;

/* ---- pre-tokenizer stages (applied in order to each piece) ---- */
enum { STAGE_SPLIT = 1, STAGE_BYTELEVEL = 2 };
enum { SPLIT_ISOLATED = 1, SPLIT_REMOVED = 2 };
typedef struct tok_stage {
    int kind;
    pcre2_code *re;    /* STAGE_SPLIT; STAGE_BYTELEVEL when use_regex (GPT-2 pattern) */
    bool jit;          /* re was JIT-compiled */
    int behavior;      /* STAGE_SPLIT */
    bool invert;       /* STAGE_SPLIT */
    bool prefix_space; /* STAGE_BYTELEVEL add_prefix_space */
} tok_stage;

#define TOK_MAX_STAGES 8
#define TOK_POOL 16

typedef struct tok_scratch tok_scratch;

struct grpo_tokenizer {
    int32_t n_ids; /* vocab_size: largest id + 1 */
    /* Per id: the bytes it decodes to (offset/len into blob), and flags. */
    uint32_t *bytes_off, *bytes_len;
    char *blob;
    uint8_t *idflags; /* IDF_* */
    /* token text (vocab key or added content) -> id */
    tok_strmap by_text;
    /* model vocabulary by raw bytes -> id (for ignore_merges) */
    tok_strmap by_bytes;
    grpo_arena *arena;    /* key strings, added-token contents */
    int32_t byte_id[256]; /* id of the single-byte token, -1 if absent */
    tok_merge *merges;
    size_t merges_mask;
    bool ignore_merges;
    /* added tokens */
    tok_added *added;
    size_t n_added;
    tok_trie trie_raw, trie_norm; /* non-normalized / normalized tokens */
    /* pre-tokenizer */
    tok_stage stages[TOK_MAX_STAGES];
    int n_stages;
    bool has_bytelevel;
    bool nfc; /* normalizer NFC (Qwen): pieces between non-normalized added tokens */
    /* config */
    int32_t bos, eos;
    char *bos_text; /* content of the BOS token, for the chat template ("" if none) */
    grpo_chat_family family;
    char *template_unknown; /* "file: sha256 ..." of a chat_template not implemented, or NULL */
    /* scratch pool */
    int cache_slots; /* 0: no cache */
    atomic_int busy[TOK_POOL];
    tok_scratch *pool[TOK_POOL];
};

enum { IDF_USED = 1, IDF_SPECIAL = 2, IDF_ADDED = 4 };

/* ---- scratch: one per concurrent encode ---- */
typedef struct tok_seg {
    size_t start, end;
    int32_t id; /* -1: text */
} tok_seg;

typedef struct tok_ivec {
    int32_t *v;
    size_t n, cap;
} tok_ivec;
grpo_err grpo_tok__ivec_push(tok_ivec *v, int32_t x);
grpo_err grpo_tok__ivec_reserve(tok_ivec *v, size_t extra);

typedef struct tok_cache_slot {
    uint64_t hash;
    uint32_t off; /* into data: key bytes then ids (4-aligned) */
    uint16_t klen, nids;
} tok_cache_slot;

struct tok_scratch {
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jstack;
    tok_seg *segs;
    size_t segs_cap;
    char *tmp; /* prefix-space copy */
    size_t tmp_cap;
    /* BPE work arrays */
    int32_t *sym_id, *sym_prev, *sym_next;
    uint64_t *heap;
    size_t sym_cap, heap_cap;
    /* cache */
    tok_cache_slot *cslots;
    size_t cmask, ccount;
    char *cdata;
    size_t clen, ccap;
};

grpo_err grpo_tok__scratch_get(const grpo_tokenizer *tok, tok_scratch **out, int *slot);
void grpo_tok__scratch_put(const grpo_tokenizer *tok, tok_scratch *s, int slot);
void grpo_tok__scratch_free(tok_scratch *s);

/* BPE of one pre-token (raw bytes), appending ids to out. */
grpo_err grpo_tok__bpe(const grpo_tokenizer *tok, tok_scratch *s, const unsigned char *p, size_t n,
                       tok_ivec *out);

/* Trie */
grpo_err grpo_tok__trie_add(tok_trie *t, const char *s, size_t n, int32_t token);
void grpo_tok__trie_fini(tok_trie *t);

/* UTF-8 helpers */
/* Decodes the code point at s[i] (n bytes in all) and returns its length; an invalid or truncated
 * sequence yields length 1 and *cp = UINT32_MAX. */
size_t grpo_tok__utf8_next(const unsigned char *s, size_t n, size_t i, uint32_t *cp);
bool grpo_tok__is_whitespace(uint32_t cp); /* Unicode White_Space, as Rust char::is_whitespace */

/* The NFC form of s[0..n) into out (replacing its contents); invalid UTF-8 bytes pass through. */
grpo_err grpo_tok__nfc(const unsigned char *s, size_t n, grpo_buf *out);

/* ---- chat templates (chat.c: DeepSeek; chat_qwen.c, chat_llama.c) ---- */
typedef struct tok_out {
    grpo_buf b;
    grpo_err err;
} tok_out;
void grpo_chat__put(tok_out *o, const char *s);
void grpo_chat__putn(tok_out *o, const char *s, size_t n);
void grpo_chat__fail(tok_out *o, size_t i, const grpo_chat_message *m, const char *what);
bool grpo_chat__role_is(const grpo_chat_message *m, const char *role);
/* json.dumps(s, ensure_ascii=False), as transformers' tojson filter writes a string. */
void grpo_chat__put_json_str(tok_out *o, const char *s);
/* Python's str.strip() / strip(chars) bounds of s[0..n): *a, *b. */
void grpo_chat__py_strip(const char *s, size_t n, size_t *a, size_t *b);
void grpo_chat__qwen(tok_out *o, grpo_chat_family fam, const grpo_chat_message *msgs, size_t n,
                     int add_generation_prompt);
void grpo_chat__llama(tok_out *o, const grpo_tokenizer *tok, grpo_chat_family fam,
                      const grpo_chat_message *msgs, size_t n, int add_generation_prompt);

/* Loader pieces (load.c) used by config.c */
grpo_err grpo_tok__read_config(grpo_tokenizer *tok, const char *path, bool must_exist);
void grpo_tok__default_specials(grpo_tokenizer *tok);

#endif
