/* The attack suite: each program in tests/attacks/attacks.c does one hostile thing inside the
 * sandbox; each must come back with the right status, and afterwards the host is checked: the
 * canary file is untouched, no connection reached our TCP or abstract-socket listeners, no
 * process of the sandbox uid is left over, a decoy process running as the sandbox's host uid is
 * still alive, and no file appeared outside the sandbox's tmp. Attacks that would hurt the
 * machine if containment failed (fork/thread/memory bombs, kill(-1)) run only after a pre-flight
 * run has shown that the PID namespace and the limits are in force. */
#include "grpo/sandbox.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdbool.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

static char attack_bin[PATH_MAX];
static grpo_sandbox *sb;
static char canary[PATH_MAX], canary_text[64], escape_host[PATH_MAX], secret[64];
static char unix_name[64], port_s[16];
static int tcp_fd = -1, unix_fd = -1;
static pid_t decoy = -1;
static int dangerous_ok;

#define AS_LIMIT (256ull << 20)
#define NPROC 16
#define NOFILE 32

static void
limits(grpo_sandbox_limits *l)
{
    grpo_sandbox_limits_default(l);
    l->wall_ms = 3000;
    l->cpu_ms = 3000;
    l->mem_bytes = AS_LIMIT;
    l->nproc = NPROC;
    l->nofile = NOFILE;
    l->stdout_max = 64 << 10;
    l->output_kill = 4 << 20;
    l->fsize_bytes = 8 << 20;
}

/* Sandbox processes (the sandbox's host uid, another PID namespace than ours) that descend from
 * us or were orphaned to the host's init. */
static int
leftovers_now(bool verbose)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    int n = 0;
    unsigned uid = grpo_sandbox_host_uid();
    char my_ns[64] = "", ns[64], nspath[300];
    if (readlink("/proc/self/ns/pid", my_ns, sizeof my_ns - 1) < 0)
        my_ns[0] = '\0';
    while (d && (e = readdir(d)) != NULL) {
        char path[300], line[256];
        unsigned ruid = 0;
        int ppid = -1;
        if (e->d_name[0] < '0' || e->d_name[0] > '9' || atoi(e->d_name) == decoy)
            continue;
        snprintf(path, sizeof path, "/proc/%s/status", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        while (fgets(line, sizeof line, f)) {
            sscanf(line, "Uid: %u", &ruid);
            sscanf(line, "PPid: %d", &ppid);
        }
        fclose(f);
        if (ruid != uid)
            continue;
        snprintf(nspath, sizeof nspath, "/proc/%s/ns/pid", e->d_name);
        memset(ns, 0, sizeof ns);
        if (readlink(nspath, ns, sizeof ns - 1) > 0 && strcmp(ns, my_ns) == 0)
            continue; /* in our namespace: a worker of ours, not a sandboxed process */
        /* walk up: ours if we are an ancestor, escaped if its parent is the host's init */
        for (int p = ppid, hops = 0; p > 0 && hops < 64; hops++) {
            if (p == getpid() || (hops == 0 && p == 1)) { /* ours, or orphaned to init */
                n++;
                if (verbose)
                    fprintf(stderr, "leftover sandbox process %s\n", e->d_name);
                break;
            }
            snprintf(path, sizeof path, "/proc/%d/status", p);
            f = fopen(path, "r");
            int next = -1;
            while (f && fgets(line, sizeof line, f))
                sscanf(line, "PPid: %d", &next);
            if (f)
                fclose(f);
            p = next;
        }
    }
    if (d)
        closedir(d);
    return n;
}

/* Other tests tear their sandboxes down concurrently: a process of theirs may be an orphan of
 * the host's init for a moment (its worker exited, PDEATHSIG on its way). Escaped processes of
 * ours stay, so a leftover must still be there after two seconds. */
static int
leftovers(void)
{
    for (int i = 0; i < 20; i++) {
        if (leftovers_now(false) == 0)
            return 0;
        usleep(100000);
    }
    return leftovers_now(true);
}

/* True when some line of the attack's output starts with "read " (a file it could read). */
static int
read_something(const char *out)
{
    return strncmp(out, "read ", 5) == 0 || strstr(out, "\nread ") != NULL;
}

