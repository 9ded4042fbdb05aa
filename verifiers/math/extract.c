/* Finds the answer in a completion without regular expressions: the last \boxed{} / \fbox{} with
 * real brace matching, "final answer is ...", "Answer: ...", the last $...$ / \(...\) / \[...\]
 * (joined when a few are listed with "and" or commas), a bare \frac{a}{b}, and, when configured,
 * a plain last number. Every scan is linear in the text and counts budget steps. */
#include "verifiers/math/math_int.h"

#include <ctype.h>
#include <string.h>

#define MAX_BOXED 8

/* Index of the brace closing the group opened at s[i] == '{', or -1 (unclosed, or too deep). */
static long
match_brace(const char *s, size_t n, size_t i, mbudget *bud)
{
    long d = 0;
    for (size_t j = i; j < n; j++) {
        if ((j & 1023) == 0 && !mb_step(bud, 64))
            return -1;
        char c = s[j];
        if (c == '\\' && j + 1 < n) {
            j++;
            continue;
        }
        if (c == '{')
            d++;
        else if (c == '}' && --d == 0)
            return (long)j;
    }
    return -1;
}

static bool
starts_with(const char *s, size_t n, size_t i, const char *lit)
{
    size_t l = strlen(lit);
    return i + l <= n && memcmp(s + i, lit, l) == 0;
}

static bool
istarts_with(const char *s, size_t n, size_t i, const char *lit)
{
    size_t l = strlen(lit);
    if (i + l > n)
        return false;
    for (size_t k = 0; k < l; k++)
        if (tolower((unsigned char)s[i + k]) != lit[k])
            return false;
    return true;
}

static int
add(mspan *out, int cnt, const char *s, size_t n, int group)
{
    if (cnt >= MX_MAX_CAND)
        return cnt;
    memset(&out[cnt], 0, sizeof out[cnt]);
    out[cnt].s = s;
    out[cnt].n = n;
    out[cnt].group = group;
    return cnt + 1;
}

static bool only_joiners_or_empty(const char *s, size_t a, size_t b);

/* The last few \boxed / \fbox answers, rightmost first. */
static int
find_boxed(const char *s, size_t n, mspan *out, int cnt, int group, mbudget *bud)
{
    size_t pos[MAX_BOXED];
    int np = 0;
    /* scan backwards for the last MAX_BOXED commands */
    for (size_t i = n; i-- > 0 && np < MAX_BOXED;) {
        if ((i & 4095) == 0 && !mb_step(bud, 256))
            return cnt;
        if (s[i] == '\\' && (starts_with(s, n, i, "\\boxed") || starts_with(s, n, i, "\\fbox")))
            pos[np++] = i;
    }
    int first = cnt;
    size_t ends[MAX_BOXED], starts[MAX_BOXED];
    for (int k = 0; k < np; k++) {
        starts[cnt - first < MAX_BOXED ? cnt - first : 0] = pos[k];
        size_t i = pos[k] + (s[pos[k] + 1] == 'b' ? 6 : 5);
        while (i < n && (s[i] == ' ' || s[i] == '\t'))
            i++;
        if (i < n && s[i] == '{') {
            long e = match_brace(s, n, i, bud);
            if (e < 0)
                continue; /* unclosed: no answer from this one */
            ends[cnt - first] = (size_t)e + 1;
            cnt = add(out, cnt, s + i + 1, (size_t)e - i - 1, group);
        } else if (i > pos[k] + 5 + (s[pos[k] + 1] == 'b') && i < n) {
            /* \boxed 5: up to whitespace or $ */
            size_t j = i;
            while (j < n && !isspace((unsigned char)s[j]) && s[j] != '$')
                j++;
            if (j > i) {
                ends[cnt - first] = j;
                cnt = add(out, cnt, s + i, j - i, group);
            }
        }
    }
    /* "\boxed{-2} and \boxed{1}": the last run of boxed answers with only joiners between them
     * is one answer (tried before the last box alone) */
    int run = 1;
    while (first + run < cnt && run < 6 && only_joiners_or_empty(s, ends[run], starts[run - 1]))
        run++;
    if (run > 1 && cnt < MX_MAX_CAND) {
        mspan j = out[first];
        j.n_join = run;
        for (int k = 0; k < run; k++) { /* left to right */
            j.join_s[k] = out[first + run - 1 - k].s;
            j.join_n[k] = out[first + run - 1 - k].n;
        }
        memmove(&out[first + 1], &out[first], (size_t)(cnt - first) * sizeof *out);
        out[first] = j;
        cnt++;
    }
    return cnt;
}

