/* `grpo bench sandbox`: sandboxed runs per second and spawn-to-exit latency (p50/p99) for a
 * trivial Python test and a trivial C program, through grpo's sandbox (the pre-warmed Python pool,
 * and a fresh sandbox per run), through bubblewrap running the same programs with comparable
 * isolation, and unsandboxed as the floor. Runs are sequential: latency, not throughput of many
 * cores. */
#include "cli/cli.h"
#include "grpo/sandbox.h"
#include "grpo/verify.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

typedef struct series {
    const char *name;
    double *ms;
    int n, failed;
    double total_s;
} series;

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void
report(const series *s)
{
    if (s->n == 0) {
        printf("| %-44s | %6s | %8s | %8s | %8s |\n", s->name, "-", "-", "-", "-");
        return;
    }
    qsort(s->ms, (size_t)s->n, sizeof(double), cmp_double);
    int i99 = (int)(0.99 * (s->n - 1) + 0.5);
    printf("| %-44s | %6d | %8.1f | %8.2f | %8.2f |%s\n", s->name, s->n, s->n / s->total_s,
           s->ms[s->n / 2], s->ms[i99], s->failed ? " (some runs failed)" : "");
}

/* fork+exec+wait of argv with stdout/stderr to /dev/null; returns the exit status. */
static int
spawn_wait(char *const *argv)
{
    pid_t pid;
    int st = -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        return -1;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    return st;
}

static void
bench_spawn(series *s, char *const *argv, int runs)
{
    double t0 = grpo_now();
    for (int i = 0; i < runs; i++) {
        double a = grpo_now();
        int st = spawn_wait(argv);
        s->ms[s->n++] = (grpo_now() - a) * 1000.0;
        if (st != 0)
            s->failed++;
    }
    s->total_s = grpo_now() - t0;
}

static void
bench_sandbox_run(series *s, grpo_sandbox *sb, const grpo_sandbox_cmd *cmd, int runs)
{
    double t0 = grpo_now();
    for (int i = 0; i < runs; i++) {
        grpo_sandbox_result r;
        double a = grpo_now();
        if (grpo_sandbox_run(sb, cmd, &r) != GRPO_OK) {
            s->failed++;
            continue;
        }
        s->ms[s->n++] = (grpo_now() - a) * 1000.0;
        if (r.status != GRPO_SANDBOX_EXITED || r.exit_code != 0)
            s->failed++;
        grpo_sandbox_result_fini(&r);
    }
    s->total_s = grpo_now() - t0;
}

static void
bench_pool(series *s, grpo_sandbox_pool *pool, int runs)
{
    grpo_sandbox_limits l;
    grpo_sandbox_limits_default(&l);
    l.mem_bytes = 256ull << 20;
    double t0 = grpo_now();
    for (int i = 0; i < runs; i++) {
        grpo_sandbox_result r;
        double a = grpo_now();
        if (grpo_sandbox_pool_call(pool, "run", "\"print(int(input()) + 1)\"", "41\n", 3, &l, &r,
                                   NULL) != GRPO_OK) {
            s->failed++;
            continue;
        }
        s->ms[s->n++] = (grpo_now() - a) * 1000.0;
        if (r.status != GRPO_SANDBOX_EXITED || strcmp(r.out, "42\n") != 0)
            s->failed++;
        grpo_sandbox_result_fini(&r);
    }
    s->total_s = grpo_now() - t0;
}

/* A trivial C program, compiled once into dir/prog. */
static int
build_c(const char *dir, char *prog, size_t n)
{
    char src[600];
    snprintf(src, sizeof src, "%s/prog.c", dir);
    snprintf(prog, n, "%s/prog", dir);
    FILE *f = fopen(src, "w");
    if (f == NULL)
        return -1;
    fputs("#include <stdio.h>\nint main(void){int x=0;if(scanf(\"%d\",&x)!=1)x=41;"
          "printf(\"%d\\n\",x+1);return 0;}\n",
          f);
    fclose(f);
    char *argv[] = {"/usr/bin/gcc", "-O2", "-o", prog, src, NULL};
    return spawn_wait(argv) == 0 ? 0 : -1;
}

