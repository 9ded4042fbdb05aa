/* The python tool: state kept across calls, expression values shown, exceptions, the per-call
 * wall deadline (and the fresh interpreter after it), the memory and output limits, crashes,
 * DeepSeek-V3 tool-call blocks, the sandbox's walls, and episodes stepped from several threads.
 * Skipped (77) where the kernel lacks the namespaces the sandbox requires. */
#include "grpo/env.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#define FW "\xef\xbd\x9c"
#define SP "\xe2\x96\x81"
#define CALL(args)                                                                                 \
    "<" FW "tool" SP "call" SP "begin" FW ">function<" FW "tool" SP "sep" FW                       \
    ">python\n```json\n" args "\n```<" FW "tool" SP "call" SP "end" FW ">"
#define OUT_B "<" FW "tool" SP "output" SP "begin" FW ">"
#define OUT_E "<" FW "tool" SP "output" SP "end" FW ">"
#define OUTS_B "<" FW "tool" SP "outputs" SP "begin" FW ">"
#define OUTS_E "<" FW "tool" SP "outputs" SP "end" FW ">"

static grpo_env *env; /* short deadline, small caps */

/* Runs a fenced block; the caller frees r. */
static void
run(grpo_env_episode *ep, const char *code, grpo_env_result *r)
{
    char buf[4096];
    int n = snprintf(buf, sizeof buf, "```python\n%s```", code);
    if (grpo_env_step(ep, 0, buf, (size_t)n, r) != GRPO_OK)
        fail_msg("step: %s", grpo_error_last());
}

static void
expect(grpo_env_episode *ep, const char *code, const char *label, const char *obs)
{
    grpo_env_result r;
    run(ep, code, &r);
    if (strcmp(r.label, label) != 0 || (obs && strcmp(r.observation, obs) != 0))
        fail_msg("%s -> %s [%s]", code, r.label, r.observation);
    grpo_env_result_fini(&r);
}

/* Runs code and checks the label and that the observation contains each of the NULL-ended
 * strings. */
static void
expect_has(grpo_env_episode *ep, const char *code, const char *label, ...)
{
    grpo_env_result r;
    va_list ap;
    run(ep, code, &r);
    if (strcmp(r.label, label) != 0)
        fail_msg("%s -> %s [%s]", code, r.label, r.observation);
    va_start(ap, label);
    for (const char *s; (s = va_arg(ap, const char *)) != NULL;)
        if (strstr(r.observation, s) == NULL && (!r.info_json || strstr(r.info_json, s) == NULL))
            fail_msg("%s: no \"%s\" in [%s] %s", code, s, r.observation, r.info_json);
    va_end(ap);
    grpo_env_result_fini(&r);
}

static grpo_env_episode *
episode(void)
{
    grpo_env_episode *ep;
    assert_int_equal(grpo_env_reset(env, NULL, &ep), GRPO_OK);
    return ep;
}

static void
t_state_and_values(void **s)
{
    (void)s;
    grpo_env_episode *ep = episode();
    const grpo_env_marker *m;
    assert_int_equal(grpo_env_markers(env, &m), 2);
    assert_string_equal(grpo_env_name(env), "python");
    expect(ep, "x = 1\n", "ok", "\n```output\n```\n");
    expect(ep, "print(x + 1)\n", "ok", "\n```output\n2\n```\n");
    expect(ep, "x * 21", "ok", "\n```output\n21\n```\n");                 /* the last expression */
    expect(ep, "print('a')\n'b'\nNone\n", "ok", "\n```output\na\n```\n"); /* only the last */
    expect(ep, "def f(n):\n    return [n] * 2\nf(x)\n", "ok", "\n```output\n[1, 1]\n```\n");
    expect(ep, "import sys; print('w', file=sys.stderr)", "ok", "\n```output\nw\n```\n");
    /* the whole round trip: the action as the run library finds it in the model's text */
    const char *text = "Compute it.\n```python\nprint(f(3))\n```";
    size_t b, e;
    grpo_env_result r;
    assert_int_equal(grpo_env_find_action(m, 2, text, strlen(text), 0, strlen(text) - 1, &b, &e),
                     0);
    assert_int_equal(grpo_env_step(ep, 0, text + b, e - b, &r), GRPO_OK);
    assert_string_equal(r.observation, "\n```output\n[3, 3]\n```\n");
    assert_non_null(strstr(r.info_json, "\"status\":\"ok\""));
    assert_non_null(strstr(r.info_json, "\"restarted\":false"));
    assert_non_null(strstr(r.info_json, "\"stdout_bytes\":7"));
    assert_false(r.done);
    grpo_env_result_fini(&r);
    grpo_env_episode_close(ep);
}

