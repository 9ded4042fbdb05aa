/* The code verifier end to end (grpo_verifier_code()): Python stdin/stdout and call-based tests
 * through the pre-warmed pool, C and C++ compiled and run in the sandbox, the verdicts for no
 * code, no tests, compile errors, runtime errors, timeouts and memory, and the ways a program
 * might fake a pass (exiting early, printing a summary, writing to the result channel, an object
 * equal to everything, patching builtins, leaving files or processes for the next sample). */
#include "grpo/sandbox.h"
#include "grpo/verify.h"
#include "common/common_int.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

static const grpo_verifier_api *api;
static void *st;

static const char *ADD_STDIO =
    "{\"inputs\": [\"1 2\\n\", \"3 4\\n\", \"10 -20\\n\"], \"outputs\": [\"3\\n\", \"7\\n\", "
    "\"-10\\n\"]}";
static const char *ADD_CALL =
    "{\"fn_name\": \"add\", \"inputs\": [[1, 2], [3, 4], [0.5, 0.25]], \"outputs\": [3, [7], "
    "0.75]}";

typedef struct got {
    grpo_verdict v;
    char status[64];
    double passed, total;
} got;

static got
score(const char *lang, const char *completion, const char *tests)
{
    grpo_verifier_sample s;
    got g;
    memset(&s, 0, sizeof s);
    memset(&g, 0, sizeof g);
    s.completion = completion;
    s.completion_len = strlen(completion);
    s.language = lang;
    s.tests_json = tests;
    s.prompt_opens_think = 0;
    assert_int_equal(api->score(st, &s, &g.v), 0);
    fprintf(stderr, "  %-7s %-14s %.3f %s\n", lang ? lang : "python", g.v.label, g.v.score,
            g.v.details_json ? g.v.details_json : "");
    cJSON *d = cJSON_Parse(g.v.details_json ? g.v.details_json : "{}");
    cJSON *f = cJSON_GetObjectItem(cJSON_GetObjectItem(d, "first_failure"), "status");
    if (cJSON_IsString(f))
        snprintf(g.status, sizeof g.status, "%s", f->valuestring);
    g.passed = cJSON_GetNumberValue(cJSON_GetObjectItem(d, "passed"));
    g.total = cJSON_GetNumberValue(cJSON_GetObjectItem(d, "total"));
    cJSON_Delete(d);
    free(g.v.details_json);
    g.v.details_json = NULL;
    return g;
}

static void
expect(const char *lang, const char *completion, const char *tests, const char *label,
       double score_, const char *fail_status)
{
    got g = score(lang, completion, tests);
    assert_string_equal(g.v.label, label);
    if (g.v.score < score_ - 1e-9 || g.v.score > score_ + 1e-9)
        fail_msg("score %f, expected %f", g.v.score, score_);
    if (fail_status)
        assert_string_equal(g.status, fail_status);
}

static int
setup(void **state)
{
    (void)state;
    char *err = NULL;
    api = grpo_verifier_code();
    if (api->init("{\"time_limit_ms\": 1500, \"memory_mb\": 256}", &st, &err) != 0) {
        fprintf(stderr, "init: %s\n", err ? err : "?");
        return -1;
    }
    return 0;
}

static int
teardown(void **state)
{
    (void)state;
    api->fini(st);
    return 0;
}

static void
t_python(void **s)
{
    (void)s;
    expect(NULL,
           "<think>plan</think>\n```python\na, b = map(int, input().split())\nprint(a + b)\n```",
           ADD_STDIO, "correct", 1.0, NULL);
    expect("python",
           "```python\nimport sys\na, b = map(int, sys.stdin.read().split())\n"
           "print(a + b if a != 3 else 0)\n```",
           ADD_STDIO, "failed-tests", 2.0 / 3, "wrong-answer");
    expect("python", "```python\ndef add(a, b):\n    return a + b\n```", ADD_CALL, "correct", 1.0,
           NULL);
    expect("python",
           "```python\nclass Solution:\n    def add(self, a, b):\n        return a + b\n```",
           ADD_CALL, "correct", 1.0, NULL);
    expect("python", "```python\nprint(1/0)\n```", ADD_STDIO, "failed-tests", 0, "runtime-error");
    expect("python", "no code at all", ADD_STDIO, "no-code", 0, NULL);
    expect("python", "```python\nprint('\xff\xfe')\n```", ADD_STDIO, "invalid-source", 0, NULL);
    got g = score("python", "```python\nprint(1)\n```", NULL);
    assert_int_equal(g.v.kind, GRPO_VERDICT_SKIP);
    assert_string_equal(g.v.label, "no-tests");
    g = score("python", "```python\nprint(1)\n```", "{\"inputs\": 3}");
    assert_int_equal(g.v.kind, GRPO_VERDICT_SKIP);
    assert_string_equal(g.v.label, "bad-tests");
}

