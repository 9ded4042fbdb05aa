/* The worker protocol: framed messages on a stream socket (optionally carrying one fd), and the
 * encoding of commands and result records with the common codec (common/codec.h). Decoding is
 * bounds-checked: a short or malformed frame sets the reader's bad flag instead of reading past
 * the end. */
#include "sandbox/sandbox_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

grpo_err
sbx_write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
        if (k < 0 && errno == ENOTSOCK)
            k = write(fd, c, n);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return grpo__fail_errno(GRPO_EIO, errno, "sandbox: write to worker");
        }
        c += k;
        n -= (size_t)k;
    }
    return GRPO_OK;
}

grpo_err
sbx_read_all(int fd, void *p, size_t n)
{
    char *c = p;
    while (n > 0) {
        ssize_t k = read(fd, c, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return grpo__fail_errno(GRPO_EIO, errno, "sandbox: read from worker");
        if (k == 0)
            return grpo__fail(GRPO_EIO, "sandbox: the worker closed the connection");
        c += k;
        n -= (size_t)k;
    }
    return GRPO_OK;
}

grpo_err
sbx_send(int fd, uint32_t code, const void *p, size_t n, int pass_fd)
{
    uint32_t hdr[2] = {code, (uint32_t)n};
    struct iovec iov = {hdr, sizeof hdr};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr msg = {0};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (pass_fd >= 0) {
        struct cmsghdr *cm;
        memset(&u, 0, sizeof u);
        msg.msg_control = u.buf;
        msg.msg_controllen = sizeof u.buf;
        cm = CMSG_FIRSTHDR(&msg);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &pass_fd, sizeof(int));
    }
    for (;;) {
        ssize_t k = sendmsg(fd, &msg, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return grpo__fail_errno(GRPO_EIO, errno, "sandbox: send to worker");
        if ((size_t)k < sizeof hdr) { /* rare on stream sockets; finish without the cmsg */
            grpo_err e = sbx_write_all(fd, (char *)hdr + k, sizeof hdr - (size_t)k);
            if (e != GRPO_OK)
                return e;
        }
        break;
    }
    return n > 0 ? sbx_write_all(fd, p, n) : GRPO_OK;
}

grpo_err
sbx_recv(int fd, uint32_t *code, char **payload, size_t *n, int *got_fd)
{
    uint32_t hdr[2];
    size_t have = 0;
    char *buf;
    grpo_err err;
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    *got_fd = -1;
    *payload = NULL;
    *n = 0;
    while (have < sizeof hdr) {
        struct iovec iov = {(char *)hdr + have, sizeof hdr - have};
        struct msghdr msg = {0};
        struct cmsghdr *cm;
        ssize_t k;
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = u.buf;
        msg.msg_controllen = sizeof u.buf;
        k = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return grpo__fail_errno(GRPO_EIO, errno, "sandbox: receive from worker");
        if (k == 0)
            return grpo__fail(GRPO_EIO, "sandbox: the worker closed the connection");
        for (cm = CMSG_FIRSTHDR(&msg); cm != NULL; cm = CMSG_NXTHDR(&msg, cm))
            if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
                memcpy(got_fd, CMSG_DATA(cm), sizeof(int));
        have += (size_t)k;
    }
    if (hdr[1] > (1u << 30))
        return grpo__fail(GRPO_EFORMAT, "sandbox: frame of %u bytes from worker", hdr[1]);
    buf = malloc((size_t)hdr[1] + 1);
    if (buf == NULL)
        return grpo__fail(GRPO_ENOMEM, "sandbox: out of memory for a %u-byte frame", hdr[1]);
    if ((err = sbx_read_all(fd, buf, hdr[1])) != GRPO_OK) {
        free(buf);
        return err;
    }
    buf[hdr[1]] = '\0';
    *code = hdr[0];
    *payload = buf;
    *n = hdr[1];
    return GRPO_OK;
}

static void
put_strv(grpo_wr *w, const char *const *v)
{
    uint32_t n = 0;
    if (v == NULL) {
        grpo__put_u32(w, GRPO_CODEC_NULL);
        return;
    }
    while (v[n] != NULL)
        n++;
    grpo__put_u32(w, n);
    for (uint32_t i = 0; i < n; i++)
        grpo__put_str(w, v[i]);
}

static char **
get_strv(grpo_rd *r)
{
    uint32_t n = grpo__get_u32(r);
    char **v;
    if (r->bad || n == GRPO_CODEC_NULL)
        return NULL;
    if (n > SBX_MAX_ARGS || n > r->len) {
        r->bad = true;
        return NULL;
    }
    v = calloc(n + 1, sizeof *v);
    if (v == NULL) {
        r->bad = true;
        return NULL;
    }
    for (uint32_t i = 0; i < n && !r->bad; i++) {
        v[i] = grpo__get_str(r, NULL);
        if (v[i] == NULL)
            r->bad = true;
    }
    return v;
}

static void
free_strv(char **v)
{
    if (v == NULL)
        return;
    for (size_t i = 0; v[i] != NULL; i++)
        free(v[i]);
    free(v);
}

static void
put_limits(grpo_wr *w, const grpo_sandbox_limits *l)
{
    grpo__put_u32(w, l->wall_ms);
    grpo__put_u32(w, l->cpu_ms);
    grpo__put_u64(w, l->mem_bytes);
    grpo__put_u64(w, l->fsize_bytes);
    grpo__put_u64(w, l->tmp_bytes);
    grpo__put_u32(w, l->nofile);
    grpo__put_u32(w, l->nproc);
    grpo__put_u64(w, l->stdout_max);
    grpo__put_u64(w, l->stderr_max);
    grpo__put_u64(w, l->output_kill);
    grpo__put_u64(w, l->memcg_bytes);
}

static void
get_limits(grpo_rd *r, grpo_sandbox_limits *l)
{
    l->wall_ms = grpo__get_u32(r);
    l->cpu_ms = grpo__get_u32(r);
    l->mem_bytes = grpo__get_u64(r);
    l->fsize_bytes = grpo__get_u64(r);
    l->tmp_bytes = grpo__get_u64(r);
    l->nofile = grpo__get_u32(r);
    l->nproc = grpo__get_u32(r);
    l->stdout_max = grpo__get_u64(r);
    l->stderr_max = grpo__get_u64(r);
    l->output_kill = grpo__get_u64(r);
    l->memcg_bytes = grpo__get_u64(r);
}

void
sbx_spec_encode(grpo_wr *w, const grpo_sandbox_cmd *cmd, uint64_t fn, const void *arg,
                size_t arg_len)
{
    put_strv(w, cmd->argv);
    put_strv(w, cmd->envp);
    grpo__put_str(w, cmd->cwd);
    grpo__put_bytes(w, cmd->stdin_data, cmd->stdin_data ? cmd->stdin_len : 0);
    grpo__put_u32(w, (uint32_t)cmd->n_files);
    for (int i = 0; i < cmd->n_files; i++) {
        grpo__put_str(w, cmd->files[i].name);
        grpo__put_bytes(w, cmd->files[i].data, cmd->files[i].len);
        grpo__put_u32(w, cmd->files[i].mode);
    }
    grpo__put_u32(w, (uint32_t)cmd->n_binds);
    for (int i = 0; i < cmd->n_binds; i++) {
        grpo__put_str(w, cmd->binds[i].src);
        grpo__put_str(w, cmd->binds[i].dst);
        grpo__put_u32(w, (uint32_t)cmd->binds[i].writable);
    }
    grpo__put_u32(w, (uint32_t)cmd->mount_proc);
    put_limits(w, &cmd->limits);
    grpo__put_u64(w, fn);
    grpo__put_bytes(w, arg, arg ? arg_len : 0);
}

static grpo_err
dup_bytes(const char *p, size_t n, char **out)
{
    *out = malloc(n + 1);
    if (*out == NULL)
        return GRPO_ENOMEM;
    if (n > 0)
        memcpy(*out, p, n);
    (*out)[n] = '\0';
    return GRPO_OK;
}

grpo_err
sbx_spec_decode(grpo_rd *r, sbx_spec *s)
{
    size_t n;
    const char *p;
    memset(s, 0, sizeof *s);
    s->argv = get_strv(r);
    s->envp = get_strv(r);
    s->cwd = grpo__get_str(r, NULL);
    p = grpo__get_bytes(r, &n);
    if (dup_bytes(p, n, &s->stdin_data) != GRPO_OK)
        r->bad = true;
    s->stdin_len = n;
    s->n_files = (int)grpo__get_u32(r);
    if (r->bad || s->n_files < 0 || (size_t)s->n_files > r->len)
        goto bad;
    s->file_names = calloc((size_t)s->n_files + 1, sizeof(char *));
    s->file_data = calloc((size_t)s->n_files + 1, sizeof(char *));
    s->file_lens = calloc((size_t)s->n_files + 1, sizeof(size_t));
    s->file_modes = calloc((size_t)s->n_files + 1, sizeof(uint32_t));
    if (!s->file_names || !s->file_data || !s->file_lens || !s->file_modes)
        goto bad;
    for (int i = 0; i < s->n_files && !r->bad; i++) {
        s->file_names[i] = grpo__get_str(r, NULL);
        p = grpo__get_bytes(r, &n);
        if (r->bad || dup_bytes(p, n, &s->file_data[i]) != GRPO_OK)
            goto bad;
        s->file_lens[i] = n;
        s->file_modes[i] = grpo__get_u32(r);
    }
    s->n_binds = (int)grpo__get_u32(r);
    if (r->bad || s->n_binds < 0 || (size_t)s->n_binds > r->len)
        goto bad;
    s->bind_src = calloc((size_t)s->n_binds + 1, sizeof(char *));
    s->bind_dst = calloc((size_t)s->n_binds + 1, sizeof(char *));
    s->bind_rw = calloc((size_t)s->n_binds + 1, sizeof(int));
    if (!s->bind_src || !s->bind_dst || !s->bind_rw)
        goto bad;
    for (int i = 0; i < s->n_binds && !r->bad; i++) {
        s->bind_src[i] = grpo__get_str(r, NULL);
        s->bind_dst[i] = grpo__get_str(r, NULL);
        s->bind_rw[i] = (int)grpo__get_u32(r);
    }
    s->mount_proc = (int)grpo__get_u32(r);
    get_limits(r, &s->lim);
    s->fn = grpo__get_u64(r);
    p = grpo__get_bytes(r, &n);
    if (r->bad || dup_bytes(p, n, &s->fn_arg) != GRPO_OK)
        goto bad;
    s->fn_arg_len = n;
    if (r->bad)
        goto bad;
    if (s->argv == NULL && s->fn == 0)
        return grpo__fail(GRPO_EINVAL, "sandbox: command has neither argv nor a function");
    return GRPO_OK;
bad:
    return grpo__fail(GRPO_EFORMAT, "sandbox: malformed command frame");
}

void
sbx_spec_fini(sbx_spec *s)
{
    free_strv(s->argv);
    free_strv(s->envp);
    free(s->cwd);
    free(s->stdin_data);
    for (int i = 0; i < s->n_files && s->file_names; i++) {
        free(s->file_names[i]);
        if (s->file_data)
            free(s->file_data[i]);
    }
    free(s->file_names);
    free(s->file_data);
    free(s->file_lens);
    free(s->file_modes);
    for (int i = 0; i < s->n_binds && s->bind_src; i++) {
        free(s->bind_src[i]);
        free(s->bind_dst[i]);
    }
    free(s->bind_src);
    free(s->bind_dst);
    free(s->bind_rw);
    free(s->fn_arg);
    memset(s, 0, sizeof *s);
}

void
sbx_result_encode(grpo_wr *w, const grpo_sandbox_result *res)
{
    grpo__put_u32(w, (uint32_t)res->status);
    grpo__put_u32(w, (uint32_t)res->exit_code);
    grpo__put_u32(w, (uint32_t)res->signal);
    grpo__put_u64(w, (uint64_t)(res->cpu_ms * 1000.0));
    grpo__put_u64(w, (uint64_t)(res->wall_ms * 1000.0));
    grpo__put_u64(w, res->max_rss_kb);
    grpo__put_bytes(w, res->out, res->out_len);
    grpo__put_bytes(w, res->err, res->err_len);
    grpo__put_u64(w, res->out_total);
    grpo__put_u64(w, res->err_total);
}

grpo_err
sbx_result_decode(grpo_rd *r, grpo_sandbox_result *res)
{
    const char *p;
    size_t n;
    memset(res, 0, sizeof *res);
    res->status = (grpo_sandbox_status)grpo__get_u32(r);
    res->exit_code = (int)grpo__get_u32(r);
    res->signal = (int)grpo__get_u32(r);
    res->cpu_ms = (double)grpo__get_u64(r) / 1000.0;
    res->wall_ms = (double)grpo__get_u64(r) / 1000.0;
    res->max_rss_kb = grpo__get_u64(r);
    p = grpo__get_bytes(r, &n);
    if (!r->bad && dup_bytes(p, n, &res->out) == GRPO_OK)
        res->out_len = n;
    p = grpo__get_bytes(r, &n);
    if (!r->bad && dup_bytes(p, n, &res->err) == GRPO_OK)
        res->err_len = n;
    res->out_total = grpo__get_u64(r);
    res->err_total = grpo__get_u64(r);
    if (r->bad || res->out == NULL || res->err == NULL) {
        grpo_sandbox_result_fini(res);
        return grpo__fail(GRPO_EFORMAT, "sandbox: malformed result frame from worker");
    }
    return GRPO_OK;
}