static void
t_error(void **s)
{
    (void)s;
    grpo_env_episode *ep = episode();
    expect(ep, "y = 5\n", "ok", NULL);
    expect_has(ep, "def g():\n    return 1 / 0\ng()\n", "error", "Traceback",
               "ZeroDivisionError: division by zero", "return 1 / 0", "[error: ", NULL);
    expect_has(ep, "x = (\n", "error", "SyntaxError", NULL);
    expect_has(ep, "raise SystemExit(3)", "error", "SystemExit: 3", NULL);
    /* the harness's own frames are not in the traceback, and the state survived */
    grpo_env_result r;
    run(ep, "int('q')", &r);
    assert_null(strstr(r.observation, "<string>"));
    grpo_env_result_fini(&r);
    expect(ep, "print(y)", "ok", "\n```output\n5\n```\n");
    grpo_env_episode_close(ep);
}

static void
t_timeout(void **s)
{
    (void)s;
    grpo_env_episode *ep = episode();
    expect(ep, "z = 7\n", "ok", NULL);
    expect_has(ep, "print('started')\nwhile True:\n    pass\n", "timeout",
               "[timeout: ", "variables are lost", NULL);
    /* the next call gets a fresh interpreter, and says so */
    expect_has(ep, "print(z)", "error", "a fresh interpreter", "NameError", "\"restarted\":true",
               NULL);
    expect(ep, "print('again')", "ok", "\n```output\nagain\n```\n");
    grpo_env_episode_close(ep);
}

static void
t_memory(void **s)
{
    (void)s;
    grpo_env_episode *ep = episode();
    expect(ep, "keep = 3\n", "ok", NULL);
    expect_has(ep, "a = bytearray(1 << 40)\n", "memory-limit", "MemoryError",
               "[memory-limit: ", NULL);
    expect_has(ep, "b = [0] * (10 ** 9)\n", "memory-limit", "MemoryError", NULL);
    expect(ep, "print(keep)", "ok", "\n```output\n3\n```\n"); /* a MemoryError keeps the state */
    grpo_env_episode_close(ep);
}

static void
t_output(void **s)
{
    (void)s;
    grpo_env_episode *ep = episode();
    /* shown up to max_output_bytes (300), the rest counted */
    char want[512] = "\n```output\n";
    memset(want + strlen(want), 'y', 300);
    strcat(want, "\n[... 201 more bytes]\n```\n");
    expect(ep, "print('y' * 500)", "ok", want);
    /* a long traceback keeps its end, where the exception is */
    expect_has(ep, "def r(n):\n    return r(n - 1) if n else 1 / 0\nr(30)\n", "error",
               "more bytes]\n", "ZeroDivisionError: division by zero\n[error: ", NULL);
    /* past stdout_max (64 KiB) */
    expect_has(ep, "print('x' * 200000)", "output-limit", "more bytes]",
               "[output-limit: ", "\"stdout_bytes\":200001", NULL);
    /* an endless flood is stopped past output_kill, well before the deadline */
    expect_has(ep, "while True:\n    print('z' * 1000)\n", "output-limit", NULL);
    /* a cut never splits a character: 299 ASCII bytes, then 2-byte ones */
    grpo_env_result r;
    run(ep, "print('a' * 299 + '\\u00e9' * 5)", &r);
    assert_non_null(strstr(r.observation, "a\n[... 11 more bytes]"));
    grpo_env_result_fini(&r);
    grpo_env_episode_close(ep);
}

