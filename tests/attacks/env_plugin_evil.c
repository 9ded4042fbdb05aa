/* A hostile environment plugin for tests/env_plugin_test.c. Actions are "<act>MODE</act>"; MODE
 * picks what step() does: "ok", "crash", "hang", "exit", "badutf8", "nul", "huge" (1 MiB, the
 * 64 KiB cut falling inside a character), "nan", "neg", "badlabel", "longlabel", "badinfo",
 * "badjson", "rcfail"; sandboxed only (they write to the worker's control socket, fd 3), "stall"
 * (the length of a reply, then nothing) and "garbage" (a well-framed reply that is not one). A
 * record holding "resetfail" makes reset() fail with a message. Built
 * three ways (tests/env_plugin.cmake): normal, with ABI major 2 (EVIL_ABI_MAJOR) and with a name
 * the host refuses (EVIL_BAD_NAME). */
#include "grpo/env_plugin.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef EVIL_ABI_MAJOR
#define EVIL_ABI_MAJOR GRPO_ENV_ABI_MAJOR
#endif
#ifdef EVIL_BAD_NAME
#define EVIL_NAME "evil plugin!"
#else
#define EVIL_NAME "evil"
#endif

static int
evil_init(const char *config, void **state, char **err)
{
    (void)config;
    (void)err;
    *state = NULL;
    return 0;
}

static int
evil_reset(void *state, const char *record, void **ep, char **err)
{
    (void)state;
    if (record != NULL && strstr(record, "resetfail") != NULL) {
        *err = strdup("evil: this record is refused");
        return 1;
    }
    *ep = calloc(1, sizeof(int));
    return *ep ? 0 : 1;
}

static void
huge(grpo_env_plugin_step *out)
{
    size_t n = 1 + 2 * (512u << 10); /* "a" then U+00E9 (C3 A9) at odd offsets: 1 MiB + 1 */
    char *s = malloc(n);
    if (s == NULL)
        abort();
    s[0] = 'a';
    for (size_t i = 1; i < n; i += 2)
        s[i] = (char)0xC3, s[i + 1] = (char)0xA9;
    out->observation = s;
    out->observation_len = n;
}

static int
evil_step(void *state, void *ep, const char *action, size_t len, grpo_env_plugin_step *out)
{
    char mode[32] = "";
    int *steps = ep;
    (void)state;
    if (len > 11 && len - 11 < sizeof mode)
        memcpy(mode, action + 5, len - 11);
    ++*steps;
    snprintf(out->label, sizeof out->label, "evil-ok");
    out->has_reward = 1;
    out->reward = 0.5;
    if (strcmp(mode, "crash") == 0) {
        volatile int *p = NULL;
        *p = 1;
    } else if (strcmp(mode, "hang") == 0) {
        for (volatile unsigned x = 0;; x++) {
        }
    } else if (strcmp(mode, "exit") == 0) {
        exit(3);
    } else if (strcmp(mode, "stall") == 0) {
        if (write(3, "\x10\0\0\0", 4) != 4)
            abort();
        for (volatile unsigned x = 0;; x++) {
        }
    } else if (strcmp(mode, "garbage") == 0) {
        if (write(3, "\x05\0\0\0hello", 9) != 9)
            abort();
    } else if (strcmp(mode, "rcfail") == 0) {
        return 1;
    } else if (strcmp(mode, "huge") == 0) {
        huge(out);
        return 0;
    } else if (strcmp(mode, "badutf8") == 0) {
        out->observation = strdup("caf\xc3 \xff\xfe");
    } else if (strcmp(mode, "nul") == 0) {
        out->observation = malloc(3);
        memcpy(out->observation, "a\0b", 3);
        out->observation_len = 3;
        return 0;
    } else if (strcmp(mode, "nan") == 0) {
        out->reward = NAN;
    } else if (strcmp(mode, "neg") == 0) {
        out->reward = -0.5;
    } else if (strcmp(mode, "badlabel") == 0) {
        snprintf(out->label, sizeof out->label, "bad\x01label");
    } else if (strcmp(mode, "longlabel") == 0) {
        memset(out->label, 'x', sizeof out->label);
    } else if (strcmp(mode, "badinfo") == 0) {
        out->info_json = strdup("[1, 2]");
    } else if (strcmp(mode, "badjson") == 0) {
        out->info_json = strdup("{\"a\": ");
    } else {
        char info[32];
        snprintf(info, sizeof info, "{\"steps\": %d}", *steps);
        out->info_json = strdup(info);
    }
    if (out->observation == NULL) {
        char obs[48];
        snprintf(obs, sizeof obs, "[%s %d]\n", mode, *steps);
        out->observation = strdup(obs);
    }
    out->observation_len = strlen(out->observation);
    return 0;
}

static void
evil_close(void *state, void *ep)
{
    (void)state;
    free(ep);
}

static void
evil_fini(void *state)
{
    (void)state;
}

static const grpo_env_api evil_api = {
    EVIL_ABI_MAJOR, GRPO_ENV_ABI_MINOR, sizeof(grpo_env_api), EVIL_NAME, "0.1",      "<act>",
    "</act>",       evil_init,          evil_reset,           evil_step, evil_close, evil_fini,
};

#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
const grpo_env_api *
grpo_env_entry(void)
{
    return &evil_api;
}
