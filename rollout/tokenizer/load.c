/* Loading a Hugging Face tokenizer.json (byte-level BPE) and its tokenizer_config.json: every
 * field that changes the output is read or refused with a message naming it. */
#include "rollout/tokenizer/tok_int.h"
#include "rollout/tokenizer/unicode_extra.h"
#include "common/json.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TOK_MAX_FILE ((size_t)1 << 30)
#define TOK_MAX_ID (1 << 24)

static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"
    "\\s+(?!\\S)|\\s+";

/* GPT-2's byte <-> printable character map: bytes that are printable Latin-1 map to themselves,
 * the other 68 to U+0100.. in order. char_byte[cp] for cp < 512 (-1: not a byte character). */
static void
byte_map(uint32_t byte_char[256], int16_t char_byte[512])
{
    for (int i = 0; i < 512; i++)
        char_byte[i] = -1;
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        byte_char[b] = keep ? (uint32_t)b : next++;
        char_byte[byte_char[b]] = (int16_t)b;
    }
}

/* Appends the bytes a token string decodes to, following HF's ByteLevel decoder: each character
 * mapped back to its byte when every character is a byte character, else the raw UTF-8. */
static grpo_err
token_bytes(grpo_buf *blob, const int16_t char_byte[512], const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t start = blob->len;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = grpo_tok__utf8_next(u, n, i, &cp);
        if (cp >= 512 || char_byte[cp] < 0) {
            blob->len = start;
            return grpo__buf_append(blob, s, n);
        }
        char b = (char)char_byte[cp];
        grpo_err err = grpo__buf_append(blob, &b, 1);
        if (err != GRPO_OK)
            return err;
        i += k;
    }
    return GRPO_OK;
}

static grpo_err
unsupported(const char *where, const char *field, const char *what)
{
    return grpo__fail(GRPO_EUNSUPPORTED, "%s: %s: %s is not supported", where, field, what);
}

static const char *
type_of(const cJSON *o)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

/* ---- normalizer ---- */

/* None, NFC (Qwen), or a Sequence of those. */
static grpo_err
check_normalizer(grpo_tokenizer *tok, const cJSON *n, const char *where)
{
    if (n == NULL || cJSON_IsNull(n))
        return GRPO_OK;
    if (!cJSON_IsObject(n))
        return grpo__fail(GRPO_EFORMAT, "%s: \"normalizer\" must be an object or null", where);
    const char *t = type_of(n);
    if (t == NULL)
        return grpo__fail(GRPO_EFORMAT, "%s: normalizer has no \"type\"", where);
    if (strcmp(t, "NFC") == 0) {
        tok->nfc = true;
        return GRPO_OK;
    }
    if (strcmp(t, "Sequence") != 0)
        return unsupported(where, "normalizer", t);
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "normalizers");
    if (!cJSON_IsArray(list))
        return grpo__fail(GRPO_EFORMAT, "%s: normalizer Sequence needs a \"normalizers\" array",
                          where);
    const cJSON *it;
    cJSON_ArrayForEach(it, list)
    {
        grpo_err err = check_normalizer(tok, it, where);
        if (err != GRPO_OK)
            return err;
    }
    return GRPO_OK;
}

/* ---- pre-tokenizer ---- */

/* HF runs these regexes with Oniguruma, whose Unicode tables are newer than Debian 12's PCRE2 and
 * whose \s is exactly White_Space (PCRE2's also has U+180E). So \p{L,M,N,P,S} gain the code
 * points Oniguruma has and PCRE2 lacks (unicode_extra.h, read from HF by the fixture tool) and
 * \s/\S become explicit sets. Other escapes pass through unchanged. */
static const char *
extra_for(char cat)
{
    switch (cat) {
    case 'L':
        return TOK_EXTRA_L;
    case 'M':
        return TOK_EXTRA_M;
    case 'N':
        return TOK_EXTRA_N;
    case 'P':
        return TOK_EXTRA_P;
    case 'S':
        return TOK_EXTRA_S;
    default:
        return NULL;
    }
}