typedef struct env {
    size_t start, end; /* the whole environment, delimiters included */
    size_t cs, cn;     /* content */
} env;

/* The next math environment starting at or after pos. */
static bool
next_env(const char *s, size_t n, size_t pos, env *e, mbudget *bud)
{
    for (size_t i = pos; i < n; i++) {
        if ((i & 4095) == 0 && !mb_step(bud, 256))
            return false;
        char c = s[i];
        if (c == '$' && (i == 0 || s[i - 1] != '\\')) {
            bool dbl = i + 1 < n && s[i + 1] == '$';
            size_t cs = i + (dbl ? 2 : 1);
            for (size_t j = cs; j < n; j++) {
                if (s[j] == '\\') {
                    j++;
                    continue;
                }
                if (!dbl && s[j] == '\n')
                    break;
                if (s[j] == '$' && (!dbl || (j + 1 < n && s[j + 1] == '$'))) {
                    if (j == cs)
                        break;
                    e->start = i;
                    e->cs = cs;
                    e->cn = j - cs;
                    e->end = j + (dbl ? 2 : 1);
                    return true;
                }
            }
            if (dbl)
                i++;
            continue;
        }
        if (c == '\\' && i + 1 < n && (s[i + 1] == '(' || s[i + 1] == '[')) {
            char close = s[i + 1] == '(' ? ')' : ']';
            size_t cs = i + 2;
            for (size_t j = cs; j + 1 < n; j++) {
                if (s[j] == '\\' && s[j + 1] == close) {
                    if (j == cs)
                        break;
                    e->start = i;
                    e->cs = cs;
                    e->cn = j - cs;
                    e->end = j + 2;
                    return true;
                }
                if (s[j] == '\\' && s[j + 1] == (close == ')' ? '(' : '['))
                    break; /* an unclosed one; the next opening starts over */
                if (close == ')' && s[j] == '\n')
                    break; /* inline math does not span lines */
            }
            i++;
        }
    }
    return false;
}

/* Does s[a..b) end with a list joiner (",", ";", "and", "or"), ignoring spaces, '$', '}' and
 * "\text{"? "\boxed{0}, but correcting it gives \boxed{2}" does not: the second box replaces the
 * first. */
static bool
ends_with_joiner(const char *s, size_t a, size_t b)
{
    for (;;) {
        while (b > a && (isspace((unsigned char)s[b - 1]) || s[b - 1] == '$' || s[b - 1] == '{' ||
                         s[b - 1] == '}'))
            b--;
        /* spacing, text, math delimiters: "\text{ and }", ", \quad", ",\,", "\) and \(" */
        size_t c = b;
        while (c > a && isalpha((unsigned char)s[c - 1]))
            c--;
        if (c > a && s[c - 1] == '\\' && c < b &&
            (b - c == 4 ? memcmp(s + c, "text", 4) == 0 || memcmp(s + c, "quad", 4) == 0
                        : b - c == 5 && memcmp(s + c, "qquad", 5) == 0)) {
            b = c - 1;
            continue;
        }
        if (b >= a + 2 && s[b - 2] == '\\' && strchr(",;()[]", s[b - 1]) != NULL) {
            b -= 2;
            continue;
        }
        break;
    }
    if (b > a && (s[b - 1] == ',' || s[b - 1] == ';'))
        return true;
    size_t w = b;
    while (w > a && isalpha((unsigned char)s[w - 1]))
        w--;
    return (b - w == 3 && memcmp(s + w, "and", 3) == 0) ||
           (b - w == 2 && memcmp(s + w, "or", 2) == 0);
}

/* Is s[a..b) only separators between listed answers: spaces, commas, "and", "or", \quad,
 * \text{ and }, math delimiters, or a short phrase without digits that ends with one of those
 * ("papers and")? */