static void
host_check(void)
{
    char buf[64] = {0};
    FILE *f = fopen(canary, "r");
    assert_non_null(f);
    assert_non_null(fgets(buf, sizeof buf, f));
    fclose(f);
    assert_string_equal(buf, canary_text);
    assert_true(accept(tcp_fd, NULL, NULL) < 0 && errno == EAGAIN);
    assert_true(accept(unix_fd, NULL, NULL) < 0 && errno == EAGAIN);
    if (decoy > 0) {
        int st;
        assert_int_equal(waitpid(decoy, &st, WNOHANG), 0);
        assert_int_equal(kill(decoy, 0), 0);
    }
    assert_int_equal(leftovers(), 0);
    const char *escapes[] = {"/usr/grpo_escape", "/etc/grpo_escape", "/grpo_escape",
                             "/dev/grpo_escape", escape_host,        NULL};
    for (int i = 0; escapes[i]; i++)
        assert_int_equal(access(escapes[i], F_OK), -1);
}

static void
run_with(const char *name, const char *arg, const grpo_sandbox_limits *l, int proc,
         grpo_sandbox_result *r)
{
    const char *argv[] = {"/work/attacks", name, arg, NULL};
    grpo_sandbox_bind b = {attack_bin, "/work/attacks", 0};
    grpo_sandbox_cmd cmd;
    memset(&cmd, 0, sizeof cmd);
    cmd.argv = argv;
    cmd.binds = &b;
    cmd.n_binds = 1;
    cmd.mount_proc = proc;
    cmd.limits = *l;
    grpo_err err = grpo_sandbox_run(sb, &cmd, r);
    if (err != GRPO_OK)
        fail_msg("%s: %s", name, grpo_error_last());
    fprintf(stderr, "  %-14s %-14s exit %d sig %d cpu %.0f ms wall %.0f ms rss %llu KiB\n", name,
            grpo_sandbox_status_name(r->status), r->exit_code, r->signal, r->cpu_ms, r->wall_ms,
            (unsigned long long)r->max_rss_kb);
    host_check();
}

static void
run(const char *name, const char *arg, grpo_sandbox_result *r)
{
    grpo_sandbox_limits l;
    limits(&l);
    run_with(name, arg, &l, 0, r);
}

/* Runs and checks the status; output checks are the caller's. */
static void
expect(const char *name, const char *arg, grpo_sandbox_status want)
{
    grpo_sandbox_result r;
    run(name, arg, &r);
    if (r.status != want)
        fail_msg("%s: status %s, expected %s (out: %s err: %s)", name,
                 grpo_sandbox_status_name(r.status), grpo_sandbox_status_name(want), r.out, r.err);
    grpo_sandbox_result_fini(&r);
}

static void
expect_out(const char *name, const char *arg, const char *needle)
{
    grpo_sandbox_result r;
    run(name, arg, &r);
    assert_int_equal(r.status, GRPO_SANDBOX_EXITED);
    if (strstr(r.out, needle) == NULL)
        fail_msg("%s: output lacks \"%s\": %s", name, needle, r.out);
    grpo_sandbox_result_fini(&r);
}