static grpo_err
rewrite_escape(grpo_buf *o, const char *p, size_t len, size_t *i, bool in_class, const char *where)
{
    char c = p[*i + 1];
    grpo_err err = GRPO_OK;
    if (c == 's' || c == 'S') {
        if (c == 'S' && in_class)
            return unsupported(where, "pre_tokenizer regex", "\\S inside a character class");
        err = grpo__buf_printf(o, "%s%s%s",
                               in_class   ? ""
                               : c == 's' ? "["
                                          : "[^",
                               TOK_WHITESPACE, in_class ? "" : "]");
        *i += 2;
        return err;
    }
    if (c == 'p' || c == 'P') {
        char cat = 0;
        size_t end = *i + 2;
        if (end < len && p[end] == '{' && end + 2 < len && p[end + 2] == '}') {
            cat = p[end + 1];
            end += 3;
        } else if (end < len && p[end] != '{') {
            cat = p[end];
            end += 1;
        }
        const char *extra = cat ? extra_for(cat) : NULL;
        if (extra != NULL && !(c == 'P' && in_class)) {
            if (in_class)
                err = grpo__buf_printf(o, "\\p{%c}%s", cat, extra);
            else
                err = grpo__buf_printf(o, "[%s\\p{%c}%s]", c == 'P' ? "^" : "", cat, extra);
            *i = end;
            return err;
        }
    }
    err = grpo__buf_append(o, p + *i, *i + 1 < len ? 2 : 1);
    *i += 2;
    return err;
}

static grpo_err
rewrite_pattern(grpo_buf *o, const char *p, size_t len, const char *where)
{
    bool in_class = false;
    grpo_err err = GRPO_OK;
    for (size_t i = 0; i < len && err == GRPO_OK;) {
        if (p[i] == '\\') {
            err = rewrite_escape(o, p, len, &i, in_class, where);
            continue;
        }
        size_t n = 1;
        if (!in_class && p[i] == '[') {
            in_class = true;
            if (i + n < len && p[i + n] == '^')
                n++;
            if (i + n < len && p[i + n] == ']') /* a leading ] is literal */
                n++;
        } else if (in_class && p[i] == '[' && i + 1 < len && p[i + 1] == ':') {
            const char *e = memchr(p + i + 2, ']', len - i - 2);
            n = e ? (size_t)(e - (p + i)) + 1 : 1;
        } else if (in_class && p[i] == ']') {
            in_class = false;
        }
        err = grpo__buf_append(o, p + i, n);
        i += n;
    }
    return err;
}

static grpo_err
compile_stage(tok_stage *st, const char *pat, size_t len, bool literal, const char *where)
{
    int ec;
    PCRE2_SIZE eo;
    uint32_t flags = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
    grpo_buf rw = {0};
    grpo_err err = GRPO_OK;
    if (literal)
        flags = PCRE2_LITERAL | PCRE2_UTF | PCRE2_MATCH_INVALID_UTF;
    else
        err = rewrite_pattern(&rw, pat, len, where);
    if (err == GRPO_OK && !literal)
        err = grpo__buf_append(&rw, "", 0);
    if (err != GRPO_OK) {
        grpo__buf_fini(&rw);
        return err;
    }
    st->re = pcre2_compile(literal ? (PCRE2_SPTR)pat : (PCRE2_SPTR)rw.data, literal ? len : rw.len,
                           flags, &ec, &eo, NULL);
    grpo__buf_fini(&rw);
    if (st->re == NULL) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return grpo__fail(GRPO_EUNSUPPORTED,
                          "%s: pre_tokenizer regex /%.*s/ does not compile under PCRE2 at offset "
                          "%zu: %s",
                          where, (int)(len > 200 ? 200 : len), pat, (size_t)eo, (char *)msg);
    }
    st->jit = pcre2_jit_compile(st->re, PCRE2_JIT_COMPLETE) == 0;
    return GRPO_OK;
}

static grpo_err add_pretok(grpo_tokenizer *tok, const cJSON *p, const char *where);

static grpo_err
add_split(grpo_tokenizer *tok, const cJSON *p, const char *where)
{
    if (tok->has_bytelevel)
        return unsupported(where, "pre_tokenizer", "a Split after ByteLevel");
    if (tok->n_stages == TOK_MAX_STAGES)
        return unsupported(where, "pre_tokenizer", "more than 8 stages");
    tok_stage *st = &tok->stages[tok->n_stages];
    memset(st, 0, sizeof *st);
    st->kind = STAGE_SPLIT;
    const char *beh = NULL;
    grpo_err err = grpo__json_str(p, "behavior", where, &beh);
    if (err != GRPO_OK)
        return err;
    if (strcmp(beh, "Isolated") == 0)
        st->behavior = SPLIT_ISOLATED;
    else if (strcmp(beh, "Removed") == 0)
        st->behavior = SPLIT_REMOVED;
    else
        return unsupported(where, "Split behavior", beh);
    if ((err = grpo__json_bool_opt(p, "invert", where, &st->invert)) != GRPO_OK)
        return err;
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(p, "pattern");
    const cJSON *re = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
    const cJSON *lit = cJSON_GetObjectItemCaseSensitive(pat, "String");
    const cJSON *s = cJSON_IsString(re) ? re : lit;
    if (!cJSON_IsString(s))
        return grpo__fail(GRPO_EFORMAT,
                          "%s: Split \"pattern\" must be {\"Regex\": str} or {\"String\": str}",
                          where);
    if ((err = compile_stage(st, s->valuestring, strlen(s->valuestring), s == lit, where)) !=
        GRPO_OK)
        return err;
    tok->n_stages++;
    return GRPO_OK;
}