static void
t_crash(void **s)
{
    (void)s;
    grpo_env_episode *ep = episode();
    expect_has(ep, "import os\nos._exit(3)\n", "crash", "[crash: ", "variables are lost", NULL);
    expect_has(ep, "import os\nos.abort()\n", "crash", "a fresh interpreter", NULL);
    expect_has(ep, "import ctypes\nctypes.string_at(0)\n", "crash", NULL);
    /* a cell that forges a reply on the control socket breaks the protocol: a crash */
    expect_has(ep,
               "import os\nos.write(3, b'\\x02\\x00\\x00\\x00\\x00\\x00\\x00\\x00"
               "\\x00\\x00\\x00\\x00{}')\n",
               "crash", NULL);
    expect(ep, "print(1)", "ok", NULL);
    grpo_env_episode_close(ep);
}

static void
dsv3(grpo_env_episode *ep, const char *block, const char *label, const char *obs, const char *has)
{
    grpo_env_result r;
    if (grpo_env_step(ep, 1, block, strlen(block), &r) != GRPO_OK)
        fail_msg("step: %s", grpo_error_last());
    if (strcmp(r.label, label) != 0 || (obs && strcmp(r.observation, obs) != 0) ||
        (has && strstr(r.observation, has) == NULL))
        fail_msg("%s -> %s [%s]", block, r.label, r.observation);
    grpo_env_result_fini(&r);
}

static void
t_dsv3(void **s)
{
    (void)s;
    grpo_env_episode *ep = episode();
    dsv3(ep,
         GRPO_ENV_DSV3_BEGIN CALL("{\"code\": \"x = 5\"}") "\n" CALL("{\"code\": \"print(x * 2)\"}")
             GRPO_ENV_DSV3_END,
         "ok", OUTS_B OUT_B OUT_E "\n" OUT_B "10\n" OUT_E OUTS_E, NULL);
    dsv3(ep, GRPO_ENV_DSV3_BEGIN CALL("{\"code\": \"print(x\"") GRPO_ENV_DSV3_END, "bad-call", NULL,
         "[bad-call: the arguments are not a JSON object]");
    dsv3(ep, GRPO_ENV_DSV3_BEGIN CALL("{\"src\": 1}") GRPO_ENV_DSV3_END, "bad-call", NULL,
         "no string \"code\"");
    dsv3(ep,
         GRPO_ENV_DSV3_BEGIN "<" FW "tool" SP "call" SP "begin" FW ">function<" FW "tool" SP
                             "sep" FW ">shell\n```json\n{}\n```<" FW "tool" SP "call" SP "end" FW
                             ">" GRPO_ENV_DSV3_END,
         "bad-call", NULL, "unknown tool \"shell\"");
    dsv3(ep, GRPO_ENV_DSV3_BEGIN "hello" GRPO_ENV_DSV3_END, "bad-call", NULL, "expected <");
    dsv3(ep, GRPO_ENV_DSV3_BEGIN GRPO_ENV_DSV3_END, "bad-call", NULL, "no tool call");
    /* a bad call between good ones: each answered in order, the step labelled bad-call */
    dsv3(ep,
         GRPO_ENV_DSV3_BEGIN CALL("{\"code\": \"x\"}") CALL("[]") CALL("{\"code\": \"1/0\"}")
             GRPO_ENV_DSV3_END,
         "bad-call", NULL, OUT_B "5\n" OUT_E "\n" OUT_B "[bad-call: ");
    /* a fenced block that does not parse, and code that is not UTF-8 */
    dsv3(ep, "```python\n", "bad-call", NULL, NULL);
    grpo_env_result r;
    assert_int_equal(grpo_env_step(ep, 0, "```python\n\xff```", 14, &r), GRPO_OK);
    assert_string_equal(r.label, "bad-call");
    grpo_env_result_fini(&r);
    grpo_env_episode_close(ep);
}

static void
t_walls(void **s)
{
    (void)s;
    grpo_env_episode *ep = episode();
    expect(ep,
           "import os, socket\n"
           "for p in ['/usr/evil', '/etc/evil', '/evil']:\n"
           "    try:\n"
           "        open(p, 'w'); print('wrote', p)\n"
           "    except OSError:\n"
           "        print('no', p)\n"
           "open('/tmp/ok', 'w').write('fine'); print(open('/tmp/ok').read())\n"
           "try:\n"
           "    socket.create_connection(('1.1.1.1', 80), timeout=1); print('net')\n"
           "except OSError:\n"
           "    print('no net')\n"
           "print(os.path.exists('/home'), os.getuid())\n",
           "ok",
           "\n```output\nno /usr/evil\nno /etc/evil\nno /evil\nfine\nno net\nFalse 1000\n```\n");
    grpo_env_episode_close(ep);
}

