/* grpo/tokenizer.h: byte-level BPE tokenizer read from a Hugging Face tokenizer.json, identical in
 * output to HF `tokenizers`, plus the DeepSeek-V3 and DeepSeek-R1 chat templates in native C.
 *
 * Thread safety: once loaded, a tokenizer may be used from any number of threads at once (each
 * encode borrows one of a pool of scratch spaces, with its own piece cache). */
#ifndef GRPO_TOKENIZER_H
#define GRPO_TOKENIZER_H

#include "grpo/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct grpo_tokenizer grpo_tokenizer;

/* Chat template families implemented natively. */
typedef enum grpo_chat_family {
    GRPO_CHAT_NONE = 0, /* no known template (generic tokenizer) */
    GRPO_CHAT_V3 = 1,   /* DeepSeek-V3: generation prompt "<｜Assistant｜>" */
    GRPO_CHAT_R1 = 2,   /* DeepSeek-R1: drops old reasoning; prompt "<｜Assistant｜><think>\n" */
    GRPO_CHAT_QWEN25 = 3,         /* Qwen2.5 Instruct: ChatML with its default system prompt */
    GRPO_CHAT_QWEN3 = 4,          /* Qwen3, thinking on (enable_thinking unset or true) */
    GRPO_CHAT_QWEN3_NO_THINK = 5, /* Qwen3 with enable_thinking=false: an empty think block */
    GRPO_CHAT_LLAMA3 = 6,         /* Meta-Llama-3 Instruct (3.0) */
    GRPO_CHAT_LLAMA31 = 7,        /* Llama 3.1 / 3.3 Instruct (no tools, date "26 Jul 2024") */
    GRPO_CHAT_R1_DISTILL = 8      /* DeepSeek-R1-Distill-Qwen/-Llama: prompt "...<think>\n" */
} grpo_chat_family;

/* Ids DeepSeek-R1 gives to <think> and </think> (placeholder tokens in the V3 file). */
#define GRPO_TOKENIZER_R1_THINK_ID 128798
#define GRPO_TOKENIZER_R1_THINK_END_ID 128799

typedef struct grpo_tokenizer_opts {
    /* Nonzero: load as DeepSeek-R1 — the placeholder added tokens 128798/128799 become
     * "<think>"/"</think>" (non-special, as R1 checkpoints ship them; a file that already has a
     * "<think>" token is left as is; any other file fails with GRPO_EINVAL) and the default chat
     * family is GRPO_CHAT_R1. */
    int r1;
    /* tokenizer_config.json to read bos/eos tokens and the chat family from. NULL: the file of that
     * name beside the tokenizer.json, when it exists. */
    const char *config_path;
    /* Nonzero: do not read any tokenizer_config.json. */
    int no_config;
    /* Entries in the cache of BPE results per pre-token; 0 = default (16384), -1 = no cache. */
    int cache_entries;
} grpo_tokenizer_opts;

/* Loads a byte-level BPE tokenizer. `path` is a tokenizer.json or a directory holding one.
 * Supported: model BPE (vocab; merges as "a b" strings or [a, b] pairs; ignore_merges; no
 * dropout, subword prefix/suffix), added tokens (special or not, lstrip, rstrip, normalized),
 * normalizer null, NFC (through ICU) or a Sequence of those, pre-tokenizer ByteLevel (GPT-2 regex
 * when use_regex, add_prefix_space) or a Sequence of Split(Regex|String, Isolated|Removed, invert)
 * then ByteLevel, decoder ByteLevel. Anything else (single_word tokens, other normalizers,
 * pre-tokenizers or decoders) is refused with GRPO_EUNSUPPORTED naming the field; malformed files
 * give GRPO_EFORMAT. opts may be NULL (defaults). On success the caller owns *out (free with
 * grpo_tokenizer_destroy).
 */
grpo_err grpo_tokenizer_load(grpo_tokenizer **out, const char *path,
                             const grpo_tokenizer_opts *opts);
/* Same from a tokenizer.json held in memory; `where` names it in messages. opts->config_path is
 * honoured; no file beside it is looked for. */
grpo_err grpo_tokenizer_load_json(grpo_tokenizer **out, const char *json, size_t len,
                                  const char *where, const grpo_tokenizer_opts *opts);
void grpo_tokenizer_destroy(grpo_tokenizer *tok);

/* One past the largest id the tokenizer knows (vocab and added tokens). The model's embedding may
 * be larger (DeepSeek-V3: 128815 here vs 129280 rows); ids from here on decode to nothing. */
