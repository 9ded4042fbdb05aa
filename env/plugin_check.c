/* What the environment plugin host believes of a plugin: nothing until checked. The table and
 * markers at load, every step's output (observation, label, reward, info) and the worker's step
 * replies are checked here, the same way in process and sandboxed. Pure but for dlopen. */
#include "env/plugin_int.h"
#include "common/json.h"

#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MIN_STRUCT_SIZE (offsetof(grpo_env_api, fini) + sizeof(void (*)(void *)))

static int
name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 63)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* 1 when s[0..n) is printable ASCII (space included). */
static int
printable(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
            return 0;
    return 1;
}

grpo_err
grpo_env__plugin_check_meta(const char *path, const char *name, const char *version,
                            const char *begin, const char *end)
{
    if (name == NULL || !name_ok(name))
        return grpo__fail(GRPO_EFORMAT, "plugin %s: name must be 1 to 63 bytes of [A-Za-z0-9_-]",
                          path);
    if (version == NULL || strlen(version) > 63 || !printable(version, strlen(version)))
        return grpo__fail(GRPO_EFORMAT,
                          "plugin %s: version must be at most 63 printable ASCII bytes", path);
    if (end == NULL || *end == '\0' || strlen(end) > PLUGIN_MARKER_MAX ||
        !grpo__utf8_valid(end, strlen(end)))
        return grpo__fail(GRPO_EFORMAT, "plugin %s: action_end must be 1 to %d bytes of UTF-8",
                          path, PLUGIN_MARKER_MAX);
    if (begin != NULL &&
        (strlen(begin) > PLUGIN_MARKER_MAX || !grpo__utf8_valid(begin, strlen(begin))))
        return grpo__fail(GRPO_EFORMAT, "plugin %s: action_begin must be at most %d bytes of UTF-8",
                          path, PLUGIN_MARKER_MAX);
    return GRPO_OK;
}

grpo_err
grpo_env__plugin_check_table(const grpo_env_api *a, uint32_t struct_size, const char *path)
{
    if (a->abi_major != GRPO_ENV_ABI_MAJOR || a->abi_minor > GRPO_ENV_ABI_MINOR)
        return grpo__fail(GRPO_EVERSION,
                          "plugin %s: environment ABI %u.%u is not supported (this host speaks "
                          "%d.0 to %d.%d)",
                          path, a->abi_major, a->abi_minor, GRPO_ENV_ABI_MAJOR, GRPO_ENV_ABI_MAJOR,
                          GRPO_ENV_ABI_MINOR);
    if (struct_size < MIN_STRUCT_SIZE)
        return grpo__fail(GRPO_EVERSION,
                          "plugin %s: table of %u bytes, smaller than ABI %d.0's %zu", path,
                          struct_size, GRPO_ENV_ABI_MAJOR, (size_t)MIN_STRUCT_SIZE);
    if (a->init == NULL || a->reset == NULL || a->step == NULL || a->close == NULL ||
        a->fini == NULL)
        return grpo__fail(GRPO_EVERSION, "plugin %s: table lacks init, reset, step, close or fini",
                          path);
    return grpo_env__plugin_check_meta(path, a->name, a->version, a->action_begin, a->action_end);
}

grpo_err
grpo_env__plugin_open(const char *path, void **dl, grpo_env_api *api)
{
    grpo_env_entry_fn entry;
    memset(api, 0, sizeof *api);
    *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (*dl == NULL)
        return grpo__fail(GRPO_ENOTFOUND, "plugin %s: dlopen failed: %s", path, dlerror());
    *(void **)&entry = dlsym(*dl, GRPO_ENV_ENTRY);
    if (entry == NULL)
        return grpo__fail(GRPO_EVERSION, "plugin %s: no symbol %s: not a grpo environment plugin",
                          path, GRPO_ENV_ENTRY);
    const grpo_env_api *a = entry();
    if (a == NULL)
        return grpo__fail(GRPO_EVERSION, "plugin %s: %s() returned NULL", path, GRPO_ENV_ENTRY);
    /* the three leading fields exist in every version; read no more than the plugin has */
    uint32_t size = a->struct_size;
    memcpy(api, a, size < sizeof *api ? size : sizeof *api);
    return grpo_env__plugin_check_table(api, size, path);
}

char *
grpo_env__plugin_msg(const char *msg, const char *dflt)
{
    if (msg == NULL || *msg == '\0')
        return strdup(dflt);
    char *s = grpo__utf8_sanitize(msg, strnlen(msg, PLUGIN_MSG_MAX), NULL);
    for (char *c = s; c != NULL && *c; c++)
        if ((unsigned char)*c < 0x20 && *c != '\n' && *c != '\t')
            *c = ' ';
    return s;
}

grpo_err
grpo_env__plugin_failed(grpo_env_result *out, const char *label, const char *why, const char *name,
                        const grpo_sandbox_result *res)
{
    grpo_buf b = {0};
    cJSON *d = cJSON_CreateObject();
    memset(out, 0, sizeof *out);
    grpo_env__label(out, label);
    out->done = 1;
    if (grpo__buf_printf(&b, "[environment error: %s; the episode is over]\n", why) != GRPO_OK ||
        d == NULL) {
        grpo__buf_fini(&b);
        cJSON_Delete(d);
        return grpo__fail(GRPO_ENOMEM, "env plugin: out of memory");
    }
    out->observation = b.data;
    out->observation_len = b.len;
    if (name)
        cJSON_AddStringToObject(d, "plugin", name);
    cJSON_AddStringToObject(d, "error", why);
    if (res) {
        cJSON_AddStringToObject(d, "status", grpo_sandbox_status_name(res->status));
        cJSON_AddNumberToObject(d, "signal", res->signal);
        cJSON_AddNumberToObject(d, "exit_code", res->exit_code);
        cJSON_AddNumberToObject(d, "max_rss_kb", (double)res->max_rss_kb);
    }
    out->info_json = grpo__json_print_utf8(d);
    cJSON_Delete(d);
    return GRPO_OK;
}

