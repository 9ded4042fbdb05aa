/* libFuzzer: what the environment plugin host makes of a worker's step reply (env/plugin_check.c)
 * on arbitrary bytes: the decoder either refuses the reply or yields a step, and the checks turn
 * any step into a result the model may see: an observation of valid UTF-8 without NULs, at most
 * 64 KiB plus the host's own note; a printable label; has_reward 0 or 1 with a reward in [0, 1];
 * info_json NULL or a JSON object. */
#include "common/json.h"
#include "env/plugin_int.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check(const grpo_env_result *r)
{
    const char *nul = memchr(r->label, 0, sizeof r->label);
    if (r->observation == NULL || r->observation[r->observation_len] != '\0' ||
        strlen(r->observation) != r->observation_len || r->observation_len > PLUGIN_OBS_MAX ||
        !grpo__utf8_valid(r->observation, r->observation_len) || nul == NULL || nul == r->label)
        abort();
    for (const char *c = r->label; c < nul; c++)
        if (*c < 0x20 || *c > 0x7e)
            abort();
    if ((r->has_reward != 0 && r->has_reward != 1) || (r->done != 0 && r->done != 1) ||
        !(r->reward >= 0 && r->reward <= 1))
        abort();
    if (r->info_json != NULL) {
        cJSON *j = cJSON_Parse(r->info_json);
        if (!cJSON_IsObject(j))
            abort();
        cJSON_Delete(j);
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    grpo_env_plugin_step st;
    grpo_env_result r;
    int32_t rc;
    if (grpo_env__plugin_decode_step((const char *)data, size, &rc, &st) != 0) {
        free(st.observation);
        free(st.info_json);
        return 0;
    }
    if (grpo_env__plugin_result(rc, &st, &r) != GRPO_OK)
        return 0;
    check(&r);
    grpo_env_result_fini(&r);
    return 0;
}
