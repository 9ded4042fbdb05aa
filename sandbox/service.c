/* The sandbox service: a small helper process forked before CUDA or threads exist (DESIGN.md,
 * fork safety). It only forks workers: a client sends it one end of a fresh socket pair and the
 * service forks a worker that serves that socket. Without a service, workers are forked directly
 * by the caller (fine for programs that never touch CUDA: tests, `grpo verify`). */
#include "sandbox/sandbox_int.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static pthread_mutex_t svc_mu = PTHREAD_MUTEX_INITIALIZER;
static int svc_fd = -1;
static pid_t svc_pid = -1;

/* A new worker process starts here with its socket; everything else inherited is closed. */
static void __attribute__((noreturn)) worker_entry(int sock)
{
    if (sock != 3) {
        if (dup2(sock, 3) < 0)
            _exit(127);
        sock = 3;
    }
    syscall(SYS_close_range, 4, ~0u, 0);
    sbx_worker_main(sock);
}

static void __attribute__((noreturn)) service_main(int ctl)
{
    signal(SIGPIPE, SIG_IGN);
    sbx_probe_here();         /* once: every worker inherits the answer */
    signal(SIGCHLD, SIG_IGN); /* workers are reaped by the kernel */
    for (;;) {
        uint32_t op;
        char *p;
        size_t n;
        int fd;
        if (sbx_recv(ctl, &op, &p, &n, &fd) != GRPO_OK)
            _exit(0);
        free(p);
        if (fd < 0)
            continue;
        pid_t pid = fork();
        if (pid == 0) {
            close(ctl);
            signal(SIGCHLD, SIG_DFL);
            worker_entry(fd);
        }
        close(fd);
    }
}

grpo_err
grpo_sandbox_service_start(void)
{
    int sv[2];
    grpo_err err = GRPO_OK;
    pthread_mutex_lock(&svc_mu);
    if (svc_fd >= 0)
        goto done;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        err = grpo__fail_errno(GRPO_ESYS, errno, "sandbox: service socketpair");
        goto done;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
        if (getppid() != parent)
            _exit(0);
        if (dup2(sv[1], 3) < 0)
            _exit(127);
        syscall(SYS_close_range, 4, ~0u, 0);
        service_main(3);
    }
    close(sv[1]);
    if (pid < 0) {
        close(sv[0]);
        err = grpo__fail_errno(GRPO_ESYS, errno, "sandbox: fork of the service");
        goto done;
    }
    svc_fd = sv[0];
    svc_pid = pid;
done:
    pthread_mutex_unlock(&svc_mu);
    return err;
}

void
grpo_sandbox_service_stop(void)
{
    pthread_mutex_lock(&svc_mu);
    if (svc_fd >= 0) {
        close(svc_fd); /* the service exits on EOF; its workers keep serving their clients */
        int st;
        while (waitpid(svc_pid, &st, 0) < 0 && errno == EINTR) {
        }
    }
    svc_fd = -1;
    svc_pid = -1;
    pthread_mutex_unlock(&svc_mu);
}

grpo_err
sbx_service_new_worker(int *sock_out, pid_t *pid_out)
{
    int sp[2];
    grpo_err err = GRPO_OK;
    *sock_out = -1;
    *pid_out = -1;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0)
        return grpo__fail_errno(GRPO_ESYS, errno, "sandbox: socketpair");
    pthread_mutex_lock(&svc_mu);
    if (svc_fd >= 0) {
        err = sbx_send(svc_fd, 1, NULL, 0, sp[1]);
        pthread_mutex_unlock(&svc_mu);
    } else {
        pthread_mutex_unlock(&svc_mu);
        const sbx_filter *f;
        sbx_probe_here(); /* cached here, so each worker need not probe or build again */
        sbx_seccomp_shared(&f);
        pid_t pid = fork();
        if (pid == 0)
            worker_entry(sp[1]);
        if (pid < 0)
            err = grpo__fail_errno(GRPO_ESYS, errno, "sandbox: fork of a worker");
        *pid_out = pid;
    }
    close(sp[1]);
    if (err != GRPO_OK) {
        close(sp[0]);
        return err;
    }
    *sock_out = sp[0];
    return GRPO_OK;
}