static grpo_err
add_bytelevel(grpo_tokenizer *tok, const cJSON *p, const char *where)
{
    if (tok->has_bytelevel)
        return unsupported(where, "pre_tokenizer", "two ByteLevel stages");
    tok_stage *st = &tok->stages[tok->n_stages];
    memset(st, 0, sizeof *st);
    st->kind = STAGE_BYTELEVEL;
    st->behavior = SPLIT_ISOLATED;
    bool use_regex = true;
    grpo_err err = grpo__json_bool_opt(p, "use_regex", where, &use_regex);
    if (err == GRPO_OK)
        err = grpo__json_bool_opt(p, "add_prefix_space", where, &st->prefix_space);
    if (err != GRPO_OK)
        return err;
    if (use_regex &&
        (err = compile_stage(st, GPT2_PATTERN, sizeof GPT2_PATTERN - 1, false, where)) != GRPO_OK)
        return err;
    tok->n_stages++;
    tok->has_bytelevel = true;
    return GRPO_OK;
}

static grpo_err
add_pretok(grpo_tokenizer *tok, const cJSON *p, const char *where)
{
    if (!cJSON_IsObject(p))
        return grpo__fail(GRPO_EFORMAT, "%s: a pre_tokenizer must be an object", where);
    const char *t = type_of(p);
    if (t == NULL)
        return grpo__fail(GRPO_EFORMAT, "%s: pre_tokenizer has no \"type\"", where);
    if (strcmp(t, "Split") == 0)
        return add_split(tok, p, where);
    if (strcmp(t, "ByteLevel") == 0)
        return add_bytelevel(tok, p, where);
    if (strcmp(t, "Sequence") != 0)
        return unsupported(where, "pre_tokenizer", t);
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(p, "pretokenizers");
    if (!cJSON_IsArray(list))
        return grpo__fail(GRPO_EFORMAT,
                          "%s: pre_tokenizer Sequence needs a \"pretokenizers\" array", where);
    const cJSON *it;
    cJSON_ArrayForEach(it, list)
    {
        grpo_err err = add_pretok(tok, it, where);
        if (err != GRPO_OK)
            return err;
    }
    return GRPO_OK;
}

static grpo_err
check_decoder(const cJSON *d, const char *where)
{
    if (!cJSON_IsObject(d))
        return unsupported(where, "decoder", "anything but ByteLevel (here: missing or null)");
    const char *t = type_of(d);
    if (t != NULL && strcmp(t, "ByteLevel") == 0)
        return GRPO_OK;
    if (t != NULL && strcmp(t, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(d, "decoders");
        if (cJSON_IsArray(list) && cJSON_GetArraySize(list) == 1)
            return check_decoder(cJSON_GetArrayItem(list, 0), where);
    }
    return unsupported(where, "decoder", t != NULL ? t : "an untyped decoder");
}

/* ---- model ---- */

static grpo_err
check_model_options(const cJSON *m, const char *where)
{
    const char *t = type_of(m);
    if (t != NULL && strcmp(t, "BPE") != 0)
        return unsupported(where, "model type", t);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(m, "dropout");
    if (d != NULL && !cJSON_IsNull(d) && !(cJSON_IsNumber(d) && d->valuedouble == 0.0))
        return unsupported(where, "model.dropout", "a non-zero dropout");
    const char *keys[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, keys[i]);
        if (v != NULL && !cJSON_IsNull(v) && !(cJSON_IsString(v) && v->valuestring[0] == 0))
            return unsupported(where, keys[i], "a non-empty value");
    }
    return GRPO_OK;
}

typedef struct vocab_entry {
    const char *key;
    int32_t id;
} vocab_entry;

