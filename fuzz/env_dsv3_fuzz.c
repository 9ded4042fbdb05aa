/* libFuzzer target on the python tool's DeepSeek-V3 tool-call parser (env/dsv3.c): the input,
 * wrapped in the block's markers half of the time, is parsed; every call must come back either
 * with code or with a reason, and the reason must be valid UTF-8 (it goes to the model). */
#include "env/python_int.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    grpo_env__dsv3_call calls[GRPO_ENV_DSV3_MAX_CALLS];
    size_t lb = strlen(GRPO_ENV_DSV3_BEGIN), le = strlen(GRPO_ENV_DSV3_END);
    bool wrap = size > 0 && (data[0] & 1);
    size_t n = wrap ? lb + size + le : size;
    char *t = malloc(n ? n : 1);
    int k = 0;
    if (t == NULL)
        return 0;
    if (wrap) {
        memcpy(t, GRPO_ENV_DSV3_BEGIN, lb);
        memcpy(t + lb, data, size);
        memcpy(t + lb + size, GRPO_ENV_DSV3_END, le);
    } else {
        memcpy(t, data, size);
    }
    if (grpo_env__dsv3_parse(t, n, calls, &k) == GRPO_OK) {
        if (k < 1 || k > GRPO_ENV_DSV3_MAX_CALLS)
            abort();
        for (int i = 0; i < k; i++) {
            if (calls[i].code == NULL &&
                (calls[i].why[0] == '\0' || !grpo__utf8_valid(calls[i].why, strlen(calls[i].why))))
                abort();
            free(calls[i].code);
        }
    }
    free(t);
    return 0;
}
