/* libFuzzer: grpo_tokenizer_encode on arbitrary bytes with the DeepSeek-V3 tokenizer.json from
 * data/deepseek-v3-tokenizer/ (GRPO_TOKENIZER overrides). Checks, beyond ASan/UBSan:
 * decode(encode(s)) == s for every input (invalid UTF-8 is encoded as raw bytes), ids in range, and
 * the streaming decoder's output equals the lossy decode and is valid UTF-8. The first input byte
 * selects the flags. */
#include "common/common_int.h"
#include "grpo/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static grpo_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *p = getenv("GRPO_TOKENIZER");
    char def[4096];
    snprintf(def, sizeof def, "%s/data/deepseek-v3-tokenizer/tokenizer.json", GRPO_SOURCE_DIR);
    if (grpo_tokenizer_load(&tok, p ? p : def, NULL) != GRPO_OK) {
        fprintf(stderr, "tokenizer_fuzz: %s\n", grpo_error_last());
        abort();
    }
    return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    unsigned flags = (data[0] & 1) ? GRPO_TOK_PARSE_SPECIAL : 0;
    const char *s = (const char *)data + 1;
    size_t n = size - 1, ni, len;
    int32_t *ids = NULL;
    char *text = NULL, *lossy = NULL;
    if (grpo_tokenizer_encode(tok, s, n, flags, &ids, &ni) != GRPO_OK)
        abort();
    for (size_t i = 0; i < ni; i++)
        if (ids[i] < 0 || ids[i] >= grpo_tokenizer_vocab_size(tok))
            abort();
    if (grpo_tokenizer_decode(tok, ids, ni, 0, &text, &len) != GRPO_OK || len != n ||
        memcmp(text, s, n) != 0)
        abort();
    if (grpo_tokenizer_decode(tok, ids, ni, GRPO_TOK_LOSSY, &lossy, &len) != GRPO_OK ||
        !grpo__utf8_valid(lossy, len))
        abort();
    grpo_detok d;
    grpo_buf acc = {0};
    grpo_detok_init(&d, tok, 0);
    for (size_t i = 0; i < ni; i++) {
        const char *piece;
        size_t pl;
        if (grpo_detok_feed(&d, ids[i], &piece, &pl) != GRPO_OK || !grpo__utf8_valid(piece, pl) ||
            grpo__buf_append(&acc, piece, pl) != GRPO_OK)
            abort();
    }
    const char *tail;
    size_t tl;
    grpo_detok_fini(&d, &tail, &tl);
    grpo__buf_append(&acc, tail, tl);
    if (acc.len != len || (len && memcmp(acc.data, lossy, len) != 0))
        abort();
    grpo__buf_fini(&acc);
    free(ids);
    free(text);
    free(lossy);
    return 0;
}