static grpo_err
read_vocab(grpo_tokenizer *tok, const cJSON *vocab, const char *where, int32_t *max_id)
{
    if (!cJSON_IsObject(vocab))
        return grpo__fail(GRPO_EFORMAT, "%s: \"model.vocab\" must be an object", where);
    size_t n = (size_t)cJSON_GetArraySize(vocab);
    grpo_err err = grpo_tok__strmap_init(&tok->by_text, n + 1024);
    if (err != GRPO_OK)
        return err;
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab)
    {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble >= TOK_MAX_ID ||
            it->valuedouble != (double)(int32_t)it->valuedouble)
            return grpo__fail(GRPO_EFORMAT,
                              "%s: model.vocab[\"%.60s\"] must be an integer id in [0, %d)", where,
                              it->string, TOK_MAX_ID);
        int32_t id = (int32_t)it->valuedouble;
        char *key = grpo_arena_strdup(tok->arena, it->string);
        if (key == NULL)
            return grpo__fail(GRPO_ENOMEM, "tokenizer: out of memory");
        if ((err = grpo_tok__strmap_put(&tok->by_text, key, strlen(key), id)) != GRPO_OK)
            return err;
        if (id > *max_id)
            *max_id = id;
    }
    return GRPO_OK;
}

static grpo_err
merge_put(grpo_tokenizer *tok, int32_t a, int32_t b, uint32_t rank, int32_t id)
{
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    size_t i = grpo_tok__hash_u64(key) & tok->merges_mask;
    for (;; i = (i + 1) & tok->merges_mask) {
        tok_merge *m = &tok->merges[i];
        if (m->key == UINT64_MAX || m->key == key) {
            m->key = key;
            m->rank = rank;
            m->id = id;
            return GRPO_OK;
        }
    }
}

static grpo_err
merge_sides(const cJSON *it, const char *where, size_t i, const char **a, const char **b, char *tmp,
            size_t tmpcap)
{
    if (cJSON_IsString(it)) {
        const char *s = it->valuestring;
        const char *sp = strchr(s, ' ');
        size_t la = sp ? (size_t)(sp - s) : 0;
        if (sp == NULL || strchr(sp + 1, ' ') != NULL || la + 1 > tmpcap)
            return grpo__fail(GRPO_EFORMAT, "%s: model.merges[%zu] \"%.60s\" is not \"a b\"", where,
                              i, s);
        memcpy(tmp, s, la);
        tmp[la] = 0;
        *a = tmp;
        *b = sp + 1;
        return GRPO_OK;
    }
    if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 &&
        cJSON_IsString(cJSON_GetArrayItem(it, 0)) && cJSON_IsString(cJSON_GetArrayItem(it, 1))) {
        *a = cJSON_GetArrayItem(it, 0)->valuestring;
        *b = cJSON_GetArrayItem(it, 1)->valuestring;
        return GRPO_OK;
    }
    return grpo__fail(GRPO_EFORMAT,
                      "%s: model.merges[%zu] must be a \"a b\" string or a [a, b] pair", where, i);
}

static grpo_err
read_merges(grpo_tokenizer *tok, const cJSON *merges, const char *where)
{
    if (!cJSON_IsArray(merges))
        return grpo__fail(GRPO_EFORMAT, "%s: \"model.merges\" must be an array", where);
    size_t n = (size_t)cJSON_GetArraySize(merges), cap = 16;
    while (cap < n * 2)
        cap <<= 1;
    tok->merges = malloc(cap * sizeof *tok->merges);
    if (tok->merges == NULL)
        return grpo__fail(GRPO_ENOMEM, "tokenizer: out of memory");
    memset(tok->merges, 0xFF, cap * sizeof *tok->merges);
    tok->merges_mask = cap - 1;
    char tmp[1024], cat[2048];
    size_t i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, merges)
    {
        const char *a = NULL, *b = NULL;
        grpo_err err = merge_sides(it, where, i, &a, &b, tmp, sizeof tmp);
        if (err != GRPO_OK)
            return err;
        size_t la = strlen(a), lb = strlen(b);
        if (la + lb >= sizeof cat)
            return grpo__fail(GRPO_EFORMAT, "%s: model.merges[%zu] is too long", where, i);
        memcpy(cat, a, la);
        memcpy(cat + la, b, lb);
        int32_t ia = grpo_tok__strmap_get(&tok->by_text, a, la);
        int32_t ib = grpo_tok__strmap_get(&tok->by_text, b, lb);
        int32_t ic = grpo_tok__strmap_get(&tok->by_text, cat, la + lb);
        if (ia < 0 || ib < 0 || ic < 0)
            return grpo__fail(GRPO_EFORMAT,
                              "%s: model.merges[%zu] (\"%.40s\" \"%.40s\"): %s is "
                              "not in the vocabulary",
                              where, i, a, b,
                              ia < 0   ? "the left side"
                              : ib < 0 ? "the right side"
                                       : "the merge");
        merge_put(tok, ia, ib, (uint32_t)i, ic);
        i++;
    }
    return GRPO_OK;
}