static int
setup(void **state)
{
    (void)state;
    grpo_sandbox_result r;
    grpo_sandbox_limits l;
    if (grpo_sandbox_create(&sb, NULL) != GRPO_OK) {
        fprintf(stderr, "sandbox unavailable: %s\n", grpo_error_last());
        return -1;
    }
    snprintf(canary, sizeof canary, "/tmp/grpo-canary-%d", (int)getpid());
    snprintf(canary_text, sizeof canary_text, "canary-%d-%ld", (int)getpid(), (long)random());
    FILE *f = fopen(canary, "w");
    fputs(canary_text, f);
    fclose(f);
    snprintf(escape_host, sizeof escape_host, "/tmp/grpo-escape-%d", (int)getpid());
    snprintf(secret, sizeof secret, "s3cr3t-%d", (int)getpid());
    setenv("GRPO_ATTACK_SECRET", secret, 1);
    /* listeners an escaped program could reach */
    struct sockaddr_in sa = {0};
    socklen_t sl = sizeof sa;
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    tcp_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    assert_int_equal(bind(tcp_fd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(tcp_fd, 4), 0);
    getsockname(tcp_fd, (struct sockaddr *)&sa, &sl);
    snprintf(port_s, sizeof port_s, "%d", ntohs(sa.sin_port));
    struct sockaddr_un su = {0};
    su.sun_family = AF_UNIX;
    snprintf(unix_name, sizeof unix_name, "grpo-attack-%d", (int)getpid());
    snprintf(su.sun_path + 1, sizeof su.sun_path - 1, "%s", unix_name);
    unix_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    assert_int_equal(
        bind(unix_fd, (struct sockaddr *)&su,
             (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(unix_name))),
        0);
    assert_int_equal(listen(unix_fd, 4), 0);
    if (geteuid() == 0) { /* a process kill(-1) would reach if the PID namespace failed */
        decoy = fork();
        if (decoy == 0) {
            uid_t u = (uid_t)grpo_sandbox_host_uid();
            if (setresgid(u, u, u) != 0 || setresuid(u, u, u) != 0)
                _exit(1);
            for (;;)
                pause();
        }
    }
    /* pre-flight: the program is PID 2 under our init, and the limits are what we asked */
    limits(&l);
    run_with("limits", "", &l, 0, &r);
    char want[128];
    uint32_t iso = grpo_sandbox_isolation(sb);
    snprintf(want, sizeof want, "nproc=%d\nas=%llu\ncore=0", NPROC + 1, AS_LIMIT);
    dangerous_ok = r.status == GRPO_SANDBOX_EXITED && strstr(r.out, "pid=2 ppid=1") &&
                   strstr(r.out, want) && (iso & GRPO_SANDBOX_ISO_PID) &&
                   (iso & GRPO_SANDBOX_ISO_USER) && (iso & GRPO_SANDBOX_ISO_SECCOMP);
    if (!dangerous_ok)
        fprintf(stderr, "pre-flight did not confirm PID namespace + limits:\n%s\n", r.out);
    grpo_sandbox_result_fini(&r);
    return 0;
}

static int
teardown(void **state)
{
    (void)state;
    if (decoy > 0) {
        kill(decoy, SIGKILL);
        waitpid(decoy, NULL, 0);
    }
    grpo_sandbox_destroy(sb);
    unlink(canary);
    close(tcp_fd);
    close(unix_fd);
    return 0;
}

static void
need_dangerous(void)
{
    if (!dangerous_ok) {
        fprintf(stderr, "skipped: PID namespace and limits not confirmed by the pre-flight run\n");
        skip();
    }
}

static void
t_fork_bomb(void **s)
{
    (void)s;
    need_dangerous();
    expect("forkbomb", "", GRPO_SANDBOX_TIMEOUT);
}

/* RLIMIT_NPROC holds for the sandbox although we may be root: our init and the program count,
 * and the limit is per (user namespace, uid), so other sandboxes do not eat into it. */
static void
t_nproc(void **s)
{
    (void)s;
    grpo_sandbox_result r;
    int n = -1, e = -1;
    need_dangerous();
    run("forkcount", "", &r);
    assert_int_equal(r.status, GRPO_SANDBOX_EXITED);
    assert_int_equal(sscanf(r.out, "forked=%d errno=%d", &n, &e), 2);
    assert_int_equal(e, EAGAIN);
    assert_int_equal(n, NPROC - 1); /* the program itself is one of the NPROC */
    grpo_sandbox_result_fini(&r);
    run("threadcount", "", &r);
    assert_int_equal(r.status, GRPO_SANDBOX_EXITED);
    assert_int_equal(sscanf(r.out, "threads=%d", &n), 1);
    assert_int_equal(n, NPROC - 1);
    grpo_sandbox_result_fini(&r);
}

static void
t_thread_bomb(void **s)
{
    (void)s;
    need_dangerous();
    expect("threadbomb", "", GRPO_SANDBOX_TIMEOUT);
}

static void
t_memory_bomb(void **s)
{
    (void)s;
    grpo_sandbox_result r;
    grpo_sandbox_limits l;
    need_dangerous();
    limits(&l);
    l.wall_ms = l.cpu_ms = 30000; /* it ends at the memory limit in well under a second */
    run_with("membomb", "", &l, 0, &r);
    assert_int_equal(r.status, GRPO_SANDBOX_MEMORY);
    assert_true(r.max_rss_kb * 1024 <= AS_LIMIT);
    grpo_sandbox_result_fini(&r);
}

/* Memory held outside the address space (memfd, SysV and POSIX shm, files in /tmp, full pipes,
 * and several processes each under RLIMIT_AS): the program asks for more than its memory limit
 * and reports what it holds. Contained means killed by the memory limit (the cgroup, where there
 * is one) or still under the limit because the kernel or our filter refused the rest. */
static void
expect_contained(const char *name, uint64_t mem_mib, uint32_t nofile, uint64_t ask_mib)
{
    grpo_sandbox_result r;
    grpo_sandbox_limits l;
    char arg[32];
    long held = -1;
    limits(&l);
    l.mem_bytes = mem_mib << 20;
    l.nofile = nofile;
    l.wall_ms = l.cpu_ms = 20000;
    snprintf(arg, sizeof arg, "%llu", (unsigned long long)ask_mib);
    run_with(name, arg, &l, 0, &r);
    const char *h = strstr(r.out, "held_kib=");
    if (h)
        held = atol(h + 9);
    fprintf(stderr, "    %s", r.out);
    if (r.status == GRPO_SANDBOX_MEMORY) {
        /* killed at the limit */
    } else if (r.status != GRPO_SANDBOX_EXITED || held < 0 || held >= (long)(mem_mib << 10)) {
        fail_msg("%s: status %s, holds %ld KiB under a %llu MiB limit (out: %s)", name,
                 grpo_sandbox_status_name(r.status), held, (unsigned long long)mem_mib, r.out);
    }
    grpo_sandbox_result_fini(&r);
}

static void
t_memory_outside_as(void **s)
{
    (void)s;
    need_dangerous();
    expect_contained("hold_memfd", 128, NOFILE, 512);     /* NOFILE x FSIZE before: 232 MiB */
    expect_contained("hold_sysv", 128, NOFILE, 512);      /* killed (SIGSYS) before */
    expect_contained("hold_posix_shm", 128, NOFILE, 512); /* no /dev/shm in the sandbox */
    expect_contained("hold_tmpfs", 32, NOFILE, 128);      /* /tmp was 64 MiB whatever the limit */
    expect_contained("hold_pipes", 48, 1024, 256);        /* 1 MiB pipes up to pipe-user-pages */
}

/* Several processes, each under RLIMIT_AS, hold more together than the limit: only a memory
 * cgroup sees the whole tree. */
static void
t_memory_many_processes(void **s)
{
    (void)s;
    need_dangerous();
    if (!(grpo_sandbox_isolation(sb) & GRPO_SANDBOX_ISO_MEMCG)) {
        fprintf(stderr, "skipped: no memory cgroup on this host (docs/sandbox.md)\n");
        skip();
    }
    expect_contained("hold_forks", AS_LIMIT >> 20, NOFILE, 4 * (AS_LIMIT >> 20));
}

static void
t_kill_all(void **s)
{
    (void)s;
    need_dangerous();
    expect_out("kill_all", "", "alive");
}

static void
t_spin(void **s)
{
    (void)s;
    expect("spin", "", GRPO_SANDBOX_TIMEOUT);
}
static void
t_sleep(void **s)
{
    (void)s;
    expect("sleep", "", GRPO_SANDBOX_TIMEOUT);
}
static void
t_flood(void **s)
{
    (void)s;
    expect("flood", "", GRPO_SANDBOX_OUTPUT);
}

static void
t_fds(void **s)
{
    (void)s;
    grpo_sandbox_result r;
    run("fds", "", &r);
    assert_int_equal(r.status, GRPO_SANDBOX_EXITED);
    int n = -1;
    assert_int_equal(sscanf(r.out, "opened=%d", &n), 1);
    assert_true(n >= 0 && n <= NOFILE - 3);
    grpo_sandbox_result_fini(&r);
}

static void
t_net(void **s)
{
    (void)s;
    expect_out("connect_tcp", port_s, "socket=-1 errno=13");
    expect_out("connect_tcp", port_s, "socket6=-1 errno=13");
    expect_out("connect_tcp", port_s, "netlink=-1 errno=13");
    expect_out("bind_tcp", port_s, "socket=-1 errno=13");
    expect_out("connect_unix", unix_name, "connect=-1");
}

static void
t_read_host(void **s)
{
    (void)s;
    grpo_sandbox_result r;
    run("read_host", canary, &r);
    assert_int_equal(r.status, GRPO_SANDBOX_EXITED);
    assert_null(strstr(r.out, canary_text));
    assert_null(strstr(r.out, "root:"));
    assert_false(read_something(r.out));
    grpo_sandbox_result_fini(&r);
}

static void
t_env(void **s)
{
    (void)s;
    grpo_sandbox_result r;
    run("env", "", &r);
    assert_int_equal(r.status, GRPO_SANDBOX_EXITED);
    assert_null(strstr(r.out, secret));
    assert_null(strstr(r.out, "GRPO_"));
    assert_non_null(strstr(r.out, "PATH="));
    grpo_sandbox_result_fini(&r);
}

static void
t_write_outside(void **s)
{
    (void)s;
    expect_out("write_out", escape_host, "written=2"); /* escape_host (private /tmp) + inside_ok */
}

static void
t_seccomp(void **s)
{
    (void)s;
    const char *names[] = {
        "ptrace", "ptrace_attach", "setuid",      "chroot", "unshare",  "clone_ns",
        "mount",  "setns",         "bpf",         "reboot", "io_uring", "vm_readv",
        "perf",   "keyctl",        "sethostname", "x32",    NULL};
    for (int i = 0; names[i]; i++)
        expect(names[i], "", GRPO_SANDBOX_SECCOMP);
}

static void
t_clone3(void **s)
{
    (void)s;
    expect_out("clone3", "", "clone3=-1 errno=38");
}

static void
t_kill_parent(void **s)
{
    (void)s;
    expect_out("kill_parent", "", "alive");
    expect_out("kill_group", "", "alive");
}

static void
t_proc(void **s)
{
    (void)s;
    grpo_sandbox_result r;
    grpo_sandbox_limits l;
    expect_out("proc", "", "pids=0");
    limits(&l);
    run_with("proc", "", &l, 1, &r); /* with a /proc of its own: itself (+ our init at most) */
    assert_int_equal(r.status, GRPO_SANDBOX_EXITED);
    int pids = -1;
    assert_int_equal(sscanf(r.out, "pids=%d", &pids), 1);
    assert_true(pids >= 1 && pids <= 2);
    grpo_sandbox_result_fini(&r);
}

static void
t_links(void **s)
{
    (void)s;
    grpo_sandbox_result r;
    run("symlink", canary, &r);
    assert_int_equal(r.status, GRPO_SANDBOX_EXITED);
    assert_null(strstr(r.out, canary_text));
    assert_false(read_something(r.out));
    grpo_sandbox_result_fini(&r);
    expect_out("hardlink", "", "link_bin=-1 errno=18");
    expect_out("hardlink", "", "link_cache=-1 errno=18");
}

static void
t_core_and_signals(void **s)
{
    (void)s;
    grpo_sandbox_result r;
    run("core", "", &r);
    assert_int_equal(r.status, GRPO_SANDBOX_SIGNALED);
    assert_int_equal(r.signal, SIGABRT);
    assert_non_null(strstr(r.out, "raise_core=-1"));
    grpo_sandbox_result_fini(&r);
    run("segv", "", &r);
    assert_int_equal(r.status, GRPO_SANDBOX_SIGNALED);
    assert_int_equal(r.signal, SIGSEGV);
    grpo_sandbox_result_fini(&r);
    run("selfkill", "", &r);
    assert_int_equal(r.status, GRPO_SANDBOX_SIGNALED);
    assert_int_equal(r.signal, SIGKILL);
    grpo_sandbox_result_fini(&r);
}

static void
t_big_argv(void **s)
{
    (void)s;
    expect_out("bigargv", "", "execve=-1 errno=7");
}
static void
t_big_file(void **s)
{
    (void)s;
    expect("bigfile", "", GRPO_SANDBOX_OUTPUT);
}
static void
t_daemon(void **s)
{
    (void)s;
    expect_out("daemon", "", "parent exits");
}

int
main(int argc, char **argv)
{
    if (argc < 2 || realpath(argv[1], attack_bin) == NULL) {
        fprintf(stderr, "usage: sandbox_attack_test PATH-TO-attacks-BINARY\n");
        return 2;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_spin),
        cmocka_unit_test(t_sleep),
        cmocka_unit_test(t_flood),
        cmocka_unit_test(t_fds),
        cmocka_unit_test(t_net),
        cmocka_unit_test(t_read_host),
        cmocka_unit_test(t_env),
        cmocka_unit_test(t_write_outside),
        cmocka_unit_test(t_seccomp),
        cmocka_unit_test(t_clone3),
        cmocka_unit_test(t_kill_parent),
        cmocka_unit_test(t_proc),
        cmocka_unit_test(t_links),
        cmocka_unit_test(t_core_and_signals),
        cmocka_unit_test(t_big_argv),
        cmocka_unit_test(t_big_file),
        cmocka_unit_test(t_daemon),
        cmocka_unit_test(t_fork_bomb),
        cmocka_unit_test(t_nproc),
        cmocka_unit_test(t_thread_bomb),
        cmocka_unit_test(t_memory_bomb),
        cmocka_unit_test(t_kill_all),
        cmocka_unit_test(t_memory_outside_as),
        cmocka_unit_test(t_memory_many_processes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