int32_t grpo_tokenizer_vocab_size(const grpo_tokenizer *tok);
/* Begin/end-of-sentence ids: from tokenizer_config.json when read, else the added tokens
 * "<｜begin▁of▁sentence｜>"/"<｜end▁of▁sentence｜>" when present, else -1. */
int32_t grpo_tokenizer_bos_id(const grpo_tokenizer *tok);
int32_t grpo_tokenizer_eos_id(const grpo_tokenizer *tok);
/* The chat family of tokenizer_config.json's chat_template: the Qwen, Llama 3 and R1-Distill
 * templates by the sha256 of their text (trailing whitespace aside); otherwise R1 when loaded with
 * opts.r1 or when a DeepSeek template has <think>, V3 for DeepSeek-V3's; else GRPO_CHAT_NONE (no
 * template, or one not implemented: rendering with the tokenizer's own family then fails naming
 * the file). */
grpo_chat_family grpo_tokenizer_chat_family(const grpo_tokenizer *tok);

/* Id of a token given by its content: an added token's content ("<｜end▁of▁sentence｜>", "<think>")
 * or a vocabulary entry as written in tokenizer.json ("Ġthe"). -1 if none. */
int32_t grpo_tokenizer_token_id(const grpo_tokenizer *tok, const char *token);
/* The bytes a token decodes to (not NUL-terminated), borrowed from the tokenizer; NULL with
 * *len = 0 for an id outside [0, vocab_size) or unused. */
const char *grpo_tokenizer_token_bytes(const grpo_tokenizer *tok, int32_t id, size_t *len);
/* Nonzero when id is an added token marked special. */
int grpo_tokenizer_is_special(const grpo_tokenizer *tok, int32_t id);

/* Encode flags. GRPO_TOK_PARSE_SPECIAL: recognise the text of special added tokens (non-special
 * added tokens are always recognised, as in HF); without it special-token text is plain text
 * (HF's encode_special_tokens=True). GRPO_TOK_ADD_BOS: prepend the BOS id, when there is one. */
#define GRPO_TOK_PARSE_SPECIAL 1u
#define GRPO_TOK_ADD_BOS 2u

/* Encodes text[0..len) (any bytes; invalid UTF-8 is encoded as its raw bytes) exactly as HF
 * `tokenizers` Tokenizer.encode(text, add_special_tokens=False) does. On success *ids is a heap
 * array of *n ids the caller frees with free() (non-NULL even when *n == 0). */
grpo_err grpo_tokenizer_encode(const grpo_tokenizer *tok, const char *text, size_t len,
                               unsigned flags, int32_t **ids, size_t *n);

/* Decode flags. GRPO_TOK_SKIP_SPECIAL: leave out special added tokens. GRPO_TOK_LOSSY: replace
 * invalid UTF-8 by U+FFFD, as HF decode does. */
#define GRPO_TOK_SKIP_SPECIAL 1u
#define GRPO_TOK_LOSSY 2u

/* Decodes ids to bytes: the concatenation of each token's bytes (raw bytes unless
 * GRPO_TOK_LOSSY). Ids the tokenizer does not know (>= vocab_size, or unused) decode to nothing,
 * as in HF (the model's embedding may have more rows than the tokenizer has ids); ids < 0 fail with
 * GRPO_EINVAL. *text is NUL-terminated, *len excludes the NUL; the caller frees it with free(). */
grpo_err grpo_tokenizer_decode(const grpo_tokenizer *tok, const int32_t *ids, size_t n,
                               unsigned flags, char **text, size_t *len);

/* Incremental decoder for streaming and stop strings: feed ids one at a time; each call yields
 * only whole UTF-8 characters, holding back an incomplete tail until the next token completes it.
 * Bytes that can never form a character come out as U+FFFD, so the concatenation of everything
 * yielded (feeds then fini) equals grpo_tokenizer_decode(..., GRPO_TOK_LOSSY). Fields are private.
 */
typedef struct grpo_detok {
    const grpo_tokenizer *tok;
    unsigned flags;        /* GRPO_TOK_SKIP_SPECIAL honoured */
    unsigned char pend[4]; /* incomplete UTF-8 tail */
    size_t npend;
    char *buf;
    size_t cap;
} grpo_detok;
void grpo_detok_init(grpo_detok *d, const grpo_tokenizer *tok, unsigned flags);
/* Appends token id. *text and *len receive the newly completed text (possibly empty), valid until
 * the next call on d. Unknown ids yield nothing; a negative id fails with GRPO_EINVAL. */