/* The plugin's info as a compact JSON object, with the host's note of a cut observation; NULL
 * when there is neither a valid object nor a note. */
static char *
info_clean(const char *info, size_t obs_total)
{
    cJSON *j = NULL;
    size_t n = info ? strnlen(info, PLUGIN_INFO_MAX + 1) : 0;
    if (n > 0 && n <= PLUGIN_INFO_MAX &&
        grpo__json_parse_text(info, n, "env plugin info_json", &j) == GRPO_OK &&
        !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        j = NULL;
    }
    if (obs_total > 0) {
        if (j == NULL)
            j = cJSON_CreateObject();
        cJSON_DeleteItemFromObjectCaseSensitive(j, "observation_truncated");
        cJSON_AddNumberToObject(j, "observation_truncated", (double)obs_total);
    }
    char *s = j ? grpo__json_print(j) : NULL;
    cJSON_Delete(j);
    return s;
}

/* The observation as a NUL-terminated copy, cut at a character boundary at PLUGIN_OBS_MAX;
 * *total gets the plugin's length when it was cut (else 0). NULL with *bad set when it is not
 * UTF-8 text (or holds a NUL); NULL without when out of memory. */
static char *
obs_clean(const char *obs, size_t n, size_t *len, size_t *total, int *bad)
{
    *total = 0;
    *bad = 0;
    if (obs == NULL)
        n = 0;
    if (!grpo__utf8_valid(obs ? obs : "", n) || (n > 0 && memchr(obs, 0, n) != NULL)) {
        *bad = 1;
        return NULL;
    }
    if (n > PLUGIN_OBS_MAX) {
        *total = n;
        n = PLUGIN_OBS_MAX;
        while (n > 0 && ((unsigned char)obs[n] & 0xC0) == 0x80)
            n--; /* obs[n] continues the character before: cut before that one */
    }
    char *s = malloc(n + 1);
    if (s != NULL) {
        if (n > 0)
            memcpy(s, obs, n);
        s[n] = '\0';
    }
    *len = n;
    return s;
}

/* The label if it is NUL-terminated within its 32 bytes and printable; "ok" when empty. */
static const char *
label_clean(const char *label)
{
    const char *nul = memchr(label, 0, 32);
    if (nul == NULL || !printable(label, (size_t)(nul - label)))
        return NULL;
    return nul == label ? "ok" : label;
}

grpo_err
grpo_env__plugin_result(int rc, grpo_env_plugin_step *st, grpo_env_result *out)
{
    grpo_err err = GRPO_OK;
    size_t total = 0;
    int bad_obs = 0;
    memset(out, 0, sizeof *out);
    if (rc != 0) {
        err = grpo_env__plugin_failed(out, "plugin-error", "the environment failed on this action",
                                      NULL, NULL);
        goto done;
    }
    const char *label = label_clean(st->label);
    out->done = st->done != 0;
    out->has_reward =
        st->has_reward != 0 && isfinite(st->reward) && st->reward >= 0 && st->reward <= 1;
    out->reward = out->has_reward ? st->reward : 0;
    if (st->has_reward != 0 && !out->has_reward)
        label = "bad-reward";
    out->observation =
        obs_clean(st->observation, st->observation_len, &out->observation_len, &total, &bad_obs);
    if (bad_obs) {
        const char *m = "[environment error: the observation was not UTF-8 text]\n";
        out->observation = strdup(m);
        out->observation_len = strlen(m);
        label = "bad-observation";
    }
    grpo_env__label(out, label ? label : "bad-label");
    out->info_json = info_clean(st->info_json, total);
    if (out->observation == NULL || (out->info_json == NULL && total > 0))
        err = grpo__fail(GRPO_ENOMEM, "env plugin: out of memory");
done:
    free(st->observation), free(st->info_json);
    st->observation = st->info_json = NULL;
    if (err != GRPO_OK)
        grpo_env_result_fini(out);
    return err;
}

int
grpo_env__plugin_decode_step(const char *p, size_t n, int32_t *rc, grpo_env_plugin_step *st)
{
    grpo_rd r = {p, n, 0, false};
    size_t label_n = 0;
    memset(st, 0, sizeof *st);
    *rc = grpo__get_i32(&r);
    st->observation = grpo__get_str(&r, &st->observation_len);
    st->done = grpo__get_i32(&r);
    st->has_reward = grpo__get_i32(&r);
    st->reward = grpo__get_f64(&r);
    const char *label = grpo__get_bytes(&r, &label_n);
    if (label != NULL && label_n == sizeof st->label)
        memcpy(st->label, label, sizeof st->label);
    else
        r.bad = true;
    st->info_json = grpo__get_str(&r, NULL);
    return (r.bad || grpo__rd_left(&r) != 0) ? -1 : 0;
}