typedef struct worker_arg {
    grpo_env_episode *ep[2];
    int id[2];
    int bad;
} worker_arg;

static void *
worker(void *p)
{
    worker_arg *a = p;
    char code[64], want[64];
    grpo_env_result r;
    for (int round = 0; round < 2; round++)
        for (int k = 0; k < 2; k++) {
            snprintf(code, sizeof code, "```python\nv = %d if %d == 0 else v + 1000\nv```",
                     a->id[k], round);
            snprintf(want, sizeof want, "\n```output\n%d\n```\n", a->id[k] + 1000 * round);
            grpo_err err = grpo_env_step(a->ep[k], 0, code, strlen(code), &r);
            if (err != GRPO_OK || strcmp(r.observation, want) != 0) {
                fprintf(stderr, "episode %d round %d: %s [%s] %s\n", a->id[k], round,
                        err != GRPO_OK ? grpo_error_last() : r.label,
                        err != GRPO_OK ? "" : r.observation, r.info_json ? r.info_json : "");
                a->bad++;
            }
            grpo_env_result_fini(&r);
        }
    return NULL;
}

/* 8 interpreters start at once here: on a loaded machine (or under ASan) that can take longer
 * than the other tests' 1.5 s deadline, which is not what this test is about. */
static void
t_threads(void **s)
{
    (void)s;
    pthread_t th[4];
    worker_arg a[4];
    grpo_env *slow = NULL;
    grpo_env_python_opts o;
    grpo_env_python_opts_default(&o);
    o.limits.wall_ms = 60000;
    assert_int_equal(grpo_env_python_create(&slow, &o), GRPO_OK);
    for (int t = 0; t < 4; t++) {
        memset(&a[t], 0, sizeof a[t]);
        for (int k = 0; k < 2; k++) {
            assert_int_equal(grpo_env_reset(slow, NULL, &a[t].ep[k]), GRPO_OK);
            a[t].id[k] = 10 * t + k;
        }
        assert_int_equal(pthread_create(&th[t], NULL, worker, &a[t]), 0);
    }
    int bad = 0;
    for (int t = 0; t < 4; t++) {
        pthread_join(th[t], NULL);
        bad += a[t].bad;
        grpo_env_episode_close(a[t].ep[0]);
        grpo_env_episode_close(a[t].ep[1]);
    }
    grpo_env_destroy(slow);
    assert_int_equal(bad, 0);
}

static int
setup(void **s)
{
    (void)s;
    grpo_env_python_opts o;
    grpo_env_python_opts_default(&o);
    o.limits.wall_ms = 1500;
    o.limits.mem_bytes = 512ull << 20;
    o.limits.stdout_max = 64 << 10;
    o.limits.output_kill = 4 << 20;
    o.max_output_bytes = 300;
    return grpo_env_python_create(&env, &o) == GRPO_OK ? 0 : -1;
}

static int
teardown(void **s)
{
    (void)s;
    grpo_env_destroy(env);
    return 0;
}

int
main(void)
{
    uint32_t have = 0;
    if (grpo_sandbox_probe(&have) != GRPO_OK ||
        (have & GRPO_SANDBOX_ISO_ALL) != GRPO_SANDBOX_ISO_ALL) {
        fprintf(stderr, "skipped: the kernel does not allow the sandbox's namespaces\n");
        return 77;
    }
    /* Workers fork from the service, as in grpo's commands: forking them straight from this
     * multithreaded test (t_threads) could copy a lock another thread holds. */
    if (grpo_sandbox_service_start() != GRPO_OK)
        fprintf(stderr, "sandbox service: %s\n", grpo_error_last());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_state_and_values),
        cmocka_unit_test(t_error),
        cmocka_unit_test(t_timeout),
        cmocka_unit_test(t_memory),
        cmocka_unit_test(t_output),
        cmocka_unit_test(t_crash),
        cmocka_unit_test(t_dsv3),
        cmocka_unit_test(t_walls),
        cmocka_unit_test(t_threads),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