/* ---- added tokens ---- */

static grpo_err
read_added(grpo_tokenizer *tok, const cJSON *list, const char *where, int32_t *max_id)
{
    if (list == NULL || cJSON_IsNull(list))
        return GRPO_OK;
    if (!cJSON_IsArray(list))
        return grpo__fail(GRPO_EFORMAT, "%s: \"added_tokens\" must be an array", where);
    size_t n = (size_t)cJSON_GetArraySize(list), i = 0;
    tok->added = calloc(n ? n : 1, sizeof *tok->added);
    if (tok->added == NULL)
        return grpo__fail(GRPO_ENOMEM, "tokenizer: out of memory");
    const cJSON *it;
    cJSON_ArrayForEach(it, list)
    {
        char w[1024];
        snprintf(w, sizeof w, "%.980s: added_tokens[%zu]", where, i);
        tok_added *a = &tok->added[i];
        int64_t id;
        const char *content;
        bool single_word = false;
        grpo_err err = grpo__json_int(it, "id", w, 0, TOK_MAX_ID - 1, &id);
        if (err == GRPO_OK)
            err = grpo__json_str(it, "content", w, &content);
        a->normalized = true;
        if (err == GRPO_OK)
            err = grpo__json_bool_opt(it, "special", w, &a->special);
        if (err == GRPO_OK) {
            a->normalized = !a->special;
            err = grpo__json_bool_opt(it, "normalized", w, &a->normalized);
        }
        if (err == GRPO_OK)
            err = grpo__json_bool_opt(it, "lstrip", w, &a->lstrip);
        if (err == GRPO_OK)
            err = grpo__json_bool_opt(it, "rstrip", w, &a->rstrip);
        if (err == GRPO_OK)
            err = grpo__json_bool_opt(it, "single_word", w, &single_word);
        if (err != GRPO_OK)
            return err;
        if (single_word)
            return unsupported(w, "single_word", "true");
        a->id = (int32_t)id;
        a->len = strlen(content);
        if ((a->content = grpo_arena_strdup(tok->arena, content)) == NULL)
            return grpo__fail(GRPO_ENOMEM, "tokenizer: out of memory");
        if (a->id > *max_id)
            *max_id = a->id;
        i++;
    }
    tok->n_added = n;
    return GRPO_OK;
}

/* R1 checkpoints rename two placeholders; apply that to a V3 file. */
static grpo_err
apply_r1(grpo_tokenizer *tok, const char *where)
{
    static const char *names[2] = {"<think>", "</think>"};
    int done = 0;
    for (size_t i = 0; i < tok->n_added; i++) {
        tok_added *a = &tok->added[i];
        int k = a->id == GRPO_TOKENIZER_R1_THINK_ID       ? 0
                : a->id == GRPO_TOKENIZER_R1_THINK_END_ID ? 1
                                                          : -1;
        if (k < 0)
            continue;
        if (strcmp(a->content, names[k]) != 0 && strstr(a->content, "place") == NULL)
            return grpo__fail(GRPO_EINVAL, "%s: --r1: added token %d is \"%s\", not a placeholder",
                              where, a->id, a->content);
        a->content = (char *)names[k];
        a->len = strlen(names[k]);
        a->special = false; /* as in DeepSeek-R1's tokenizer.json: kept by skip_special decode */
        a->normalized = true;
        done++;
    }
    if (done == 2)
        return GRPO_OK;
    for (size_t i = 0; i < tok->n_added; i++)
        if (strcmp(tok->added[i].content, "<think>") == 0)
            return GRPO_OK; /* already an R1-style tokenizer */
    return grpo__fail(GRPO_EINVAL,
                      "%s: --r1 needs added tokens %d and %d (DeepSeek-V3 placeholders) or a "
                      "<think> token",
                      where, GRPO_TOKENIZER_R1_THINK_ID, GRPO_TOKENIZER_R1_THINK_END_ID);
}

/* ---- id tables ---- */

