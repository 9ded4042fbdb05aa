/* File reading/writing, UTF-8 validation and a growable buffer. */
#include "common/common_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

grpo_err
grpo__read_file(const char *path, size_t max_bytes, char **out, size_t *len)
{
    *out = NULL;
    if (len)
        *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return grpo__fail_errno(grpo__err_from_errno(errno), errno, "%s: cannot open", path);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return grpo__fail(GRPO_EIO, "%s: not a regular file", path);
    }
    if (max_bytes && (uint64_t)st.st_size > max_bytes) {
        close(fd);
        return grpo__fail(GRPO_EFORMAT, "%s: file is %lld bytes; the limit is %zu", path,
                          (long long)st.st_size, max_bytes);
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (buf == NULL) {
        close(fd);
        return grpo__fail(GRPO_ENOMEM, "%s: out of memory reading %zu bytes", path, n);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int e = errno;
            free(buf);
            close(fd);
            return r == 0 ? grpo__fail(GRPO_EIO, "%s: file shrank while reading", path)
                          : grpo__fail_errno(GRPO_EIO, e, "%s: read failed", path);
        }
        got += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    *out = buf;
    if (len)
        *len = n;
    return GRPO_OK;
}

grpo_err
grpo__write_file_atomic(const char *path, const void *buf, size_t len)
{
    size_t pl = strlen(path);
    char *tmp = malloc(pl + 16);
    if (tmp == NULL)
        return grpo__fail(GRPO_ENOMEM, "%s: out of memory", path);
    snprintf(tmp, pl + 16, "%s.tmp.%d", path, (int)getpid());
    grpo_err err = GRPO_OK;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        err = grpo__fail_errno(grpo__err_from_errno(errno), errno, "%s: cannot create", tmp);
        goto done;
    }
    const char *p = buf;
    size_t left = len;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            err = grpo__fail_errno(grpo__err_from_errno(errno), errno, "%s: write failed", tmp);
            break;
        }
        p += w;
        left -= (size_t)w;
    }
    if (err == GRPO_OK && fsync(fd) != 0)
        err = grpo__fail_errno(grpo__err_from_errno(errno), errno, "%s: fsync failed", tmp);
    close(fd);
    if (err == GRPO_OK && rename(tmp, path) != 0)
        err = grpo__fail_errno(grpo__err_from_errno(errno), errno, "%s: rename failed", path);
    if (err != GRPO_OK)
        unlink(tmp);
done:
    free(tmp);
    return err;
}

size_t
grpo__utf8_valid_len(const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        unsigned cp, min;
        if ((c & 0xE0) == 0xC0) {
            k = 1, cp = c & 0x1F, min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            k = 2, cp = c & 0x0F, min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            k = 3, cp = c & 0x07, min = 0x10000;
        } else {
            return i;
        }
        if (n - i <= k)
            return i;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80)
                return i;
            cp = (cp << 6) | (s[i + j] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return i;
        i += k + 1;
    }
    return n;
}

bool
grpo__utf8_valid(const char *str, size_t n)
{
    return grpo__utf8_valid_len(str, n) == n;
}

char *
grpo__utf8_sanitize(const char *s, size_t n, size_t *out_len)
{
    grpo_buf b = {0};
    size_t i = 0;
    while (i < n) {
        size_t ok = grpo__utf8_valid_len(s + i, n - i);
        if (grpo__buf_append(&b, s + i, ok) != GRPO_OK)
            goto oom;
        i += ok;
        if (i < n) {
            if (grpo__buf_append(&b, "\xEF\xBF\xBD", 3) != GRPO_OK)
                goto oom;
            i++;
        }
    }
    if (grpo__buf_append(&b, "", 1) != GRPO_OK)
        goto oom;
    if (out_len)
        *out_len = b.len - 1;
    return b.data;
oom:
    grpo__buf_fini(&b);
    return NULL;
}

void
grpo__utf8_sanitize_buf(char *buf, size_t cap)
{
    size_t n = strnlen(buf, cap), len;
    if (cap == 0 || grpo__utf8_valid(buf, n))
        return;
    char *c = grpo__utf8_sanitize(buf, n, &len);
    if (c == NULL) { /* out of memory: cut at the first bad byte */
        buf[grpo__utf8_valid_len(buf, n)] = '\0';
        return;
    }
    if (len > cap - 1)
        len = grpo__utf8_valid_len(c, cap - 1);
    memcpy(buf, c, len);
    buf[len] = '\0';
    free(c);
}

grpo_err
grpo__buf_reserve(grpo_buf *b, size_t extra)
{
    if (b->cap - b->len > extra)
        return GRPO_OK;
    size_t need = b->len + extra + 1;
    if (need < b->len)
        return grpo__fail(GRPO_ENOMEM, "buffer: size overflow");
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap *= 2;
    char *d = realloc(b->data, cap);
    if (d == NULL)
        return grpo__fail(GRPO_ENOMEM, "buffer: out of memory growing to %zu bytes", cap);
    b->data = d;
    b->cap = cap;
    return GRPO_OK;
}

grpo_err
grpo__buf_append(grpo_buf *b, const void *p, size_t n)
{
    grpo_err err = grpo__buf_reserve(b, n);
    if (err != GRPO_OK)
        return err;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return GRPO_OK;
}

grpo_err
grpo__buf_printf(grpo_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return grpo__fail(GRPO_EINVAL, "buffer: bad format");
    grpo_err err = grpo__buf_reserve(b, (size_t)n);
    if (err != GRPO_OK)
        return err;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return GRPO_OK;
}

void
grpo__buf_fini(grpo_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

grpo_err
grpo__buf_json_str(grpo_buf *b, const char *s)
{
    grpo_err err = grpo__buf_append(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p && err == GRPO_OK; p++) {
        if (*p == '"' || *p == '\\')
            err = grpo__buf_printf(b, "\\%c", *p);
        else if (*p < 0x20)
            err = grpo__buf_printf(b, "\\u%04x", *p);
        else
            err = grpo__buf_append(b, p, 1);
    }
    return err == GRPO_OK ? grpo__buf_append(b, "\"", 1) : err;
}