grpo_err grpo_detok_feed(grpo_detok *d, int32_t id, const char **text, size_t *len);
/* Flushes a held-back incomplete tail (as U+FFFD) into *text and *len and frees d's buffer; d may
 * be reused after grpo_detok_init. text/len may be NULL to discard. Accepts NULL d. */
void grpo_detok_fini(grpo_detok *d, const char **text, size_t *len);

/* ---- Chat templates ---- */

typedef struct grpo_chat_tool_call {
    const char *type;      /* e.g. "function" */
    const char *name;      /* function name */
    const char *arguments; /* JSON text, inserted verbatim */
} grpo_chat_tool_call;

typedef struct grpo_chat_message {
    const char *role;    /* "system", "user", "assistant" or "tool"; others (or NULL) are skipped */
    const char *content; /* NULL for JSON null (an assistant turn made of tool calls) */
    const grpo_chat_tool_call *tool_calls; /* NULL: no "tool_calls" key */
    size_t n_tool_calls;
} grpo_chat_message;

/* Marker values for what Jinja tells apart from null: content == grpo_chat_content_absent (an empty
 * string) means the message has no "content" key; tool_calls == grpo_chat_tool_calls_null (with
 * n_tool_calls 0) means "tool_calls": null. grpo_chat_parse_json sets them. */
extern const char grpo_chat_content_absent[1];
extern const grpo_chat_tool_call grpo_chat_tool_calls_null[1];

/* Renders a conversation exactly as the family's Jinja chat_template does (the template of the
 * DeepSeek-V3 tokenizer_config.json, or DeepSeek-R1's): the BOS token text first, all system
 * prompts (wherever they are) joined by a blank line, "<｜User｜>"/"<｜Assistant｜>" turns,
 * "<｜end▁of▁sentence｜>" after assistant turns, tool calls/outputs; R1 keeps only the text after
 * the last "</think>" of assistant turns. add_generation_prompt appends "<｜Assistant｜>" (V3) or
 * "<｜Assistant｜><think>\n" (R1). family GRPO_CHAT_NONE means the tokenizer's own family.
 * Messages with other roles are skipped, as the templates do. Fails with GRPO_EINVAL where the
 * template fails: null or missing content where it concatenates the content, null tool_calls where
 * it iterates them, a tool call without type, name or arguments; and on an empty conversation (as
 * transformers' apply_chat_template does). *text is NUL-terminated; the caller frees it. */
grpo_err grpo_chat_render(const grpo_tokenizer *tok, grpo_chat_family family,
                          const grpo_chat_message *msgs, size_t n, int add_generation_prompt,
                          char **text, size_t *len);
/* Renders, then encodes with GRPO_TOK_PARSE_SPECIAL (BOS comes from the template, never twice),
 * matching HF apply_chat_template(tokenize=True). The caller frees *ids. */
grpo_err grpo_chat_encode(const grpo_tokenizer *tok, grpo_chat_family family,
                          const grpo_chat_message *msgs, size_t n, int add_generation_prompt,
                          int32_t **ids, size_t *n_ids);

/* A conversation parsed from JSON: an array of {"role": ..., "content": ..., "tool_calls":
 * [{"type": ..., "function": {"name": ..., "arguments": ...}}]} objects, or an object with such an
 * array under "messages". Content must be a string or null, tool_calls an array or null; a missing
 * or non-string role makes a message the templates skip; a tool call's type, name or arguments
 * (JSON text) that is not a string (an object as arguments too) is left NULL, so rendering fails
 * where the template reads it. `where` names the source in messages. */
typedef struct grpo_chat {
    grpo_chat_message *msgs;
    size_t n;
    void *priv_; /* owned storage */
} grpo_chat;
grpo_err grpo_chat_parse_json(grpo_chat *out, const char *json, size_t len, const char *where);
void grpo_chat_fini(grpo_chat *c);

/* "v3", "r1", "qwen2.5", "qwen3", "qwen3-nothink", "llama3", "llama3.1", "r1-distill" (or
 * "none") to a family; -1 for anything else. grpo_chat_family_name is the inverse. */
int grpo_chat_family_parse(const char *name);
const char *grpo_chat_family_name(grpo_chat_family family);

#ifdef __cplusplus
}
#endif
#endif
