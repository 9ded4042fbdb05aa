/* Stop strings matched on the decoded bytes of a completion, across token boundaries: each new
 * token's bytes are appended and only matches ending in the new bytes are looked for, so a stop
 * string split over several tokens is found at the token that completes it. */
#include "rollout/engine/engine_int.h"

#include <string.h>

int
grpo_engine__stop_find(const char *text, size_t len, size_t new_from, const char *const *stops,
                       int n_stops, size_t *end)
{
    for (size_t e = new_from + 1; e <= len; e++) {
        for (int i = 0; i < n_stops; i++) {
            size_t l = strlen(stops[i]);
            if (l == 0 || l > e)
                continue;
            if (memcmp(text + e - l, stops[i], l) == 0) {
                *end = e;
                return i;
            }
        }
    }
    return -1;
}