static grpo_err
build_tables(grpo_tokenizer *tok, int32_t max_id)
{
    uint32_t byte_char[256];
    int16_t char_byte[512];
    byte_map(byte_char, char_byte);
    size_t n = (size_t)max_id + 1;
    tok->n_ids = (int32_t)n;
    tok->bytes_off = calloc(n, sizeof *tok->bytes_off);
    tok->bytes_len = calloc(n, sizeof *tok->bytes_len);
    tok->idflags = calloc(n, 1);
    grpo_buf blob = {0};
    grpo_err err = GRPO_OK;
    if (tok->bytes_off == NULL || tok->bytes_len == NULL || tok->idflags == NULL) {
        err = grpo__fail(GRPO_ENOMEM, "tokenizer: out of memory");
        goto done;
    }
    /* model vocabulary first, then added tokens (which take precedence, as in HF id_to_token) */
    for (size_t i = 0; i <= tok->by_text.mask && err == GRPO_OK; i++) {
        const struct tok_strslot *s = &tok->by_text.slots[i];
        if (s->key == NULL)
            continue;
        tok->bytes_off[s->val] = (uint32_t)blob.len;
        err = token_bytes(&blob, char_byte, s->key, s->len);
        tok->bytes_len[s->val] = (uint32_t)(blob.len - tok->bytes_off[s->val]);
        tok->idflags[s->val] = IDF_USED;
    }
    for (size_t i = 0; i < tok->n_added && err == GRPO_OK; i++) {
        const tok_added *a = &tok->added[i];
        tok->bytes_off[a->id] = (uint32_t)blob.len;
        err = token_bytes(&blob, char_byte, a->content, a->len);
        tok->bytes_len[a->id] = (uint32_t)(blob.len - tok->bytes_off[a->id]);
        tok->idflags[a->id] = IDF_USED | IDF_ADDED | (a->special ? IDF_SPECIAL : 0);
    }
    if (err != GRPO_OK)
        goto done;
    if (blob.len > UINT32_MAX) {
        err = grpo__fail(GRPO_EFORMAT, "tokenizer: vocabulary text too large");
        goto done;
    }
    for (int b = 0; b < 256; b++) {
        char s[4];
        size_t k = 0;
        uint32_t c = byte_char[b];
        if (c < 0x80)
            s[k++] = (char)c;
        else {
            s[k++] = (char)(0xC0 | (c >> 6));
            s[k++] = (char)(0x80 | (c & 0x3F));
        }
        tok->byte_id[b] = grpo_tok__strmap_get(&tok->by_text, s, k);
    }
    tok->blob = blob.data;
    blob.data = NULL;
done:
    grpo__buf_fini(&blob);
    return err;
}

/* The model vocabulary keyed by raw bytes (only for ignore_merges). Must run before added
 * tokens enter by_text. */
static grpo_err
build_by_bytes(grpo_tokenizer *tok)
{
    grpo_err err = grpo_tok__strmap_init(&tok->by_bytes, tok->by_text.count);
    for (size_t i = 0; i <= tok->by_text.mask && err == GRPO_OK; i++) {
        const struct tok_strslot *s = &tok->by_text.slots[i];
        if (s->key != NULL)
            err = grpo_tok__strmap_put(&tok->by_bytes, tok->blob + tok->bytes_off[s->val],
                                       tok->bytes_len[s->val], s->val);
    }
    return err;
}

static grpo_err
index_added(grpo_tokenizer *tok)
{
    for (size_t i = 0; i < tok->n_added; i++) {
        tok_added *a = &tok->added[i];
        grpo_err err = grpo_tok__strmap_put(&tok->by_text, a->content, a->len, a->id);
        if (err == GRPO_OK)
            err = grpo_tok__trie_add(a->normalized ? &tok->trie_norm : &tok->trie_raw, a->content,
                                     a->len, (int32_t)i);
        if (err != GRPO_OK)
            return err;
    }
    return GRPO_OK;
}

