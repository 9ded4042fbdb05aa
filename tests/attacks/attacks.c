/* Attack programs for tests/sandbox_attack_test.c: one multi-call binary, `attacks NAME [ARG]`.
 * Each does one hostile thing a model-written program might do. Built without sanitizers (see
 * tests/sandbox.cmake): it runs under RLIMIT_AS inside the sandbox. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/shm.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

extern char **environ;

static int
report(const char *what, long rc)
{
    printf("%s=%ld errno=%d\n", what, rc, rc < 0 ? errno : 0);
    fflush(stdout);
    return 0;
}

static void *
sleeper(void *arg)
{
    (void)arg;
    for (;;)
        pause();
    return NULL;
}

static int
try_write(const char *path)
{
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd >= 0) {
        if (write(fd, "escaped\n", 8) < 0) {
        }
        close(fd);
        printf("wrote %s\n", path);
        return 1;
    }
    printf("denied %s errno=%d\n", path, errno);
    return 0;
}

static void
dump_file(const char *path)
{
    char buf[256];
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        printf("noread %s errno=%d\n", path, errno);
        return;
    }
    ssize_t k = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[k > 0 ? k : 0] = '\0';
    printf("read %s: %s\n", path, buf);
}

/* Memory held outside the address space: each hold_* tries to keep `mib` MiB and returns how many
 * it holds. Blocks of 1 MiB; a failed step is reported with its errno and ends the attempt. */
static char mib_block[1 << 20];

static int
write_mib(int fd, int n)
{
    for (int i = 0; i < n; i++)
        if (write(fd, mib_block, sizeof mib_block) != (ssize_t)sizeof mib_block)
            return i;
    return n;
}

static int
hold_memfd(int mib)
{
    int held = 0;
    signal(SIGXFSZ, SIG_IGN); /* RLIMIT_FSIZE caps each memfd: open the next one */
    while (held < mib) {
        int fd = (int)syscall(SYS_memfd_create, "hold", 0);
        if (fd < 0) {
            report("memfd_create", -1);
            break;
        }
        int k = write_mib(fd, mib - held);
        held += k;
        if (k == 0) {
            report("write", -1);
            break;
        }
    }
    return held;
}

static int
hold_sysv(int mib)
{
    int held = 0;
    while (held < mib) {
        int id = shmget(IPC_PRIVATE, 8 << 20, IPC_CREAT | 0600);
        if (id < 0) {
            report("shmget", -1);
            break;
        }
        char *p = shmat(id, NULL, 0);
        if (p == (void *)-1) {
            report("shmat", -1);
            break;
        }
        memset(p, 1, 8 << 20); /* the pages stay with the segment after shmdt */
        shmdt(p);
        held += 8;
    }
    return held;
}

static int
hold_posix_shm(int mib)
{
    int held = 0;
    for (int i = 0; held < mib; i++) {
        char name[32];
        snprintf(name, sizeof name, "/hold-%d", i);
        int fd = shm_open(name, O_CREAT | O_RDWR, 0600);
        if (fd < 0) {
            report("shm_open", -1);
            break;
        }
        int k = write_mib(fd, 8);
        held += k;
        close(fd);
        if (k < 8) {
            report("write", -1);
            break;
        }
    }
    return held;
}

static int
hold_tmpfs(int mib)
{
    int held = 0;
    signal(SIGXFSZ, SIG_IGN);
    for (int i = 0; held < mib; i++) {
        char name[32];
        snprintf(name, sizeof name, "/tmp/hold-%d", i);
        int fd = open(name, O_CREAT | O_WRONLY, 0600);
        if (fd < 0) {
            report("open", -1);
            break;
        }
        int k = write_mib(fd, 4);
        held += k;
        close(fd);
        if (k < 4) {
            report("write", -1);
            break;
        }
    }
    return held;
}

/* Pipes grown to 1 MiB where allowed and filled; returns KiB held. */
static long
hold_pipes_kib(long kib)
{
    long held = 0;
    int grow_failed = 0;
    while (held < kib) {
        int p[2];
        if (pipe(p) != 0) {
            report("pipe", -1);
            break;
        }
        if (fcntl(p[1], F_SETPIPE_SZ, 1 << 20) < 0 && !grow_failed++)
            report("setpipe_sz", -1);
        fcntl(p[1], F_SETFL, O_NONBLOCK);
        for (;;) {
            ssize_t k = write(p[1], mib_block, 4096);
            if (k <= 0)
                break;
            held += k / 1024;
        }
    }
    return held;
}

