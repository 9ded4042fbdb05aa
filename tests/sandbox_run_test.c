/* The sandbox's result record and plumbing: exit codes, stdin, stdout/stderr capture with caps
 * (the excess drained and counted), files placed in /tmp, read-only and writable binds, the
 * environment, the working directory, the wall deadline, the isolation report, long-lived
 * processes with a control socket, workers forked by the service, and the Python pool's call
 * channel. Expected values come from the commands themselves (e.g. `head -c N` writes N bytes). */
#include "grpo/sandbox.h"

#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

static grpo_sandbox *sb;

static void
sh(const char *script, const char *in, grpo_sandbox_cmd *cmd, grpo_sandbox_result *r)
{
    static const char *argv[4];
    argv[0] = "/bin/sh";
    argv[1] = "-c";
    argv[2] = script;
    argv[3] = NULL;
    cmd->argv = argv;
    cmd->stdin_data = in;
    cmd->stdin_len = in ? strlen(in) : 0;
    if (grpo_sandbox_run(sb, cmd, r) != GRPO_OK)
        fail_msg("run: %s", grpo_error_last());
}

static void
cmd_init(grpo_sandbox_cmd *cmd)
{
    memset(cmd, 0, sizeof *cmd);
    grpo_sandbox_limits_default(&cmd->limits);
    cmd->limits.wall_ms = 5000;
}

static void
t_isolation(void **s)
{
    (void)s;
    uint32_t avail = 0;
    char buf[128];
    assert_int_equal(grpo_sandbox_probe(&avail), GRPO_OK);
    fprintf(stderr, "isolation available: %s; in force: %s\n",
            grpo_sandbox_iso_str(avail, buf, sizeof buf),
            grpo_sandbox_iso_str(grpo_sandbox_isolation(sb), buf + 64, 64));
    /* what a handle runs under is what it required (all) and what the kernel has */
    assert_int_equal(grpo_sandbox_isolation(sb) & ~GRPO_SANDBOX_ISO_MEMCG, GRPO_SANDBOX_ISO_ALL);
    assert_int_equal(grpo_sandbox_isolation(sb),
                     avail & (GRPO_SANDBOX_ISO_ALL | GRPO_SANDBOX_ISO_MEMCG));
    assert_int_equal(avail & GRPO_SANDBOX_ISO_ALL, GRPO_SANDBOX_ISO_ALL);
    assert_string_equal(grpo_sandbox_iso_str(GRPO_SANDBOX_ISO_USER | GRPO_SANDBOX_ISO_NET, buf, 64),
                        "user,net");
    assert_string_equal(grpo_sandbox_iso_str(0, buf, 64), "none");
    assert_string_equal(grpo_sandbox_status_name(GRPO_SANDBOX_SECCOMP), "seccomp-killed");
}

static void
t_refuses_less(void **s)
{
    (void)s;
    grpo_sandbox *weak;
    grpo_sandbox_opts opts = {GRPO_SANDBOX_ISO_ALL & ~GRPO_SANDBOX_ISO_NET, NULL};
    char buf[128];
    setenv("GRPO_SANDBOX_DISABLE", "net,uts,memcg", 1); /* as if the kernel lacked them */
    assert_int_equal(grpo_sandbox_create(&weak, NULL), GRPO_EUNSUPPORTED);
    assert_non_null(strstr(grpo_error_last(), "missing required net,uts"));
    opts.require &= ~GRPO_SANDBOX_ISO_UTS; /* a lower minimum is honoured and reported */
    assert_int_equal(grpo_sandbox_create(&weak, &opts), GRPO_OK);
    assert_string_equal(grpo_sandbox_iso_str(grpo_sandbox_isolation(weak), buf, sizeof buf),
                        "user,pid,mount,ipc,seccomp,nnp");
    grpo_sandbox_destroy(weak);
    unsetenv("GRPO_SANDBOX_DISABLE");
}

static void
t_exit_and_io(void **s)
{
    (void)s;
    grpo_sandbox_cmd cmd;
    grpo_sandbox_result r;
    cmd_init(&cmd);
    sh("read x; echo \"got $x\"; echo oops >&2; exit 7", "hello\n", &cmd, &r);
    assert_int_equal(r.status, GRPO_SANDBOX_EXITED);
    assert_int_equal(r.exit_code, 7);
    assert_int_equal(r.signal, 0);
    assert_string_equal(r.out, "got hello\n");
    assert_string_equal(r.err, "oops\n");
    assert_int_equal(r.out_total, 10);
    assert_true(r.wall_ms > 0 && r.max_rss_kb > 0);
    grpo_sandbox_result_fini(&r);
    /* identity and a private host name */
    sh("id -u; id -g; hostname; pwd", NULL, &cmd, &r);
    assert_string_equal(r.out, "1000\n1000\nsandbox\n/tmp\n");
    grpo_sandbox_result_fini(&r);
}

