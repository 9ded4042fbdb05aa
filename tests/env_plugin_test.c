/* The environment plugin host (env/plugin*.c): the example guess plugin plays the same game in
 * process and in its sandboxed worker; bad ABIs and names are refused at load with a clear
 * message; a plugin that crashes or hangs in a step costs that episode ("plugin-crash",
 * "plugin-timeout", done) and the next episode works; what a plugin returns is checked (UTF-8,
 * size, label, reward, info) the same way in both modes; episodes from 4 threads at once. */
#include "grpo/env.h"

#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

static const char *guess, *evil, *badabi, *badname, *other;

static grpo_env *
load(const char *path, const char *config, int in_process)
{
    grpo_env *e = NULL;
    grpo_err err = grpo_env_plugin_load(&e, path, config, in_process);
    if (err != GRPO_OK)
        fprintf(stderr, "load %s: %s\n", path, grpo_error_last());
    assert_int_equal(err, GRPO_OK);
    return e;
}

static grpo_env_result
step(grpo_env_episode *ep, const char *action)
{
    grpo_env_result r;
    assert_int_equal(grpo_env_step(ep, 0, action, strlen(action), &r), GRPO_OK);
    assert_non_null(r.observation);
    assert_int_equal(strlen(r.observation), r.observation_len);
    return r;
}

static void
same(const grpo_env_result *a, const grpo_env_result *b)
{
    assert_int_equal(a->observation_len, b->observation_len);
    assert_memory_equal(a->observation, b->observation, a->observation_len);
    assert_string_equal(a->label, b->label);
    assert_int_equal(a->done, b->done);
    assert_int_equal(a->has_reward, b->has_reward);
    assert_true(a->reward == b->reward);
    assert_true((a->info_json == NULL) == (b->info_json == NULL));
    if (a->info_json)
        assert_string_equal(a->info_json, b->info_json);
}

/* The secret the guess plugin derives for a record without "answer" (its documented rule). */
static long
derived_secret(const char *record, long max)
{
    uint32_t h = 2166136261u;
    for (const char *c = record; *c; c++)
        h = (h ^ (unsigned char)*c) * 16777619u;
    return 1 + (long)(h % (uint32_t)max);
}

static void
t_guess_same_both_ways(void **state)
{
    (void)state;
    const char *cfg = "{\"max_guesses\": 5}";
    grpo_env *e[2] = {load(guess, cfg, 1), load(guess, cfg, 0)};
    const char *rec = "{\"prompt\": \"guess\", \"answer\": 37}";
    const char *acts[] = {"<guess>50</guess>", "<guess>x</guess>", "<guess>25</guess>",
                          "<guess> 37 </guess>"};
    const char *want[] = {"\n<result>lower</result>\n", "\n<result>not a number</result>\n",
                          "\n<result>higher</result>\n", "\n<result>correct</result>\n"};
    grpo_env_result r[2][4];
    for (int m = 0; m < 2; m++) {
        const grpo_env_marker *mk;
        assert_string_equal(grpo_env_name(e[m]), "guess");
        assert_int_equal(grpo_env_markers(e[m], &mk), 1);
        assert_string_equal(mk[0].begin, "<guess>");
        assert_string_equal(mk[0].end, "</guess>");
        grpo_env_episode *ep;
        assert_int_equal(grpo_env_reset(e[m], rec, &ep), GRPO_OK);
        for (int i = 0; i < 4; i++) {
            r[m][i] = step(ep, acts[i]);
            assert_string_equal(r[m][i].observation, want[i]);
            assert_string_equal(r[m][i].label, i == 1 ? "bad-action" : "ok");
            assert_int_equal(r[m][i].done, i == 3);
        }
        assert_int_equal(r[m][3].has_reward, 1);
        assert_true(r[m][3].reward == 1.0);
        assert_string_equal(r[m][3].info_json, "{\"guesses\":4}");
        grpo_env_episode_close(ep);
    }
    for (int i = 0; i < 4; i++) {
        same(&r[0][i], &r[1][i]);
        grpo_env_result_fini(&r[0][i]), grpo_env_result_fini(&r[1][i]);
    }
    /* no "answer": the secret is derived from the record; five misses end it with reward 0 */
    const char *plain = "{\"prompt\": \"no answer here\"}";
    long secret = derived_secret(plain, 100);
    char act[64];
    for (int m = 0; m < 2; m++) {
        grpo_env_episode *ep;
        assert_int_equal(grpo_env_reset(e[m], plain, &ep), GRPO_OK);
        for (int i = 0; i < 5; i++) {
            snprintf(act, sizeof act, "<guess>%ld</guess>", secret == 1 ? 2L : 1L);
            grpo_env_result x = step(ep, act);
            assert_string_equal(x.observation, secret == 1 ? "\n<result>lower</result>\n"
                                                           : "\n<result>higher</result>\n");
            assert_int_equal(x.done, i == 4);
            assert_int_equal(x.has_reward, i == 4);
            assert_true(x.reward == 0.0);
            grpo_env_result_fini(&x);
        }
        grpo_env_episode_close(ep);
        assert_int_equal(grpo_env_reset(e[m], plain, &ep), GRPO_OK);
        snprintf(act, sizeof act, "<guess>%ld</guess>", secret);
        grpo_env_result x = step(ep, act);
        assert_string_equal(x.observation, "\n<result>correct</result>\n");
        assert_true(x.done && x.has_reward && x.reward == 1.0);
        grpo_env_result_fini(&x);
        grpo_env_episode_close(ep);
        grpo_env_destroy(e[m]);
    }
}