/* Children that each touch `each` MiB of their own address space and wait: the tree holds
 * n * each although every process is under RLIMIT_AS. */
static int
hold_forks(int n, int each)
{
    int ready[2], held = 0;
    if (pipe(ready) != 0)
        return 0;
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            char *p = malloc((size_t)each << 20);
            if (p)
                memset(p, 1, (size_t)each << 20);
            if (write(ready[1], p ? "y" : "n", 1) != 1)
                _exit(1);
            for (;;)
                pause();
        }
        if (pid < 0) {
            report("fork", -1);
            break;
        }
    }
    for (int i = 0; i < n; i++) {
        char c;
        struct pollfd pf = {ready[0], POLLIN, 0};
        if (poll(&pf, 1, 3000) != 1 || read(ready[0], &c, 1) != 1)
            break; /* a child was killed */
        if (c == 'y')
            held += each;
    }
    return held;
}

static int
hold(const char *how, const char *arg)
{
    int mib = atoi(arg);
    long held_kib;
    if (!strcmp(how, "hold_memfd"))
        held_kib = 1024L * hold_memfd(mib);
    else if (!strcmp(how, "hold_sysv"))
        held_kib = 1024L * hold_sysv(mib);
    else if (!strcmp(how, "hold_posix_shm"))
        held_kib = 1024L * hold_posix_shm(mib);
    else if (!strcmp(how, "hold_tmpfs"))
        held_kib = 1024L * hold_tmpfs(mib);
    else if (!strcmp(how, "hold_pipes"))
        held_kib = hold_pipes_kib(1024L * mib);
    else
        held_kib = 1024L * hold_forks(8, mib / 8);
    printf("held_kib=%ld\n", held_kib);
    return 0;
}

