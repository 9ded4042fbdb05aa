/* libFuzzer: grpo_tokenizer_load_json on arbitrary text. A file that loads must encode and
 * encode and decode a fixed sample without crashing; one that does not must leave *out NULL with a
 * message. Seeds: tests/data/tokenizer/malformed/ and tests/data/tokenizer/small/. */
#include "common/common_int.h"
#include "grpo/tokenizer.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    grpo_tokenizer *tok = (grpo_tokenizer *)&tok;
    grpo_tokenizer_opts o = {0};
    o.cache_entries = 64;
    if (grpo_tokenizer_load_json(&tok, (const char *)data, size, "fuzz", &o) != GRPO_OK) {
        if (tok != NULL || grpo_error_last()[0] == 0)
            abort();
        return 0;
    }
    static const char sample[] = "Hello, world! 123 <｜User｜> \xe4\xbd\xa0\xe5\xa5\xbd \xff";
    int32_t *ids = NULL;
    size_t n = 0, len = 0;
    char *text = NULL;
    /* a fuzzed regex may hit PCRE2's match limit: an error with a message, not a crash */
    if (grpo_tokenizer_encode(tok, sample, sizeof sample - 1, GRPO_TOK_PARSE_SPECIAL, &ids, &n) !=
        GRPO_OK) {
        if (grpo_error_last()[0] == 0)
            abort();
    } else if (grpo_tokenizer_decode(tok, ids, n, 0, &text, &len) != GRPO_OK) {
        abort();
    }
    free(ids);
    free(text);
    grpo_tokenizer_destroy(tok);
    return 0;
}