static void
t_refused(void **state)
{
    (void)state;
    grpo_env *e = NULL;
    for (int in = 0; in <= 1; in++) {
        assert_int_equal(grpo_env_plugin_load(&e, badabi, NULL, in), GRPO_EVERSION);
        assert_null(e);
        fprintf(stderr, "  bad ABI (in_process %d): %s\n", in, grpo_error_last());
        assert_non_null(strstr(grpo_error_last(), "environment ABI 2.0 is not supported"));
        assert_non_null(strstr(grpo_error_last(), "libtest_env_plugin_badabi")); /* host's path */
        assert_int_equal(grpo_env_plugin_load(&e, badname, NULL, in), GRPO_EFORMAT);
        assert_non_null(strstr(grpo_error_last(), "name must be 1 to 63 bytes of [A-Za-z0-9_-]"));
        assert_int_equal(grpo_env_plugin_load(&e, other, NULL, in), GRPO_EVERSION);
        assert_non_null(strstr(grpo_error_last(), "no symbol grpo_env_entry"));
        assert_int_not_equal(grpo_env_plugin_load(&e, "/nonexistent/env.so", NULL, in), GRPO_OK);
        assert_null(e);
        /* the plugin's own init failure, with its message */
        assert_int_equal(grpo_env_plugin_load(&e, guess, "{\"max\": -3}", in), GRPO_EINVAL);
        assert_non_null(strstr(grpo_error_last(), "max_guesses and max must be positive"));
    }
}

/* One step of a fresh episode of e that must answer "[ok 1]". */
static void
works(grpo_env *e)
{
    grpo_env_episode *ep;
    assert_int_equal(grpo_env_reset(e, "{}", &ep), GRPO_OK);
    grpo_env_result r = step(ep, "<act>ok</act>");
    assert_string_equal(r.observation, "[ok 1]\n");
    assert_string_equal(r.label, "evil-ok");
    assert_string_equal(r.info_json, "{\"steps\":1}");
    grpo_env_result_fini(&r);
    grpo_env_episode_close(ep);
}

/* A step of mode on a fresh episode while a second episode is open: the step answers label with
 * done; the other episode (of the dead worker) answers "plugin-crash"; a new episode works. */
static void
contained(grpo_env *e, const char *mode, const char *label)
{
    grpo_env_episode *a, *b;
    char act[64];
    assert_int_equal(grpo_env_reset(e, "{}", &a), GRPO_OK);
    assert_int_equal(grpo_env_reset(e, "{}", &b), GRPO_OK);
    snprintf(act, sizeof act, "<act>%s</act>", mode);
    grpo_env_result r = step(a, act);
    fprintf(stderr, "  %-6s -> %s %.1f ms %s", mode, r.label, r.wall_ms, r.observation);
    assert_string_equal(r.label, label);
    assert_int_equal(r.done, 1);
    assert_int_equal(r.has_reward, 0);
    assert_non_null(strstr(r.observation, "[environment error: the environment "));
    assert_non_null(strstr(r.info_json, "\"plugin\":\"evil\""));
    if (strcmp(label, "plugin-timeout") == 0)
        assert_true(r.wall_ms >= 200.0); /* not before the deadline (300 ms) */
    grpo_env_result_fini(&r);
    r = step(b, "<act>ok</act>");
    assert_string_equal(r.label, "plugin-crash");
    assert_int_equal(r.done, 1);
    grpo_env_result_fini(&r);
    grpo_env_episode_close(a);
    grpo_env_episode_close(b);
    works(e);
}

