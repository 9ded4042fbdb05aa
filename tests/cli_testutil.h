/* What the tests that drive the `grpo` command share: a scratch folder made by the group setup
 * and removed by its teardown (GRPO_BIN is the binary, GRPO_SOURCE_DIR the repository), commands
 * run through the shell with their output kept in the folder's out.txt, and files read back.
 * Include after <cmocka.h>; one including file per test executable. */
#ifndef GRPO_TESTS_CLI_TESTUTIL_H
#define GRPO_TESTS_CLI_TESTUTIL_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmpdir[] = "/tmp/grpo_cli_test_XXXXXX";
static const char *bin, *src;

/* Runs a shell command; returns its exit status; stdout+stderr go to tmpdir/out.txt. */
static inline int
run(const char *fmt, ...)
{
    char cmd[4096], full[4400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    snprintf(full, sizeof full, "%s > %s/out.txt 2>&1", cmd, tmpdir);
    int rc = system(full);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* tmpdir/name as a NUL-terminated string the caller frees; NULL when it cannot be opened. */
static inline char *
slurp_alloc(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = 0;
    fclose(f);
    return buf;
}

static inline int
setup(void **state)
{
    (void)state;
    bin = getenv("GRPO_BIN");
    src = getenv("GRPO_SOURCE_DIR");
    if (bin == NULL || bin[0] == 0 || src == NULL || mkdtemp(tmpdir) == NULL)
        return -1;
    return 0;
}

/* Removes the folder, also what a test made read-only in it. */
static inline int
teardown(void **state)
{
    (void)state;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "chmod -R u+w %s; rm -rf %s", tmpdir, tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

#endif