static grpo_err
read_model(grpo_tokenizer *tok, const cJSON *root, const char *where, bool r1)
{
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model))
        return grpo__fail(GRPO_EFORMAT, "%s: \"model\" is missing or not an object", where);
    grpo_err err = check_model_options(model, where);
    if (err == GRPO_OK)
        err = grpo__json_bool_opt(model, "ignore_merges", where, &tok->ignore_merges);
    int32_t max_id = -1;
    if (err == GRPO_OK)
        err = read_vocab(tok, cJSON_GetObjectItemCaseSensitive(model, "vocab"), where, &max_id);
    if (err == GRPO_OK)
        err = read_merges(tok, cJSON_GetObjectItemCaseSensitive(model, "merges"), where);
    if (err == GRPO_OK)
        err =
            read_added(tok, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), where, &max_id);
    if (err == GRPO_OK && r1)
        err = apply_r1(tok, where);
    if (err == GRPO_OK && max_id < 0)
        err = grpo__fail(GRPO_EFORMAT, "%s: the vocabulary is empty", where);
    if (err == GRPO_OK)
        err = build_tables(tok, max_id);
    if (err == GRPO_OK && tok->ignore_merges)
        err = build_by_bytes(tok);
    if (err == GRPO_OK)
        err = index_added(tok);
    return err;
}

static grpo_err
read_tokenizer(grpo_tokenizer *tok, const cJSON *root, const char *where, bool r1)
{
    if (!cJSON_IsObject(root))
        return grpo__fail(GRPO_EFORMAT, "%s: expected a JSON object at the top level", where);
    grpo_err err = read_model(tok, root, where, r1);
    if (err == GRPO_OK)
        err = check_normalizer(tok, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), where);
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    if (err == GRPO_OK && (pre == NULL || cJSON_IsNull(pre)))
        err = unsupported(where, "pre_tokenizer", "null (byte-level BPE needs ByteLevel)");
    if (err == GRPO_OK)
        err = add_pretok(tok, pre, where);
    if (err == GRPO_OK && !tok->has_bytelevel)
        err = unsupported(where, "pre_tokenizer", "a pipeline without ByteLevel");
    if (err == GRPO_OK)
        err = check_decoder(cJSON_GetObjectItemCaseSensitive(root, "decoder"), where);
    return err;
}

void
grpo_tok__default_specials(grpo_tokenizer *tok)
{
    tok->bos = grpo_tokenizer_token_id(tok, "<｜begin▁of▁sentence｜>");
    tok->eos = grpo_tokenizer_token_id(tok, "<｜end▁of▁sentence｜>");
}

static grpo_err
tok_new(grpo_tokenizer **out, const grpo_tokenizer_opts *opts)
{
    grpo_tokenizer *tok = calloc(1, sizeof *tok);
    if (tok == NULL)
        return grpo__fail(GRPO_ENOMEM, "tokenizer: out of memory");
    grpo_err err = grpo_arena_create(&tok->arena, 1 << 20);
    if (err != GRPO_OK) {
        free(tok);
        return err;
    }
    tok->bos = tok->eos = -1;
    tok->cache_slots = 16384;
    if (opts != NULL && opts->cache_entries != 0)
        tok->cache_slots = opts->cache_entries < 0 ? 0 : opts->cache_entries;
    for (int i = 0; i < TOK_POOL; i++)
        atomic_init(&tok->busy[i], 0);
    *out = tok;
    return GRPO_OK;
}

static grpo_err
finish(grpo_tokenizer *tok, const grpo_tokenizer_opts *opts, const char *beside)
{
    grpo_tok__default_specials(tok);
    if ((tok->bos_text = grpo_arena_strdup(tok->arena, "")) == NULL)
        return grpo__fail(GRPO_ENOMEM, "tokenizer: out of memory");
    if (opts == NULL || !opts->no_config) {
        grpo_err err = GRPO_OK;
        if (opts != NULL && opts->config_path != NULL)
            err = grpo_tok__read_config(tok, opts->config_path, true);
        else if (beside != NULL)
            err = grpo_tok__read_config(tok, beside, false);
        if (err != GRPO_OK)
            return err;
    }
    if (tok->bos >= 0 && tok->bos < tok->n_ids && tok->bos_text[0] == 0) {
        size_t n;
        const char *b = grpo_tokenizer_token_bytes(tok, tok->bos, &n);
        char *s = grpo_arena_alloc(tok->arena, n + 1);
        if (s == NULL)
            return grpo__fail(GRPO_ENOMEM, "tokenizer: out of memory");
        memcpy(s, b, n);
        tok->bos_text = s;
    }
    if (opts != NULL && opts->r1)
        tok->family = GRPO_CHAT_R1;
    return GRPO_OK;
}

