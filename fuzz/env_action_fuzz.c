/* libFuzzer target on grpo_env_find_action. The first 4 bytes pick scan_from and new_from; the
 * rest is the text, copied to a buffer of exactly its size so ASan sees any read past it. The
 * scan runs over the python tool's markers and over short ones (which match often), and each
 * action found is checked against the contract. */
#include "grpo/env.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check(const grpo_env_marker *m, int n, const char *t, size_t len, size_t sf, size_t nf)
{
    size_t b = 0, e = 0;
    int k = grpo_env_find_action(m, n, t, len, sf, nf, &b, &e);
    if (k < 0)
        return;
    const char *beg = m[k].begin, *end = m[k].end;
    size_t lb = beg ? strlen(beg) : 0, le = strlen(end);
    if (k >= n || b < sf || e > len || e <= nf || e < b + lb + le ||
        memcmp(t + b, beg ? beg : "", lb) != 0 || memcmp(t + e - le, end, le) != 0)
        abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const grpo_env_marker py[] = {{GRPO_ENV_FENCE_BEGIN, GRPO_ENV_FENCE_END},
                                         {GRPO_ENV_DSV3_BEGIN, GRPO_ENV_DSV3_END}};
    static const grpo_env_marker tiny[] = {{"<a>", "</a>"}, {"", "``"}, {"aa", "a"}};
    if (size < 4)
        return 0;
    size_t len = size - 4;
    size_t sf = len ? ((size_t)data[0] << 8 | data[1]) % (len + 1) : 0;
    size_t nf = len ? ((size_t)data[2] << 8 | data[3]) % (len + 1) : 0;
    char *t = malloc(len ? len : 1);
    if (t == NULL)
        return 0;
    memcpy(t, data + 4, len);
    check(py, 2, t, len, sf, nf);
    check(tiny, 3, t, len, sf, nf);
    free(t);
    return 0;
}
