/* Finding an action in a sample's text (grpo_env_find_action, include/grpo/env.h). It runs after
 * every sampled token, so the common case (no end marker among the new bytes) looks only at the
 * new bytes and the few before them that an end marker could start in; the look back for the
 * begin marker happens only when an end marker was just completed. */
#include "env/env_int.h"

#include <string.h>

/* First occurrence of pat[0..m) starting in [from, to] (start positions) of s, or -1. */
static ptrdiff_t
find_fwd(const char *s, size_t from, size_t to, const char *pat, size_t m)
{
    if (from > to)
        return -1;
    const char *hit = memmem(s + from, to - from + m, pat, m);
    return hit ? hit - s : -1;
}

/* Last occurrence of pat[0..m) starting in [from, to] (start positions) of s, or -1. */
static ptrdiff_t
find_back(const char *s, size_t from, size_t to, const char *pat, size_t m)
{
    size_t i = to + 1;
    while (i > from) {
        const char *c = memrchr(s + from, (unsigned char)pat[0], i - from);
        if (c == NULL)
            return -1;
        i = (size_t)(c - s);
        if (memcmp(c, pat, m) == 0)
            return (ptrdiff_t)i;
    }
    return -1;
}

/* The action of one pair whose end marker's last byte is at or after new_from, or -1. */
static int
find_pair(const grpo_env_marker *mk, const char *text, size_t len, size_t scan_from,
          size_t new_from, size_t *begin, size_t *end)
{
    size_t le = mk->end ? strlen(mk->end) : 0;
    size_t lb = mk->begin ? strlen(mk->begin) : 0;
    if (le == 0 || len - scan_from < le + lb)
        return -1;
    /* end markers that start here or later end at or after new_from */
    size_t lo = new_from >= le - 1 ? new_from - (le - 1) : 0;
    if (lo < scan_from + lb)
        lo = scan_from + lb;
    size_t bfrom = scan_from; /* no begin marker starts in [scan_from, bfrom) before an end */
    for (size_t e0 = lo; e0 + le <= len;) {
        ptrdiff_t e = find_fwd(text, e0, len - le, mk->end, le);
        if (e < 0)
            return -1;
        e0 = (size_t)e + 1;
        size_t b = scan_from;
        if (lb > 0) {
            ptrdiff_t pb = find_back(text, bfrom, (size_t)e - lb, mk->begin, lb);
            if (pb < 0) {
                bfrom = (size_t)e - lb + 1; /* a later end looks back only this far */
                continue;
            }
            b = (size_t)pb;
        }
        /* the end marker must be the first one after the begin marker: an earlier one closed an
         * action (or stray text) already */
        if ((size_t)e > b + lb && find_fwd(text, b + lb, (size_t)e - 1, mk->end, le) >= 0)
            continue;
        *begin = b;
        *end = (size_t)e + le;
        return 0;
    }
    return -1;
}

int
grpo_env_find_action(const grpo_env_marker *markers, int n_markers, const char *text, size_t len,
                     size_t scan_from, size_t new_from, size_t *begin, size_t *end)
{
    if (markers == NULL || text == NULL || scan_from > len || new_from >= len)
        return -1;
    if (new_from < scan_from)
        new_from = scan_from;
    for (int i = 0; i < n_markers; i++)
        if (find_pair(&markers[i], text, len, scan_from, new_from, begin, end) == 0)
            return i;
    return -1;
}