static void
t_crash_hang(void **state)
{
    (void)state;
    setenv("GRPO_PLUGIN_TIMEOUT_MS", "300", 1);
    grpo_env *e = load(evil, NULL, 0);
    unsetenv("GRPO_PLUGIN_TIMEOUT_MS");
    works(e);
    contained(e, "crash", "plugin-crash");
    contained(e, "hang", "plugin-timeout");
    contained(e, "exit", "plugin-crash");
    contained(e, "stall", "plugin-timeout"); /* the deadline covers the whole reply */
    contained(e, "garbage", "plugin-error"); /* a malformed reply: the worker is stopped */
    grpo_env_destroy(e);
}

/* One step of mode on a fresh episode of e; the caller finis the result. */
static grpo_env_result
one(grpo_env *e, const char *record, const char *mode)
{
    grpo_env_episode *ep;
    char act[64];
    assert_int_equal(grpo_env_reset(e, record, &ep), GRPO_OK);
    snprintf(act, sizeof act, "<act>%s</act>", mode);
    grpo_env_result r = step(ep, act);
    grpo_env_episode_close(ep);
    return r;
}

static void
check_bad(const char *mode, const grpo_env_result *r)
{
    static const struct {
        const char *mode, *label;
        int has_reward;
    } want[] = {{"badutf8", "bad-observation", 1},
                {"nul", "bad-observation", 1},
                {"huge", "evil-ok", 1},
                {"nan", "bad-reward", 0},
                {"neg", "bad-reward", 0},
                {"badlabel", "bad-label", 1},
                {"longlabel", "bad-label", 1},
                {"badinfo", "evil-ok", 1},
                {"badjson", "evil-ok", 1},
                {"rcfail", "plugin-error", 0}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        if (strcmp(want[i].mode, mode) != 0)
            continue;
        assert_string_equal(r->label, want[i].label);
        assert_int_equal(r->has_reward, want[i].has_reward);
        assert_true(r->reward == (want[i].has_reward ? 0.5 : 0.0));
        return;
    }
    fail_msg("no expectation for %s", mode);
}

static void
t_bad_outputs(void **state)
{
    (void)state;
    const char *modes[] = {"badutf8",  "nul",       "huge",    "nan",     "neg",
                           "badlabel", "longlabel", "badinfo", "badjson", "rcfail"};
    grpo_env *e[2] = {load(evil, NULL, 1), load(evil, NULL, 0)};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        grpo_env_result r[2];
        for (int m = 0; m < 2; m++) {
            r[m] = one(e[m], "{}", modes[i]);
            check_bad(modes[i], &r[m]);
        }
        fprintf(stderr, "  %-9s -> %s %zu bytes info %s\n", modes[i], r[1].label,
                r[1].observation_len, r[1].info_json ? r[1].info_json : "(none)");
        same(&r[0], &r[1]);
        if (strcmp(modes[i], "huge") == 0) { /* cut before the character across 64 KiB */
            assert_int_equal(r[0].observation_len, 65535);
            assert_string_equal(r[0].info_json, "{\"observation_truncated\":1048577}");
            assert_int_equal(r[0].done, 0);
        } else if (strcmp(modes[i], "badutf8") == 0 || strcmp(modes[i], "nul") == 0) {
            assert_non_null(strstr(r[0].observation, "not UTF-8 text"));
        }
        if (strcmp(modes[i], "badinfo") == 0 || strcmp(modes[i], "badjson") == 0)
            assert_null(r[0].info_json);
        if (strcmp(modes[i], "rcfail") == 0)
            assert_int_equal(r[0].done, 1);
        grpo_env_result_fini(&r[0]), grpo_env_result_fini(&r[1]);
    }
    /* a reset failure still gives an episode: its first step answers the plugin's message */
    for (int m = 0; m < 2; m++) {
        grpo_env_result r = one(e[m], "{\"resetfail\": 1}", "ok");
        assert_string_equal(r.label, "plugin-error");
        assert_int_equal(r.done, 1);
        assert_string_equal(r.observation,
                            "[environment error: evil: this record is refused; the episode is "
                            "over]\n");
        grpo_env_result_fini(&r);
        works(e[m]);
        grpo_env_destroy(e[m]);
    }
}

