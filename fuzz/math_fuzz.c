/* libFuzzer target on the math verifier: extraction, parsing and comparison. The input is split at
 * the first 0x01 byte into a gold answer and a completion (no 0x01: the input is both), and graded
 * under a small step budget, so a slow input shows up as a timeout verdict, never as a hang. */
#include "verifiers/math/math_int.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    const char *sep = memchr(s, 1, size);
    size_t glen = sep ? (size_t)(sep - s) : size;
    const char *pred = sep ? sep + 1 : s;
    size_t plen = sep ? size - glen - 1 : size;
    mgrade_opts o;
    mgrade_opts_default(&o);
    o.max_steps = 200000;
    o.timeout_s = 5;
    o.pred_x.last_number = size & 1;
    mverdict v = mgrade(s, glen, pred, plen, &o, NULL, 0);
    return v > MV_ERROR; /* always 0; keeps v used */
}