static void
usage(void)
{
    printf("usage: grpo bench sandbox [--runs N]\n"
           "\n"
           "Sandboxed runs per second and spawn-to-exit latency (p50, p99) of a trivial Python\n"
           "test and a trivial C program: grpo's pre-warmed Python pool, grpo's sandbox with a\n"
           "fresh namespace set per run, bubblewrap (bwrap) with comparable isolation, and no\n"
           "sandbox at all. Runs are sequential.\n"
           "\n"
           "  --runs N   runs per row (default 200)\n"
           "  -h, --help this help\n");
}

enum {
    ROW_POOL,
    ROW_PY_GRPO,
    ROW_PY_BWRAP,
    ROW_PY_PLAIN,
    ROW_C_GRPO,
    ROW_C_BWRAP,
    ROW_C_PLAIN,
    NROWS
};

static const char *const ROW_NAMES[NROWS] = {"python: grpo pool (pre-warmed zygote)",
                                             "python: grpo sandbox, python3 per run",
                                             "python: bwrap, python3 per run",
                                             "python: no sandbox, python3 per run",
                                             "C: grpo sandbox",
                                             "C: bwrap",
                                             "C: no sandbox"};

/* grpo's pool, and grpo's sandbox running python3 and the C program (bound at /work). */
static void
bench_grpo(series *rows, grpo_sandbox *sb, grpo_sandbox_pool *pool, const char *py, const char *dir,
           int runs)
{
    const char *py_argv[] = {py, "-I", "-S", "-c", "print(int(input()) + 1)", NULL};
    const char *c_argv[] = {"/work/prog", NULL};
    grpo_sandbox_bind bind = {dir, "/work", 0};
    grpo_sandbox_cmd cmd;
    memset(&cmd, 0, sizeof cmd);
    grpo_sandbox_limits_default(&cmd.limits);
    cmd.limits.mem_bytes = 256ull << 20;
    cmd.stdin_data = "41\n";
    cmd.stdin_len = 3;
    bench_pool(&rows[ROW_POOL], pool, runs);
    cmd.argv = py_argv;
    bench_sandbox_run(&rows[ROW_PY_GRPO], sb, &cmd, runs);
    cmd.argv = c_argv;
    cmd.binds = &bind;
    cmd.n_binds = 1;
    bench_sandbox_run(&rows[ROW_C_GRPO], sb, &cmd, runs);
}

/* bubblewrap: new user/pid/net/ipc/uts/cgroup namespaces, read-only /usr, tmpfs /tmp; returns
 * false when bwrap is not installed. */
static bool
bench_bwrap(series *rows, const char *py, const char *dir, int runs)
{
    if (access("/usr/bin/bwrap", X_OK) != 0)
        return false;
    char *bw[] = {"/usr/bin/bwrap",
                  "--unshare-all",
                  "--die-with-parent",
                  "--new-session",
                  "--ro-bind",
                  "/usr",
                  "/usr",
                  "--symlink",
                  "usr/lib",
                  "/lib",
                  "--symlink",
                  "usr/lib64",
                  "/lib64",
                  "--symlink",
                  "usr/bin",
                  "/bin",
                  "--dev",
                  "/dev",
                  "--tmpfs",
                  "/tmp",
                  "--ro-bind",
                  (char *)dir,
                  "/work",
                  "--chdir",
                  "/tmp"};
    enum { NB = sizeof bw / sizeof bw[0] };
    char *bw_py[NB + 6], *bw_c[NB + 2];
    char *py_tail[] = {(char *)py, "-I", "-S", "-c", "print(41 + 1)", NULL};
    char *c_tail[] = {"/work/prog", NULL};
    memcpy(bw_py, bw, sizeof bw);
    memcpy(bw_py + NB, py_tail, sizeof py_tail);
    memcpy(bw_c, bw, sizeof bw);
    memcpy(bw_c + NB, c_tail, sizeof c_tail);
    bench_spawn(&rows[ROW_PY_BWRAP], bw_py, runs);
    bench_spawn(&rows[ROW_C_BWRAP], bw_c, runs);
    return true;
}