int
main(int argc, char **argv)
{
    const char *a = argc > 1 ? argv[1] : "";
    const char *arg = argc > 2 ? argv[2] : "";
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!strcmp(a, "limits")) { /* the test's pre-flight check of what is in force */
        struct rlimit r;
        printf("pid=%d ppid=%d uid=%d\n", (int)getpid(), (int)getppid(), (int)getuid());
        getrlimit(RLIMIT_NPROC, &r);
        printf("nproc=%llu\n", (unsigned long long)r.rlim_cur);
        getrlimit(RLIMIT_AS, &r);
        printf("as=%llu\n", (unsigned long long)r.rlim_cur);
        getrlimit(RLIMIT_CORE, &r);
        printf("core=%llu\n", (unsigned long long)r.rlim_cur);
        return 0;
    }
    if (!strcmp(a, "forkbomb")) {
        for (;;)
            fork();
    }
    if (!strcmp(a, "forkcount")) { /* how many processes RLIMIT_NPROC lets us have */
        int n = 0;
        for (;;) {
            pid_t p = fork();
            if (p == 0) {
                pause();
                _exit(0);
            }
            if (p < 0)
                break;
            n++;
        }
        printf("forked=%d errno=%d\n", n, errno);
        return 0;
    }
    if (!strcmp(a, "threadcount")) {
        int n = 0;
        pthread_t t;
        while (pthread_create(&t, NULL, sleeper, NULL) == 0)
            n++;
        printf("threads=%d\n", n);
        return 0;
    }
    if (!strcmp(a, "threadbomb")) {
        for (;;) {
            pthread_t t;
            pthread_create(&t, NULL, sleeper, NULL);
        }
    }
    if (!strcmp(a, "membomb")) {
        for (;;) {
            char *p = malloc(1 << 20);
            memset(p, 1, 1 << 20); /* NULL once the limit is hit: a crash near the limit */
        }
    }
    if (!strncmp(a, "hold_", 5))
        return hold(a, arg);
    if (!strcmp(a, "spin")) {
        volatile uint64_t x = 0;
        for (;;)
            x++;
    }
    if (!strcmp(a, "sleep")) {
        for (;;)
            sleep(1000);
    }
    if (!strcmp(a, "flood")) {
        static char buf[65536];
        memset(buf, 'x', sizeof buf);
        for (;;)
            if (write(1, buf, sizeof buf) < 0 && errno != EINTR)
                return 3;
    }
    if (!strcmp(a, "fds")) {
        int n = 0;
        while (open("/dev/null", O_RDONLY) >= 0)
            n++;
        printf("opened=%d errno=%d\n", n, errno);
        return 0;
    }
    if (!strcmp(a, "connect_tcp")) {
        struct sockaddr_in sa = {0};
        sa.sin_family = AF_INET;
        sa.sin_port = htons((uint16_t)atoi(arg));
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        report("socket", fd);
        if (fd >= 0)
            report("connect", connect(fd, (struct sockaddr *)&sa, sizeof sa));
        int fd6 = socket(AF_INET6, SOCK_STREAM, 0);
        report("socket6", fd6);
        int raw = socket(AF_PACKET, SOCK_RAW, 0);
        report("packet", raw);
        int nl = socket(AF_NETLINK, SOCK_RAW, 0);
        report("netlink", nl);
        return 0;
    }
    if (!strcmp(a, "bind_tcp")) {
        struct sockaddr_in sa = {0};
        sa.sin_family = AF_INET;
        sa.sin_port = htons((uint16_t)atoi(arg));
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        report("socket", fd);
        if (fd >= 0) {
            report("bind", bind(fd, (struct sockaddr *)&sa, sizeof sa));
            report("listen", listen(fd, 1));
        }
        return 0;
    }
    if (!strcmp(a, "connect_unix")) { /* abstract sockets live in the network namespace */
        struct sockaddr_un su = {0};
        su.sun_family = AF_UNIX;
        su.sun_path[0] = '\0';
        snprintf(su.sun_path + 1, sizeof su.sun_path - 1, "%s", arg);
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        report("socket", fd);
        report("connect",
               connect(fd, (struct sockaddr *)&su,
                       (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(arg))));
        return 0;
    }
    if (!strcmp(a, "read_host")) {
        dump_file(arg);
        dump_file("/etc/shadow");
        dump_file("/etc/passwd");
        dump_file("/root/.bash_history");
        dump_file("/proc/1/environ");
        dump_file("/sys/kernel/hostname");
        return 0;
    }
    if (!strcmp(a, "env")) {
        for (char **e = environ; *e; e++)
            printf("%s\n", *e);
        return 0;
    }
    if (!strcmp(a, "write_out")) {
        int n = 0;
        n += try_write("/usr/grpo_escape");
        n += try_write("/etc/grpo_escape");
        n += try_write("/grpo_escape");
        n += try_write("/work/grpo_escape");
        n += try_write("/dev/grpo_escape");
        n += try_write(arg); /* a host path: resolves inside the sandbox's private /tmp */
        n += try_write("/tmp/inside_ok");
        printf("written=%d\n", n);
        return 0;
    }
    if (!strcmp(a, "ptrace"))
        return report("ptrace", ptrace(PTRACE_TRACEME, 0, 0, 0));
    if (!strcmp(a, "ptrace_attach"))
        return report("attach", ptrace(PTRACE_ATTACH, getppid(), 0, 0));
    if (!strcmp(a, "kill_parent")) {
        report("kill_ppid", kill(getppid(), SIGKILL));
        report("kill_1", kill(1, SIGKILL));
        printf("alive\n");
        return 0;
    }
    if (!strcmp(a, "kill_all")) {
        report("kill_all", kill(-1, SIGKILL));
        printf("alive\n");
        return 0;
    }
    if (!strcmp(a, "kill_group")) {
        signal(SIGTERM, SIG_IGN);
        report("kill_pg", kill(0, SIGTERM));
        printf("alive\n");
        return 0;
    }
    if (!strcmp(a, "setuid"))
        return report("setuid", setuid(0));
    if (!strcmp(a, "chroot"))
        return report("chroot", chroot("/tmp"));
    if (!strcmp(a, "unshare"))
        return report("unshare", unshare(CLONE_NEWUSER));
    if (!strcmp(a, "clone_ns"))
        return report("clone", syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0));
    if (!strcmp(a, "clone3")) {
        struct clone_args ca = {0};
        ca.flags = CLONE_NEWUSER;
        ca.exit_signal = SIGCHLD;
        long rc = syscall(SYS_clone3, &ca, sizeof ca);
        if (rc == 0)
            _exit(0);
        return report("clone3", rc);
    }
    if (!strcmp(a, "mount"))
        return report("mount", mount("none", "/tmp", "tmpfs", 0, NULL));
    if (!strcmp(a, "setns"))
        return report("setns", syscall(SYS_setns, 0, 0));
    if (!strcmp(a, "bpf"))
        return report("bpf", syscall(SYS_bpf, 0, NULL, 0));
    if (!strcmp(a, "reboot"))
        return report("reboot", syscall(SYS_reboot, 0, 0, 0, NULL));
    if (!strcmp(a, "io_uring"))
        return report("io_uring", syscall(SYS_io_uring_setup, 1, NULL));
    if (!strcmp(a, "vm_readv")) {
        char buf[16];
        struct iovec l = {buf, sizeof buf}, r = {buf, sizeof buf};
        return report("vm_readv", syscall(SYS_process_vm_readv, 1, &l, 1, &r, 1, 0));
    }
    if (!strcmp(a, "perf"))
        return report("perf", syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0));
    if (!strcmp(a, "keyctl"))
        return report("keyctl", syscall(SYS_keyctl, 0, 0, 0, 0, 0));
    if (!strcmp(a, "x32")) /* the x32 ABI's numbers for the same calls: must not slip past */
        return report("x32_unshare", syscall(0x40000000 | SYS_unshare, CLONE_NEWUSER));
    if (!strcmp(a, "sethostname"))
        return report("sethostname", sethostname("pwned", 5));
    if (!strcmp(a, "proc")) {
        DIR *d = opendir("/proc");
        int n = 0;
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL)
            if (e->d_name[0] >= '0' && e->d_name[0] <= '9')
                n++;
        if (d)
            closedir(d);
        printf("pids=%d\n", n);
        dump_file("/proc/1/cmdline");
        dump_file("/proc/self/mountinfo");
        return 0;
    }
    if (!strcmp(a, "symlink")) {
        report("symlink", symlink(arg, "/tmp/l"));
        dump_file("/tmp/l");
        report("symlink2", symlink("/proc/1/root/etc/shadow", "/tmp/l2"));
        dump_file("/tmp/l2");
        return 0;
    }
    if (!strcmp(a, "hardlink")) {
        report("link_bin", link("/usr/bin/env", "/tmp/h"));
        report("link_cache", link("/etc/ld.so.cache", "/tmp/h2"));
        int fd = open("/tmp/h", O_WRONLY);
        report("open_w", fd);
        return 0;
    }
    if (!strcmp(a, "core")) {
        struct rlimit r = {RLIM_INFINITY, RLIM_INFINITY};
        report("raise_core", setrlimit(RLIMIT_CORE, &r));
        abort();
    }
    if (!strcmp(a, "segv"))
        return raise(SIGSEGV);
    if (!strcmp(a, "selfkill"))
        return kill(getpid(), SIGKILL);
    if (!strcmp(a, "bigargv")) {
        size_t n = 200000;
        char **v = calloc(n + 2, sizeof(char *));
        char *s = malloc(1000);
        memset(s, 'a', 999);
        s[999] = '\0';
        v[0] = "/usr/bin/true";
        for (size_t i = 1; i <= n; i++)
            v[i] = s;
        report("execve", execve(v[0], v, environ));
        return 0;
    }
    if (!strcmp(a, "bigfile")) {
        static char buf[1 << 20];
        int fd = open("/tmp/big", O_CREAT | O_WRONLY, 0644);
        for (int i = 0; i < 1024; i++)
            if (write(fd, buf, sizeof buf) < 0) {
                report("write", -1);
                return 0;
            }
        return 0;
    }
    if (!strcmp(a, "daemon")) { /* leaves a child behind in a new session */
        if (fork() == 0) {
            setsid();
            if (fork() == 0)
                for (;;)
                    pause();
            _exit(0);
        }
        printf("parent exits\n");
        return 0;
    }
    fprintf(stderr, "unknown attack %s\n", a);
    return 2;
}