/* A correct answer of 3 MB (past the default 1 MiB stdout cap) still passes. */
static void
t_big_output(void **s)
{
    (void)s;
    grpo_buf t = {0};
    grpo__buf_printf(&t, "{\"inputs\": [\"300000\"], \"outputs\": [\"");
    for (int i = 0; i < 300000; i++)
        grpo__buf_printf(&t, "%d\\n", 1000000 + i);
    grpo__buf_printf(&t, "\"]}");
    expect(
        "python",
        "```python\nn = int(input())\nprint('\\n'.join(str(1000000 + i) for i in range(n)))\n```",
        t.data, "correct", 1.0, NULL);
    expect("c",
           "```c\n#include <stdio.h>\nint main(void){int n;scanf(\"%d\",&n);for(int i=0;i<n;i++)"
           "printf(\"%d\\n\",1000000+i);return 0;}\n```",
           t.data, "correct", 1.0, NULL);
    grpo__buf_fini(&t);
}

static void
t_limits(void **s)
{
    (void)s;
    expect("python", "```python\nwhile True: pass\n```", ADD_STDIO, "failed-tests", 0, "timeout");
    /* with time to spare: it must end at the memory limit, not the clock */
    void *roomy, *save = st;
    char *err = NULL;
    assert_int_equal(api->init("{\"time_limit_ms\": 30000, \"memory_mb\": 256}", &roomy, &err), 0);
    st = roomy;
    expect("python", "```python\nx = []\nwhile True: x.append(bytearray(1 << 20))\n```", ADD_STDIO,
           "failed-tests", 0, "memory-limit");
    st = save;
    api->fini(roomy);
    expect("python", "```python\nwhile True: print('x' * 10000)\n```", ADD_STDIO, "failed-tests", 0,
           "output-limit");
    expect("python", "```python\nimport ctypes\nctypes.CDLL(None).syscall(272, 0x10000000)\n```",
           ADD_STDIO, "failed-tests", 0, "seccomp-killed");
}

/* The sample's time budget: tests that did not run count as failed. Test 1 sleeps 0.8 s, longer
 * than the whole budget (0.5 s) but within its own limit, so tests 2-4 (which would pass) are
 * never run, whatever the machine's speed. */
static void
t_budget(void **s)
{
    (void)s;
    void *tight, *save = st;
    char *err = NULL;
    const char *tests = "{\"inputs\": [\"1\", \"2\", \"3\", \"4\"], \"outputs\": [\"1\", \"2\", "
                        "\"3\", \"4\"]}";
    assert_int_equal(
        api->init("{\"time_limit_ms\": 5000, \"sample_time_limit_ms\": 500}", &tight, &err), 0);
    st = tight;
    got g = score("python",
                  "```python\nimport time\nx = input()\nif x == '1': time.sleep(0.8)\n"
                  "print(x)\n```",
                  tests);
    assert_string_equal(g.v.label, "failed-tests");
    assert_true(g.v.score == 0.25);
    assert_string_equal(g.status, "sample-time-budget");
    st = save;
    api->fini(tight);
    /* call-based tests for C are refused as bad tests, not run */
    g = score("c", "```c\nint add(int a, int b) { return a + b; }\n```", ADD_CALL);
    assert_int_equal(g.v.kind, GRPO_VERDICT_SKIP);
    assert_string_equal(g.v.label, "bad-tests");
    /* an unknown config key is refused (a typo would otherwise leave the default in force) */
    void *typo = NULL;
    assert_int_not_equal(api->init("{\"memory_mib\": 256}", &typo, &err), 0);
    assert_non_null(err);
    assert_non_null(strstr(err, "code config: unknown key \"memory_mib\" (expected time_limit_ms"));
    free(err);
}