static void
print_table(series *rows, grpo_sandbox *sb, bool have_bwrap, int runs, const char *py)
{
    char isobuf[128];
    printf("sandbox isolation in force: %s; bwrap: %s; runs per row: %d; python: %s\n\n",
           grpo_sandbox_iso_str(grpo_sandbox_isolation(sb), isobuf, sizeof isobuf),
           have_bwrap ? "yes" : "not installed", runs, py);
    printf("| %-44s | %6s | %8s | %8s | %8s |\n", "what", "runs", "runs/s", "p50 ms", "p99 ms");
    printf("|%s|%s|%s|%s|%s|\n", "----------------------------------------------", "--------",
           "----------", "----------", "----------");
    for (int i = 0; i < NROWS; i++)
        report(&rows[i]);
}

static int
parse_runs(int argc, char **argv, int *runs)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
            *runs = atoi(argv[++i]);
            if (*runs < 1 || *runs > 100000)
                return cli_usage("bench sandbox", "--runs: expected 1..100000, got %s", argv[i]);
        } else {
            return cli_usage("bench sandbox", "unknown argument %s", argv[i]);
        }
    }
    return 0;
}

int
grpo_bench_sandbox(int argc, char **argv)
{
    int runs = 200, rc = CLI_FAIL;
    char dir[] = "/tmp/grpo-bench-sandbox-XXXXXX", prog[600] = "", src[640];
    if (cli_wants_help(argc, argv)) {
        usage();
        return CLI_OK;
    }
    if ((rc = parse_runs(argc, argv, &runs)) != 0)
        return rc;
    rc = CLI_FAIL;
    grpo_sandbox_service_start();
    if (mkdtemp(dir) == NULL || build_c(dir, prog, sizeof prog) != 0) {
        fprintf(stderr, "grpo bench sandbox: cannot build the C test program in %s\n", dir);
        return CLI_FAIL;
    }
    chmod(dir, 0755);
    const char *py = grpo_sandbox_python();
    grpo_sandbox *sb = NULL;
    grpo_sandbox_pool *pool = NULL;
    series rows[NROWS] = {{0}};
    for (int i = 0; i < NROWS; i++)
        rows[i].name = ROW_NAMES[i];
    if (grpo_sandbox_create(&sb, NULL) != GRPO_OK ||
        grpo_sandbox_pool_create(
            &pool, NULL,
            "def run(code):\n"
            "    exec(compile(code, '<t>', 'exec'), {'__name__': '__main__'})\n") != GRPO_OK) {
        rc = cli_fail("bench sandbox");
        goto done;
    }
    for (int i = 0; i < NROWS; i++)
        if ((rows[i].ms = calloc((size_t)runs, sizeof(double))) == NULL)
            goto done;
    bench_grpo(rows, sb, pool, py, dir, runs);
    bool have_bwrap = bench_bwrap(rows, py, dir, runs);
    char *plain_py[] = {(char *)py, "-I", "-S", "-c", "print(41 + 1)", NULL};
    bench_spawn(&rows[ROW_PY_PLAIN], plain_py, runs);
    char *plain_c[] = {prog, NULL};
    bench_spawn(&rows[ROW_C_PLAIN], plain_c, runs);
    print_table(rows, sb, have_bwrap, runs, py);
    rc = CLI_OK;
done:
    for (int i = 0; i < NROWS; i++)
        free(rows[i].ms);
    grpo_sandbox_pool_destroy(pool);
    grpo_sandbox_destroy(sb);
    unlink(prog);
    snprintf(src, sizeof src, "%s/prog.c", dir);
    unlink(src);
    rmdir(dir);
    return rc;
}