static void
t_output_caps(void **s)
{
    (void)s;
    grpo_sandbox_cmd cmd;
    grpo_sandbox_result r;
    cmd_init(&cmd);
    cmd.limits.stdout_max = 1000;
    cmd.limits.stderr_max = 10;
    sh("head -c 300000 /dev/zero | tr '\\0' a; head -c 5000 /dev/zero >&2", NULL, &cmd, &r);
    assert_int_equal(r.status, GRPO_SANDBOX_OUTPUT); /* stdout past its cap */
    assert_int_equal(r.exit_code, 0);
    assert_int_equal(r.out_len, 1000);
    assert_int_equal(r.out_total, 300000); /* drained and counted, not kept */
    assert_int_equal(r.err_len, 10);
    assert_int_equal(r.err_total, 5000);
    grpo_sandbox_result_fini(&r);
    /* a long stderr alone is only truncated */
    sh("head -c 5000 /dev/zero >&2", NULL, &cmd, &r);
    assert_int_equal(r.status, GRPO_SANDBOX_EXITED);
    grpo_sandbox_result_fini(&r);
}

static void
t_deadline(void **s)
{
    (void)s;
    grpo_sandbox_cmd cmd;
    grpo_sandbox_result r;
    cmd_init(&cmd);
    cmd.limits.wall_ms = 300;
    sh("sleep 5 & sleep 5; echo never", NULL, &cmd, &r);
    assert_int_equal(r.status, GRPO_SANDBOX_TIMEOUT);
    assert_true(r.wall_ms >= 300); /* never before the deadline (no upper bound: load varies) */
    assert_string_equal(r.out, "");
    grpo_sandbox_result_fini(&r);
}

static void
t_files_binds_env(void **s)
{
    (void)s;
    grpo_sandbox_cmd cmd;
    grpo_sandbox_result r;
    char dir[] = "/tmp/grpo-sbx-test-XXXXXX";
    assert_non_null(mkdtemp(dir));
    assert_int_equal(chown(dir, grpo_sandbox_host_uid(), grpo_sandbox_host_uid()), 0);
    grpo_sandbox_file f = {"in.txt", "file data", 9, 0644};
    grpo_sandbox_bind b[2] = {{dir, "/out", 1}, {dir, "/ro", 0}};
    const char *env[] = {"A=1", "B=two", NULL};
    cmd_init(&cmd);
    cmd.files = &f;
    cmd.n_files = 1;
    cmd.binds = b;
    cmd.n_binds = 2;
    cmd.envp = env;
    cmd.cwd = "/out";
    sh("cat /tmp/in.txt; echo; echo \"$A $B\"; pwd; echo w > /out/w.txt && echo wrote;"
       " echo x > /ro/x.txt || echo denied; env | wc -l",
       NULL, &cmd, &r);
    assert_int_equal(r.status, GRPO_SANDBOX_EXITED);
    assert_string_equal(r.out, "file data\n1 two\n/out\nwrote\ndenied\n3\n"); /* A, B, PWD */
    grpo_sandbox_result_fini(&r);
    char path[300];
    snprintf(path, sizeof path, "%s/w.txt", dir);
    assert_int_equal(access(path, F_OK), 0);
    unlink(path);
    rmdir(dir);
    /* a file name that would leave /tmp is a machinery error, not a verdict */
    grpo_sandbox_file bad = {"../etc/x", "", 0, 0644};
    const char *argv[] = {"/bin/true", NULL};
    cmd_init(&cmd);
    cmd.argv = argv;
    cmd.files = &bad;
    cmd.n_files = 1;
    assert_int_equal(grpo_sandbox_run(sb, &cmd, &r), GRPO_ESYS);
    assert_non_null(strstr(grpo_error_last(), "bad file name"));
    /* so is a program that does not exist */
    const char *none[] = {"/usr/bin/does-not-exist", NULL};
    cmd.argv = none;
    cmd.n_files = 0;
    assert_int_equal(grpo_sandbox_run(sb, &cmd, &r), GRPO_ESYS);
    assert_non_null(strstr(grpo_error_last(), "does-not-exist"));
}

/* A host path under a directory only root may enter (like a plugin or an interpreter under
 * /root) can still be shown read-only: the sandbox opens it before giving up its host identity. */