static void
t_native(void **s)
{
    (void)s;
    expect("c",
           "```c\n#include <stdio.h>\nint main(void){long a,b;scanf(\"%ld %ld\",&a,&b);"
           "printf(\"%ld\\n\",a+b);return 0;}\n```",
           ADD_STDIO, "correct", 1.0, NULL);
    expect("cpp",
           "```cpp\n#include <iostream>\nint main(){long a,b;std::cin>>a>>b;"
           "std::cout<<(a==1?0:a+b)<<std::endl;}\n```",
           ADD_STDIO, "failed-tests", 2.0 / 3, "wrong-answer");
    got g = score("c", "```c\nint main( {\n```", ADD_STDIO);
    assert_string_equal(g.v.label, "compile-error");
    assert_int_equal(g.v.kind, GRPO_VERDICT_FAIL);
    expect("c", "```c\nint main(void){for(;;);}\n```", ADD_STDIO, "failed-tests", 0, "timeout");
    expect("c", "```c\n#include <unistd.h>\nint main(void){return setuid(0);}\n```", ADD_STDIO,
           "failed-tests", 0, "seccomp-killed");
}

/* Ways to fake a pass: none of them may score. */
static void
t_fake_pass(void **s)
{
    (void)s;
    /* exits 0 before doing anything */
    expect("python", "```python\nimport os\nos._exit(0)\n```", ADD_STDIO, "failed-tests", 0,
           "wrong-answer");
    expect("python", "```python\nimport sys\nsys.exit(0)\ndef add(a, b): return a + b\n```",
           ADD_CALL, "failed-tests", 0, "no-result");
    /* prints a fake summary or a fake result (and defines no function) */
    expect("python", "```python\nprint('All tests passed: 3/3')\nprint('{\"v\": 3}')\n```",
           ADD_CALL, "failed-tests", 0, "runtime-error");
    expect("python", "```python\nprint('3')\ndef add(a, b): print('{\"v\": 3}')\n```", ADD_CALL,
           "failed-tests", 0, "wrong-answer");
    /* writes fake results on every descriptor it can find, then leaves */
    expect("python",
           "```python\nimport os\nfor fd in range(3, 64):\n    try: os.write(fd, "
           "b'R{\"v\": 3}')\n    except OSError: pass\nos._exit(0)\n```",
           ADD_CALL, "failed-tests", 0, "no-result");
    /* an object equal to everything, and an int subclass */
    expect("python",
           "```python\nclass E:\n    def __eq__(self, o): return True\n"
           "def add(a, b): return E()\n```",
           ADD_CALL, "failed-tests", 0, "bad-return-type");
    expect("python",
           "```python\nclass I(int):\n    def __eq__(self, o): return True\n"
           "def add(a, b): return I(0)\n```",
           ADD_CALL, "failed-tests", 0, "bad-return-type");
    /* patching builtins so the harness's type check would be fooled */
    expect("python",
           "```python\nimport builtins\nclass E:\n    def __eq__(self, o): return True\n"
           "builtins.type = lambda x: int\ndef add(a, b): return E()\n```",
           ADD_CALL, "failed-tests", 0, "bad-return-type");
}

/* A sample must not see what an earlier one left behind, and the pool survives hostile ones. */
static void
t_cross_sample(void **s)
{
    (void)s;
    const char *echo = "{\"inputs\": [\"\"], \"outputs\": [\"clean\"]}";
    expect("python", "```python\nopen('/tmp/answer', 'w').write('leak')\nprint('clean')\n```", echo,
           "correct", 1.0, NULL);
    expect("python",
           "```python\nimport os\nprint('leak' if os.path.exists('/tmp/answer') else "
           "'clean')\n```",
           echo, "correct", 1.0, NULL);
    /* a fork bomb, kill(-1), kill(1) and a daemon, then an ordinary sample still works */
    expect("python",
           "```python\nimport os\nwhile True:\n    try: os.fork()\n    except OSError: "
           "pass\n```",
           echo, "failed-tests", 0, "timeout");
    expect("python",
           "```python\nimport os, signal\nfor p in (-1, 1, os.getppid()):\n    for s in "
           "(signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGKILL):\n        try: "
           "os.kill(p, s)\n        except OSError: pass\nprint('clean')\n```",
           echo, "correct", 1.0, NULL);
    expect("python",
           "```python\nimport os, time\nif os.fork() == 0:\n    os.setsid()\n"
           "    time.sleep(100)\nprint(os.getpid())\n```",
           echo, "failed-tests", 0, "wrong-answer");
    expect("python",
           "```python\nimport os\nprint('clean' if not os.path.exists('/proc/1') else "
           "'proc')\n```",
           echo, "correct", 1.0, NULL);
    expect(NULL, "```python\na, b = map(int, input().split())\nprint(a + b)\n```", ADD_STDIO,
           "correct", 1.0, NULL);
}

