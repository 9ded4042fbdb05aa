/* libFuzzer: the code verifier's handling of untrusted dataset and model text
 * (verifiers/code): the `tests` field parser (APPS input_output, possibly a JSON string holding
 * JSON), the fenced-block extractor on the completion, and the stdout / JSON comparers on what a
 * parsed test holds. Input: tests JSON, a 0 byte, then the completion (model output). */
#include "verifiers/code/code_int.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t sink;

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *z = memchr(data, 0, size);
    size_t tl = z ? (size_t)(z - data) : size;
    char *json = malloc(tl + 1);
    if (json == NULL)
        return 0;
    memcpy(json, data, tl);
    json[tl] = 0;
    const char *comp = z ? (const char *)z + 1 : "";
    size_t cl = z ? size - tl - 1 : 0;
    for (int lang = CODE_PY; lang <= CODE_CPP; lang++) {
        char *code = grpo_code__extract(comp, cl, (code_lang)lang, size & 1);
        if (code != NULL)
            sink += strlen(code);
        free(code);
    }
    code_tests t;
    if (grpo_code__tests_parse(json, &t) != GRPO_OK) {
        if (grpo_error_last()[0] == 0)
            abort();
        grpo_code__tests_fini(&t);
        free(json);
        return 0;
    }
    for (int i = 0; i < t.n; i++) {
        if (t.call_based) {
            sink += grpo_code__json_equal(t.args[i], t.expected[i], 1e-6);
            sink += grpo_code__json_equal(t.expected[i], t.expected[i], 0);
        } else {
            sink += grpo_code__stdout_match(t.inputs[i], strlen(t.inputs[i]), t.outputs[i], 1e-6);
            sink += grpo_code__stdout_match(comp, cl, t.outputs[i], 0);
        }
    }
    grpo_code__tests_fini(&t);
    free(json);
    return 0;
}