static bool
only_joiners(const char *s, size_t a, size_t b)
{
    bool any = false;
    if (b - a > 48 || !ends_with_joiner(s, a, b))
        return false;
    for (size_t i = a; i < b; i++) {
        if (isdigit((unsigned char)s[i]))
            return false;
        if (s[i] == ',' || s[i] == ';')
            any = true;
        if (i + 3 <= b && memcmp(s + i, "and", 3) == 0 &&
            (i == a || !isalpha((unsigned char)s[i - 1])) &&
            (i + 3 == b || !isalpha((unsigned char)s[i + 3])))
            any = true;
        if (i + 2 <= b && memcmp(s + i, "or", 2) == 0 &&
            (i == a || !isalpha((unsigned char)s[i - 1])) &&
            (i + 2 == b || !isalpha((unsigned char)s[i + 2])))
            any = true;
        if (s[i] == '=')
            return false;
    }
    return any;
}

/* math-verify's list separators between environments: "," "and" "or" ",and" ",or" */
static bool
strict_joiners(const char *s, size_t a, size_t b)
{
    char w[8];
    size_t n = 0;
    if (b < a || b - a > 16)
        return false;
    for (size_t i = a; i < b; i++) {
        if (isspace((unsigned char)s[i]))
            continue;
        if (n + 1 >= sizeof w)
            return false;
        w[n++] = s[i];
    }
    w[n] = 0;
    return strcmp(w, ",") == 0 || strcmp(w, "and") == 0 || strcmp(w, "or") == 0 ||
           strcmp(w, ",and") == 0 || strcmp(w, ",or") == 0;
}

static bool
only_joiners_or_empty(const char *s, size_t a, size_t b)
{
    if (a > b)
        return false;
    for (size_t i = a; i < b; i++)
        if (!isspace((unsigned char)s[i]) && s[i] != '$')
            return only_joiners(s, a, b) || false;
    return true;
}

/* The last math environment(s) in s[from..n); returns the end position of the last one, 0 if none.
 */
static size_t
last_envs(const char *s, size_t n, size_t from, mspan *sp, mbudget *bud)
{
    env ring[6];
    int cnt = 0;
    env e;
    size_t pos = from;
    while (next_env(s, n, pos, &e, bud)) {
        /* start a new run unless only joiners separate it from the previous one */
        if (cnt > 0 && !strict_joiners(s, ring[(cnt - 1) % 6].end, e.start))
            cnt = 0;
        ring[cnt % 6] = e;
        cnt++;
        pos = e.end;
    }
    if (cnt == 0)
        return 0;
    int k0 = cnt > 6 ? cnt - 6 : 0;
    memset(sp, 0, sizeof *sp);
    env *last = &ring[(cnt - 1) % 6];
    sp->s = s + last->cs;
    sp->n = last->cn;
    sp->n_join = cnt - k0;
    for (int k = k0; k < cnt; k++) {
        sp->join_s[k - k0] = s + ring[k % 6].cs;
        sp->join_n[k - k0] = ring[k % 6].cn;
    }
    if (sp->n_join == 1)
        sp->n_join = 0;
    return last->end;
}

/* A plain number ending at or before end (math-verify's number forms: 1,234,567.8, 2,5, .5, 50%).
 * Writes the normalized number to sp->num. Returns its end position, or 0. */
static size_t last_number1(const char *s, size_t n, size_t from, mspan *sp, mbudget *bud,
                           size_t *start);

/* math-verify's anchor before a number: start, whitespace, '=', "**", or a currency sign */
static bool
number_anchor(const char *s, size_t from, size_t b)
{
    if (b == from)
        return true;
    unsigned char c = (unsigned char)s[b - 1];
    if (isspace(c) || c == '=' || c == '*' || c == '$' || c == '(' || c == ':')
        return true;
    if (c >= 0x80) { /* a currency sign such as the euro or the pound */
        size_t k = b - 1;
        while (k > from && ((unsigned char)s[k] & 0xc0) == 0x80)
            k--;
        return k == from || isspace((unsigned char)s[k - 1]);
    }
    return false;
}

/* The last anchored number; a simple arithmetic expression ending with it ("2/3", "(1/2)*3")
 * is preferred when it is one. */