static void *
worker(void *arg)
{
    int *ok = arg;
    for (int i = 0; i < 4; i++) {
        grpo_verifier_sample s;
        grpo_verdict v;
        const char *c = "```python\na, b = map(int, input().split())\nprint(a + b)\n```";
        memset(&s, 0, sizeof s);
        s.completion = c;
        s.completion_len = strlen(c);
        s.tests_json = ADD_STDIO;
        if (api->score(st, &s, &v) == 0 && v.kind == GRPO_VERDICT_PASS)
            (*ok)++;
        free(v.details_json);
    }
    return NULL;
}

/* A Python solution holding memory outside its address space (tests/attacks/hold_memory.py):
 * it prints the expected "held N" only when it got all N MiB, so a sandbox that lets it through
 * scores it correct. memory_mb is 256 here. */
static void
hold(const char *lang, const char *prog, const char *how, int mib)
{
    char tests[256];
    snprintf(tests, sizeof tests, "{\"inputs\": [\"%s %d\"], \"outputs\": [\"held %d\"]}", how, mib,
             mib);
    got g = score(lang, prog, tests);
    if (g.v.score != 0.0 ||
        (strcmp(g.status, "memory-limit") != 0 && strcmp(g.status, "runtime-error") != 0 &&
         strcmp(g.status, "wrong-answer") != 0))
        fail_msg("%s %d MiB: %s %.1f (%s)", how, mib, g.v.label, g.v.score, g.status);
}

static void
t_memory_outside_as(void **s)
{
    (void)s;
    grpo_buf prog = {0};
    char *src = NULL;
    size_t n = 0;
    assert_int_equal(
        grpo__read_file(GRPO_SOURCE_DIR "/tests/attacks/hold_memory.py", 1 << 20, &src, &n),
        GRPO_OK);
    assert_int_equal(grpo__buf_printf(&prog, "```python\n%s```\n", src), GRPO_OK);
    hold("python", prog.data, "memfd", 384);     /* ENOSYS (before: 48 memfds x 8 MiB held) */
    hold("python", prog.data, "sysv", 768);      /* ENOSYS (SIGSYS before) */
    hold("python", prog.data, "posix_shm", 768); /* no /dev/shm */
    hold("python", prog.data, "tmpfs", 32);      /* past the pool's 16 MiB /tmp (64 before) */
    hold("python", prog.data, "pipes", 768);     /* F_SETPIPE_SZ refused, 64 fds */
    /* eight processes, each under RLIMIT_AS: only the zygote's memory cgroup sees them all */
    uint32_t avail = 0;
    if (grpo_sandbox_probe(&avail) == GRPO_OK && (avail & GRPO_SANDBOX_ISO_MEMCG)) {
        void *roomy, *save = st; /* on a loaded machine eight children take seconds to fill */
        char *err = NULL;
        assert_int_equal(api->init("{\"time_limit_ms\": 30000, \"memory_mb\": 256}", &roomy, &err),
                         0);
        st = roomy;
        hold("python", prog.data, "forks", 768);
        st = save;
        api->fini(roomy);
    } else
        fprintf(stderr, "  forks: skipped, no memory cgroup on this host\n");
    grpo__buf_fini(&prog);
    free(src);
}

static void
t_threads(void **s)
{
    (void)s;
    pthread_t th[3];
    int ok[3] = {0, 0, 0};
    for (int i = 0; i < 3; i++)
        pthread_create(&th[i], NULL, worker, &ok[i]);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(ok[0] + ok[1] + ok[2], 12);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_python),
        cmocka_unit_test(t_limits),
        cmocka_unit_test(t_native),
        cmocka_unit_test(t_fake_pass),
        cmocka_unit_test(t_budget),
        cmocka_unit_test(t_big_output),
        cmocka_unit_test(t_cross_sample),
        cmocka_unit_test(t_threads),
        cmocka_unit_test(t_memory_outside_as),
    };
    /* as grpo does before any thread exists (DESIGN.md, fork safety): sandbox workers are forked
     * from the service, never from this process once t_threads runs (a fork from a threaded
     * process can leave the child stuck on a lock another thread held, as happened in CI) */
    if (grpo_sandbox_service_start() != GRPO_OK)
        return 1;
    return cmocka_run_group_tests(tests, setup, teardown);
}