static void
t_bind_under_private_dir(void **s)
{
    (void)s;
    grpo_sandbox_cmd cmd;
    grpo_sandbox_result r;
    char dir[] = "/tmp/grpo-sbx-priv-XXXXXX", pub[64], file[80];
    if (geteuid() != 0)
        skip(); /* only root has such a directory to offer */
    assert_non_null(mkdtemp(dir));
    assert_int_equal(chmod(dir, 0700), 0);
    snprintf(pub, sizeof pub, "%s/pub", dir);
    snprintf(file, sizeof file, "%s/f", pub);
    assert_int_equal(mkdir(pub, 0755), 0);
    FILE *f = fopen(file, "w");
    fputs("inside", f);
    fclose(f);
    chmod(file, 0644);
    grpo_sandbox_bind b = {pub, "/pub", 0};
    cmd_init(&cmd);
    cmd.binds = &b;
    cmd.n_binds = 1;
    sh("cat /pub/f; echo; ls /tmp/grpo-sbx-priv-* 2>&1 | wc -l", NULL, &cmd, &r);
    assert_int_equal(r.status, GRPO_SANDBOX_EXITED);
    assert_string_equal(r.out, "inside\n1\n"); /* and the private dir itself is not there */
    grpo_sandbox_result_fini(&r);
    unlink(file);
    rmdir(pub);
    rmdir(dir);
}

static int
echo_fn(const void *arg, size_t n, int ctl)
{
    char buf[64];
    ssize_t k = read(ctl, buf, sizeof buf);
    if (k <= 0)
        return 1;
    if (write(ctl, arg, n) < 0 || write(ctl, buf, (size_t)k) < 0)
        return 2;
    return (int)getuid() == 1000 ? 0 : 3;
}

static void
t_spawn(void **s)
{
    (void)s;
    grpo_sandbox_cmd cmd;
    grpo_sandbox_proc *p;
    grpo_sandbox_result r;
    char buf[64] = {0};
    cmd_init(&cmd);
    assert_int_equal(grpo_sandbox_spawn(sb, &cmd, echo_fn, "arg:", 4, &p), GRPO_OK);
    int fd = grpo_sandbox_proc_fd(p);
    assert_int_equal(write(fd, "ping", 4), 4);
    size_t have = 0;
    while (have < 8) {
        ssize_t k = read(fd, buf + have, sizeof buf - 1 - have);
        assert_true(k > 0);
        have += (size_t)k;
    }
    assert_string_equal(buf, "arg:ping");
    usleep(100000);
    assert_int_equal(grpo_sandbox_proc_finish(p, &r), GRPO_OK);
    assert_int_equal(r.status, GRPO_SANDBOX_EXITED);
    assert_int_equal(r.exit_code, 0);
    grpo_sandbox_result_fini(&r);
}

/* The process ids of this process's children (every thread's), into pids; returns how many. */
static int
children(int *pids, int cap)
{
    int n = 0;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)getpid(), (int)getpid());
    FILE *f = fopen(path, "r");
    while (f && n < cap && fscanf(f, "%d", &pids[n]) == 1)
        n++;
    if (f)
        fclose(f);
    return n;
}

/* A worker that stops answering (here: SIGSTOPped) makes the call fail with GRPO_ETIMEOUT once
 * the run's deadline plus the reply slack has passed, instead of blocking the caller forever;
 * the handle then refuses further calls at once, and destroying it does not hang. Workers are
 * forked directly here (no service yet), so the new one is a child of this process. */
static void
t_worker_stops_answering(void **s)
{
    (void)s;
    int before[64], after[64], nb, na, pid = -1;
    nb = children(before, 64);
    setenv("GRPO_SANDBOX_REPLY_SLACK_MS", "300", 1);
    grpo_sandbox *w = NULL;
    assert_int_equal(grpo_sandbox_create(&w, NULL), GRPO_OK);
    na = children(after, 64);
    for (int i = 0; i < na; i++) {
        int old = 0;
        for (int j = 0; j < nb; j++)
            old |= after[i] == before[j];
        if (!old)
            pid = after[i];
    }
    assert_true(pid > 0);
    assert_int_equal(kill(pid, SIGSTOP), 0);
    grpo_sandbox_cmd cmd;
    grpo_sandbox_result r;
    cmd_init(&cmd);
    cmd.limits.wall_ms = 200;
    static const char *argv[] = {"/bin/true", NULL};
    cmd.argv = argv;
    double t0 = grpo_now();
    assert_int_equal(grpo_sandbox_run(w, &cmd, &r), GRPO_ETIMEOUT);
    double took = grpo_now() - t0;
    assert_true(took >= 0.45 && took < 10.0);
    assert_non_null(strstr(grpo_error_last(), "did not answer"));
    assert_int_equal(grpo_sandbox_run(w, &cmd, &r), GRPO_EIO); /* at once */
    unsetenv("GRPO_SANDBOX_REPLY_SLACK_MS");
    grpo_sandbox_destroy(w);
}