static size_t
last_number(const char *s, size_t n, size_t from, mspan *sp, mbudget *bud)
{
    size_t end = n;
    for (int tries = 0; tries < 64 && end > from; tries++) {
        size_t b = 0, e = last_number1(s, end, from, sp, bud, &b);
        if (e == 0)
            return 0;
        size_t nb = b;
        if (sp->num[0] == '-')
            nb = b - 1;
        /* extend left over an arithmetic expression */
        size_t x = nb;
        while (x > from && strchr("0123456789.+-*/^() ", s[x - 1]) != NULL && nb - x < 60)
            x--;
        while (x < nb && (s[x] == ' ' || strchr("+*/^)", s[x]) != NULL))
            x++;
        bool op = false;
        for (size_t k = x; k < nb; k++)
            op |= strchr("+-*/^", s[k]) != NULL;
        if (op && x < nb && number_anchor(s, from, x) && e - x < sizeof sp->num - 1) {
            int depth = 0;
            bool ok = true;
            for (size_t k = x; k < e; k++) {
                depth += s[k] == '(';
                depth -= s[k] == ')';
                ok &= depth >= 0;
            }
            if (ok && depth == 0 && strchr(sp->num, '%') == NULL) {
                memcpy(sp->num, s + x, e - x);
                sp->num[e - x] = 0;
                sp->n = e - x;
                return e;
            }
        }
        if (number_anchor(s, from, nb))
            return e;
        end = nb; /* not a standalone number (AZYUK2A): look further left */
    }
    return 0;
}

static size_t
last_number1(const char *s, size_t n, size_t from, mspan *sp, mbudget *bud, size_t *start)
{
    size_t i = n;
    memset(sp, 0, sizeof *sp);
    while (i > from) {
        if ((i & 4095) == 0 && !mb_step(bud, 256))
            return 0;
        if (isdigit((unsigned char)s[i - 1]))
            break;
        i--;
    }
    if (i == from)
        return 0;
    size_t end = i, b = i;
    /* walk left over digits, '.', ',' and single spaces between groups of three */
    while (b > from) {
        char c = s[b - 1];
        if (isdigit((unsigned char)c) || c == '.' || c == ',')
            b--;
        else if (c == ' ' && b >= from + 2 && isdigit((unsigned char)s[b - 2]) && end - b >= 3 &&
                 isdigit((unsigned char)s[b]) && b + 3 <= end &&
                 (b + 3 == end || !isdigit((unsigned char)s[b + 3])))
            b--;
        else
            break;
        if (end - b > 80)
            break;
    }
    while (b < end && (s[b] == ',' || s[b] == '.' || s[b] == ' ') &&
           !(s[b] == '.' && b + 1 < end && isdigit((unsigned char)s[b + 1])))
        b++;
    while (end > b && (s[end - 1] == ',' || s[end - 1] == '.'))
        end--;
    bool neg = b > from && s[b - 1] == '-';
    /* normalize: groups separated by ',' or ' ' of exactly three are thousands; a lone ',' with
     * other than three digits after it is a decimal comma */
    char raw[96];
    size_t rn = 0;
    for (size_t k = b; k < end && rn + 1 < sizeof raw; k++)
        raw[rn++] = s[k];
    raw[rn] = 0;
    char *o = sp->num;
    size_t on = 0;
    if (neg)
        o[on++] = '-';
    int seps = 0;
    for (size_t k = 0; k < rn; k++)
        if (raw[k] == ',' || raw[k] == ' ')
            seps++;
    bool has_dot = strchr(raw, '.') != NULL;
    for (size_t k = 0; k < rn && on + 2 < sizeof sp->num; k++) {
        char c = raw[k];
        if (c == ',' || c == ' ') {
            size_t d = 0;
            while (k + 1 + d < rn && isdigit((unsigned char)raw[k + 1 + d]))
                d++;
            if (d == 3 &&
                (k + 4 >= rn || raw[k + 4] == ',' || raw[k + 4] == ' ' || raw[k + 4] == '.') &&
                !(seps == 1 && !has_dot && raw[0] == '0'))
                continue; /* thousands separator */
            if (c == ',' && !has_dot) {
                o[on++] = '.';
                has_dot = true;
                continue;
            }
            break;
        }
        o[on++] = c;
    }
    o[on] = 0;
    /* a percent sign right after */
    size_t q = end;
    while (q < n && s[q] == ' ')
        q++;
    if (q < n && s[q] == '%' && on + 2 < sizeof sp->num) {
        o[on++] = '%';
        o[on] = 0;
    }
    sp->s = NULL;
    sp->n = on;
    *start = b;
    return end;
}

