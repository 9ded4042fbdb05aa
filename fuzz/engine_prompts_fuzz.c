/* libFuzzer target on the rollout engine's inputs: the prompts JSONL parser (both bad-line modes)
 * and the stop-string matcher (the input split at its first 0x01 into stop strings separated by
 * 0x02 and a text scanned in pieces, as tokens arrive). */
#include "rollout/engine/engine_int.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
fuzz_stops(const char *s, size_t size)
{
    const char *sep = memchr(s, 1, size);
    if (sep == NULL)
        return;
    char *stops_buf = strndup(s, (size_t)(sep - s)), *text = (char *)sep + 1;
    size_t tlen = size - (size_t)(sep - s) - 1;
    const char *stops[GRPO_ROLLOUT_MAX_STOP];
    int n = 0;
    for (char *t = stops_buf; t && n < GRPO_ROLLOUT_MAX_STOP;) {
        char *nx = strchr(t, 2);
        if (nx)
            *nx++ = '\0';
        if (*t)
            stops[n++] = t;
        t = nx;
    }
    size_t end, from = 0;
    for (size_t at = 1; at <= tlen; at += 1 + at % 3) { /* pieces of 1-3 bytes */
        int k = grpo_engine__stop_find(text, at, from, stops, n, &end);
        if (k >= 0 && (end > at || end <= from || memcmp(text + end - strlen(stops[k]), stops[k],
                                                         strlen(stops[k])) != 0))
            abort(); /* a match must end in the new bytes and be the stop string */
        from = at;
    }
    free(stops_buf);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    grpo_prompt_set set;
    for (int skip = 0; skip < 2; skip++)
        if (grpo_prompts_parse(&set, (const char *)data, size, "fuzz.jsonl", skip) == GRPO_OK)
            grpo_prompts_fini(&set);
    fuzz_stops((const char *)data, size);
    return 0;
}