typedef struct playing {
    grpo_env *e;
    int idx;
} playing;

/* 8 games per thread, played by bisection: each must end correct within 7 guesses. */
static void *
player(void *arg)
{
    const playing *p = arg;
    grpo_env *e = p->e;
    intptr_t won = 0;
    char rec[64], act[64];
    for (int g = 0; g < 8; g++) {
        grpo_env_episode *ep;
        long secret = 1 + (p->idx * 23 + g * 11) % 100, lo = 1, hi = 100;
        snprintf(rec, sizeof rec, "{\"answer\": \"%ld\"}", secret);
        if (grpo_env_reset(e, rec, &ep) != GRPO_OK)
            return NULL;
        for (int i = 0; i < 7; i++) {
            grpo_env_result r;
            long mid = (lo + hi) / 2;
            snprintf(act, sizeof act, "<guess>%ld</guess>", mid);
            if (grpo_env_step(ep, 0, act, strlen(act), &r) != GRPO_OK)
                break;
            if (strstr(r.observation, "higher"))
                lo = mid + 1;
            else if (strstr(r.observation, "lower"))
                hi = mid - 1;
            int done = r.done, ok = r.has_reward && r.reward == 1.0 && mid == secret;
            grpo_env_result_fini(&r);
            if (done) {
                won += ok;
                break;
            }
        }
        grpo_env_episode_close(ep);
    }
    return (void *)won;
}

/* A fresh episode's "ok" step, from a thread: 1 when it answered "[ok 1]". */
static void *
evil_ok(void *arg)
{
    grpo_env *e = arg;
    grpo_env_episode *ep;
    grpo_env_result r;
    intptr_t ok = 0;
    if (grpo_env_reset(e, "{}", &ep) != GRPO_OK)
        return NULL;
    if (grpo_env_step(ep, 0, "<act>ok</act>", 13, &r) == GRPO_OK) {
        ok = r.observation != NULL && strcmp(r.observation, "[ok 1]\n") == 0;
        grpo_env_result_fini(&r);
    }
    grpo_env_episode_close(ep);
    return (void *)ok;
}

static void
t_threads(void **state)
{
    (void)state;
    for (int in = 0; in <= 1; in++) {
        grpo_env *e = load(guess, NULL, in);
        playing arg[4];
        pthread_t th[4];
        for (int i = 0; i < 4; i++) {
            arg[i].e = e;
            arg[i].idx = i;
            assert_int_equal(pthread_create(&th[i], NULL, player, &arg[i]), 0);
        }
        for (int i = 0; i < 4; i++) {
            void *won;
            pthread_join(th[i], &won);
            assert_int_equal((intptr_t)won, 8);
        }
        grpo_env_destroy(e);
    }
    /* after a crash, 4 threads reset at once: one restarts the worker, all get a working episode */
    grpo_env *e = load(evil, NULL, 0);
    grpo_env_result r = one(e, "{}", "crash");
    assert_string_equal(r.label, "plugin-crash");
    grpo_env_result_fini(&r);
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&th[i], NULL, evil_ok, e), 0);
    for (int i = 0; i < 4; i++) {
        void *ok;
        pthread_join(th[i], &ok);
        assert_int_equal((intptr_t)ok, 1);
    }
    grpo_env_destroy(e);
}

int
main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: env_plugin_test GUESS.so EVIL.so BADABI.so BADNAME.so OTHER.so\n");
        return 2;
    }
    guess = argv[1], evil = argv[2], badabi = argv[3], badname = argv[4], other = argv[5];
    grpo_sandbox *sb;
    /* episodes restart workers from several threads: start the service as grpo does */
    grpo_err err = grpo_sandbox_service_start();
    if (err == GRPO_OK)
        err = grpo_sandbox_create(&sb, NULL);
    if (err == GRPO_EUNSUPPORTED) {
        fprintf(stderr, "env_plugin_test: skipped: %s\n", grpo_error_last());
        return 77;
    }
    if (err != GRPO_OK) {
        fprintf(stderr, "env_plugin_test: no sandbox: %s\n", grpo_error_last());
        return 1;
    }
    grpo_sandbox_destroy(sb);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_guess_same_both_ways),
        cmocka_unit_test(t_refused),
        cmocka_unit_test(t_crash_hang),
        cmocka_unit_test(t_bad_outputs),
        cmocka_unit_test(t_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