/* The answer after an anchor at position a: a math environment close by, else the rest of the
 * sentence. */
static int
after_anchor(const char *s, size_t n, size_t a, mspan *out, int cnt, int group, mbudget *bud)
{
    while (a < n && (s[a] == ':' || s[a] == '*' || s[a] == ' ' || s[a] == '\t'))
        a++;
    env e;
    size_t lim = a + 80 < n ? a + 80 : n;
    if (next_env(s, n, a, &e, bud) && e.start < lim) {
        bool nl = false;
        for (size_t k = a; k < e.start; k++)
            nl |= s[k] == '\n';
        if (!nl) {
            mspan sp;
            last_envs(s, e.end, e.start, &sp, bud); /* this one env (and a run before it) */
            /* also a run after it: "$1$ and $2$" */
            size_t pos = e.end;
            env f;
            sp.s = s + e.cs;
            sp.n = e.cn;
            sp.n_join = 0;
            int nj = 1;
            sp.join_s[0] = s + e.cs;
            sp.join_n[0] = e.cn;
            while (nj < 6 && next_env(s, n, pos, &f, bud) && strict_joiners(s, pos, f.start)) {
                sp.join_s[nj] = s + f.cs;
                sp.join_n[nj] = f.cn;
                nj++;
                pos = f.end;
            }
            if (nj > 1)
                sp.n_join = nj;
            if (cnt < MX_MAX_CAND) {
                sp.group = group;
                out[cnt++] = sp;
            }
            return cnt;
        }
    }
    /* plain text to the end of the line or sentence */
    size_t b = a, k = a;
    while (k < n && s[k] != '\n') {
        if (s[k] == '.' && (k + 1 == n || isspace((unsigned char)s[k + 1])) &&
            !(k > a && isdigit((unsigned char)s[k - 1]) && k + 1 < n &&
              isdigit((unsigned char)s[k + 1])))
            break;
        k++;
        if (k - a > 400)
            return cnt;
    }
    while (k > b && (s[k - 1] == ' ' || s[k - 1] == '*' || s[k - 1] == '.'))
        k--;
    if (k > b) {
        cnt = add(out, cnt, s + b, k - b, group);
        out[cnt - 1].plain = true;
    }
    return cnt;
}

/* Position just after the last case-insensitive occurrence of lit, or 0. */
static size_t
last_occ(const char *s, size_t n, const char *lit, mbudget *bud)
{
    size_t l = strlen(lit);
    for (size_t i = n; i-- > 0;) {
        if ((i & 4095) == 0 && !mb_step(bud, 256))
            return 0;
        if ((s[i] | 0x20) == lit[0] && istarts_with(s, n, i, lit))
            return i + l;
        if (i + l > n + 1000000) /* unreachable; keeps the loop obviously bounded */
            break;
        (void)l;
    }
    return 0;
}

/* "final answer ... is X" (the "is" within 100 characters). */
static int
final_answer(const char *s, size_t n, mspan *out, int cnt, int group, mbudget *bud)
{
    size_t a = last_occ(s, n, "final answer", bud);
    if (a == 0)
        return cnt;
    size_t lim = a + 100 < n ? a + 100 : n;
    for (size_t k = a; k + 3 <= lim; k++)
        if (isspace((unsigned char)s[k]) && s[k + 1] == 'i' && s[k + 2] == 's' &&
            (k + 3 == n || !isalpha((unsigned char)s[k + 3])))
            return after_anchor(s, n, k + 3, out, cnt, group, bud);
    size_t k = a;
    while (k < n && (s[k] == '*' || s[k] == ' '))
        k++;
    if (k < n && s[k] == ':')
        return after_anchor(s, n, k + 1, out, cnt, group, bud);
    return cnt;
}

/* "Answer: X" / "answer is X" */
static int
answer_line(const char *s, size_t n, mspan *out, int cnt, int group, bool need_colon, mbudget *bud)
{
    size_t a = last_occ(s, n, "answer", bud);
    while (a > 0) {
        size_t k = a;
        while (k < n && (s[k] == '*' || s[k] == ' '))
            k++;
        bool colon = k < n && (s[k] == ':' || s[k] == '='); /* "Answer: 7", "answer = 7" */
        if (colon || !need_colon) {
            if (!colon) {
                /* "the answer is X" */
                if (k + 2 <= n && s[k] == 'i' && s[k + 1] == 's')
                    k += 2;
                else
                    return cnt;
            }
            return after_anchor(s, n, colon ? k + 1 : k, out, cnt, group, bud);
        }
        /* an earlier occurrence */
        size_t prev = last_occ(s, a - 6, "answer", bud);
        if (prev == 0 || prev >= a)
            break;
        a = prev;
    }
    return cnt;
}

