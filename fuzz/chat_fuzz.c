/* libFuzzer: `grpo tokenize --messages` and prompts' "messages": grpo_chat_parse_json on arbitrary
 * bytes, then the R1 and V3 templates rendered and encoded with the real DeepSeek-V3 tokenizer
 * (data/deepseek-v3-tokenizer/, or $GRPO_TOKENIZER). A conversation that parses must render to
 * valid UTF-8 that starts with the BOS text, or fail with a message; encoding the rendering must
 * not fail. */
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
        fprintf(stderr, "chat_fuzz: %s\n", grpo_error_last());
        abort();
    }
    return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    grpo_chat chat;
    if (grpo_chat_parse_json(&chat, (const char *)data, size, "fuzz") != GRPO_OK) {
        if (grpo_error_last()[0] == 0 || chat.msgs != NULL || chat.priv_ != NULL)
            abort();
        return 0;
    }
    for (int fam = GRPO_CHAT_V3; fam <= GRPO_CHAT_R1_DISTILL; fam++) {
        char *text = NULL;
        size_t len = 0;
        if (grpo_chat_render(tok, (grpo_chat_family)fam, chat.msgs, chat.n, (int)(size & 1), &text,
                             &len) != GRPO_OK) {
            if (grpo_error_last()[0] == 0)
                abort();
            continue;
        }
        if (strlen(text) != len || !grpo__utf8_valid(text, len))
            abort();
        free(text);
        int32_t *ids = NULL;
        size_t n = 0;
        if (grpo_chat_encode(tok, (grpo_chat_family)fam, chat.msgs, chat.n, 1, &ids, &n) != GRPO_OK)
            abort();
        free(ids);
    }
    grpo_chat_fini(&chat);
    return 0;
}