static void
t_service(void **s)
{
    (void)s;
    grpo_sandbox *w;
    grpo_sandbox_cmd cmd;
    grpo_sandbox_result r;
    assert_int_equal(grpo_sandbox_service_start(), GRPO_OK);
    assert_int_equal(grpo_sandbox_service_start(), GRPO_OK); /* idempotent */
    assert_int_equal(grpo_sandbox_create(&w, NULL), GRPO_OK);
    const char *argv[] = {"/bin/echo", "via service", NULL};
    cmd_init(&cmd);
    cmd.argv = argv;
    assert_int_equal(grpo_sandbox_run(w, &cmd, &r), GRPO_OK);
    assert_string_equal(r.out, "via service\n");
    grpo_sandbox_result_fini(&r);
    grpo_sandbox_destroy(w);
    grpo_sandbox_service_stop();
}

static const char *preload = "import os, resource\n"
                             "def echo(args):\n"
                             "    import sys\n"
                             "    data = sys.stdin.read()\n"
                             "    print('fake-frame R{}')\n"
                             "    return {'args': args, 'stdin': data, 'uid': os.getuid(),\n"
                             "            'as': resource.getrlimit(resource.RLIMIT_AS)[0]}\n"
                             "def nothing(args):\n"
                             "    os._exit(0)\n";

static void
t_pool(void **s)
{
    (void)s;
    grpo_sandbox_pool *pool;
    grpo_sandbox_limits l;
    grpo_sandbox_result r;
    char *ret = NULL;
    assert_int_equal(grpo_sandbox_pool_create(&pool, NULL, preload), GRPO_OK);
    assert_int_equal(grpo_sandbox_pool_isolation(pool) & GRPO_SANDBOX_ISO_ALL,
                     GRPO_SANDBOX_ISO_ALL);
    grpo_sandbox_limits_default(&l);
    l.mem_bytes = 300ull << 20;
    assert_int_equal(
        grpo_sandbox_pool_call(pool, "echo", "[1, \"two\"]", "in\xce\xbb", 4, &l, &r, &ret),
        GRPO_OK);
    assert_int_equal(r.status, GRPO_SANDBOX_EXITED);
    assert_string_equal(r.out, "fake-frame R{}\n");
    assert_non_null(ret);
    char want[200];
    snprintf(want, sizeof want,
             "{\"args\":[1,\"two\"],\"stdin\":\"in\xce\xbb\",\"uid\":1000,\"as\":%llu}",
             300ull << 20);
    assert_string_equal(ret, want);
    free(ret);
    grpo_sandbox_result_fini(&r);
    /* exiting without returning gives no result */
    assert_int_equal(grpo_sandbox_pool_call(pool, "nothing", "null", NULL, 0, &l, &r, &ret),
                     GRPO_OK);
    assert_null(ret);
    assert_int_equal(r.status, GRPO_SANDBOX_EXITED);
    grpo_sandbox_result_fini(&r);
    /* unknown function and bad names are errors of the caller */
    assert_int_equal(grpo_sandbox_pool_call(pool, "missing", "null", NULL, 0, &l, &r, &ret),
                     GRPO_EINVAL);
    assert_int_equal(grpo_sandbox_pool_call(pool, "a;b", "null", NULL, 0, &l, &r, &ret),
                     GRPO_EINVAL);
    grpo_sandbox_pool_destroy(pool);
    /* a preload that does not import is refused at creation */
    assert_int_equal(grpo_sandbox_pool_create(&pool, NULL, "import no_such_module\n"), GRPO_EINVAL);
    assert_non_null(strstr(grpo_error_last(), "no_such_module"));
}

static int
setup(void **s)
{
    (void)s;
    return grpo_sandbox_create(&sb, NULL) == GRPO_OK ? 0 : -1;
}

static int
teardown(void **s)
{
    (void)s;
    grpo_sandbox_destroy(sb);
    return 0;
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_isolation),
        cmocka_unit_test(t_refuses_less),
        cmocka_unit_test(t_exit_and_io),
        cmocka_unit_test(t_output_caps),
        cmocka_unit_test(t_deadline),
        cmocka_unit_test(t_files_binds_env),
        cmocka_unit_test(t_bind_under_private_dir),
        cmocka_unit_test(t_spawn),
        cmocka_unit_test(t_worker_stops_answering),
        cmocka_unit_test(t_service),
        cmocka_unit_test(t_pool),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