/* A bare \frac{a}{b} of numbers; returns the end of the last one or 0. */
static size_t
last_bare_frac(const char *s, size_t n, mspan *sp, mbudget *bud)
{
    for (size_t i = n; i-- > 0;) {
        if ((i & 4095) == 0 && !mb_step(bud, 256))
            return 0;
        if (s[i] != '\\' || !starts_with(s, n, i, "\\frac{"))
            continue;
        /* a bare fraction is short: look at most 80 bytes ahead (many unclosed "\frac{" in a
         * hostile text would otherwise cost a full scan each) */
        size_t lim = i + 86 < n ? i + 86 : n;
        long e1 = match_brace(s, lim, i + 5, bud);
        if (e1 < 0 || (size_t)e1 + 1 >= lim || s[e1 + 1] != '{')
            continue;
        long e2 = match_brace(s, lim, (size_t)e1 + 1, bud);
        if (e2 < 0 || e2 - (long)i > 80)
            continue;
        memset(sp, 0, sizeof *sp);
        size_t b = (i > 0 && s[i - 1] == '-') ? i - 1 : i;
        sp->s = s + b;
        sp->n = (size_t)e2 + 1 - b;
        return (size_t)e2 + 1;
    }
    return 0;
}

int
mextract(const char *s, size_t n, const mextract_opts *o, mspan *out, mbudget *bud)
{
    int cnt = 0, g = 0;
    const char *lb = NULL; /* the last \boxed / \fbox */
    if (o->latex) {
        /* a "final answer is" statement after the last box wins over the box */
        size_t fa = last_occ(s, n, "final answer", bud);
        for (size_t i = n; i-- > 0 && lb == NULL;)
            if (s[i] == '\\' && (starts_with(s, n, i, "\\boxed") || starts_with(s, n, i, "\\fbox")))
                lb = s + i;
        bool final_first = fa > 0 && (lb == NULL || s + fa > lb);
        if (o->boxed_first && !final_first)
            cnt = find_boxed(s, n, out, cnt, g++, bud);
        cnt = final_answer(s, n, out, cnt, g++, bud);
        if (!o->boxed_first || final_first)
            cnt = find_boxed(s, n, out, cnt, g++, bud);
    }
    cnt = answer_line(s, n, out, cnt, g++, true, bud);
    cnt = answer_line(s, n, out, cnt, g++, false, bud);
    /* unanchored: the rightmost of the last environment run, a bare fraction, a number */
    mspan a, b, c;
    size_t ea = o->latex ? last_envs(s, n, 0, &a, bud) : 0;
    size_t eb = o->latex ? last_bare_frac(s, n, &b, bud) : 0;
    if (eb && lb && b.s > lb) {
        /* a fraction inside the last box is part of that box's answer, not one of its own */
        size_t open = (size_t)(lb - s) + (lb[1] == 'b' ? 6 : 5);
        long close = open < n && s[open] == '{' ? match_brace(s, n, open, bud) : -1;
        if (close < 0 || b.s < s + close)
            eb = 0;
    }
    size_t ec = o->last_number ? last_number(s, n, 0, &c, bud) : 0;
    if (ea && ec && ec <= ea && s + ec > a.s)
        ec = 0; /* a number inside the last math environment is not a separate answer */
    for (int r = 0; r < 3 && cnt < MX_MAX_CAND; r++) {
        size_t best = 0;
        mspan *bs = NULL;
        if (ea > best)
            best = ea, bs = &a;
        if (eb > best)
            best = eb, bs = &b;
        if (ec > best)
            best = ec, bs = &c;
        if (bs == NULL)
            break;
        bs->group = g;
        out[cnt++] = *bs;
        if (bs == &a)
            ea = 0;
        else if (bs == &b)
            eb = 0;
        else
            ec = 0;
    }
    return cnt;
}