grpo_err
grpo_tokenizer_load_json(grpo_tokenizer **out, const char *json, size_t len, const char *where,
                         const grpo_tokenizer_opts *opts)
{
    grpo_tokenizer *tok = NULL;
    cJSON *root = NULL;
    *out = NULL;
    grpo_err err = tok_new(&tok, opts);
    if (err != GRPO_OK)
        return err;
    if ((err = grpo__json_parse(json, len, where, &root)) != GRPO_OK)
        goto done;
    if ((err = read_tokenizer(tok, root, where, opts != NULL && opts->r1)) != GRPO_OK)
        goto done;
    err = finish(tok, opts, NULL);
done:
    cJSON_Delete(root);
    if (err != GRPO_OK) {
        grpo_tokenizer_destroy(tok);
        tok = NULL;
    }
    *out = tok;
    return err;
}

grpo_err
grpo_tokenizer_load(grpo_tokenizer **out, const char *path, const grpo_tokenizer_opts *opts)
{
    grpo_tokenizer *tok = NULL;
    char *text = NULL, *file = NULL, *cfg = NULL;
    size_t n = 0;
    cJSON *root = NULL;
    grpo_err err;
    *out = NULL;
    struct stat st;
    bool is_dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    size_t pl = strlen(path);
    file = malloc(pl + 32);
    cfg = malloc(pl + 40);
    if (file == NULL || cfg == NULL) {
        err = grpo__fail(GRPO_ENOMEM, "tokenizer: out of memory");
        goto done;
    }
    if (is_dir)
        snprintf(file, pl + 32, "%s/tokenizer.json", path);
    else
        snprintf(file, pl + 32, "%s", path);
    const char *slash = strrchr(file, '/');
    size_t dl = slash ? (size_t)(slash - file + 1) : 0;
    snprintf(cfg, pl + 40, "%.*stokenizer_config.json", (int)dl, file);
    if ((err = tok_new(&tok, opts)) != GRPO_OK)
        goto done;
    if ((err = grpo__read_file(file, TOK_MAX_FILE, &text, &n)) != GRPO_OK)
        goto done;
    if ((err = grpo__json_parse(text, n, file, &root)) != GRPO_OK)
        goto done;
    free(text);
    text = NULL;
    if ((err = read_tokenizer(tok, root, file, opts != NULL && opts->r1)) != GRPO_OK)
        goto done;
    err = finish(tok, opts, cfg);
done:
    cJSON_Delete(root);
    free(text);
    free(file);
    free(cfg);
    if (err != GRPO_OK) {
        grpo_tokenizer_destroy(tok);
        tok = NULL;
    }
    *out = tok;
    return err;
}

void
grpo_tokenizer_destroy(grpo_tokenizer *tok)
{
    if (tok == NULL)
        return;
    for (int i = 0; i < TOK_POOL; i++)
        grpo_tok__scratch_free(tok->pool[i]);
    for (int i = 0; i < tok->n_stages; i++)
        pcre2_code_free(tok->stages[i].re);
    grpo_tok__trie_fini(&tok->trie_raw);
    grpo_tok__trie_fini(&tok->trie_norm);
    grpo_tok__strmap_fini(&tok->by_text);
    grpo_tok__strmap_fini(&tok->by_bytes);
    free(tok->merges);
    free(tok->added);
    free(tok->bytes_off);
    free(tok->bytes_len);
    free(tok->idflags);
    free(tok->blob);
    grpo_arena_destroy(tok->arena);
    free(tok);
}

/* ---- accessors ---- */

int32_t
grpo_tokenizer_vocab_size(const grpo_tokenizer *tok)
{
    return tok->n_ids;
}

int32_t
grpo_tokenizer_bos_id(const grpo_tokenizer *tok)
{
    return tok->bos;
}

int32_t
grpo_tokenizer_eos_id(const grpo_tokenizer *tok)
{
    return tok->eos;
}

grpo_chat_family
grpo_tokenizer_chat_family(const grpo_tokenizer *tok)
{
    return tok->family;
}

int32_t
grpo_tokenizer_token_id(const grpo_tokenizer *tok, const char *token)
{
    return grpo_tok__strmap_get(&tok->by_text, token, strlen(token));
}

const char *
grpo_tokenizer_token_bytes(const grpo_tokenizer *tok, int32_t id, size_t *len)
{
    if (id < 0 || id >= tok->n_ids || !(tok->idflags[id] & IDF_USED)) {
        *len = 0;
        return NULL;
    }
    *len = tok->bytes_len[id];
    return tok->blob + tok->bytes_off[id];
}

int
grpo_tokenizer_is_special(const grpo_tokenizer *tok, int32_t id)
{
    return id >= 0 && id < tok->n_ids && (tok->idflags[id] & IDF_SPECIAL) != 0;
}
