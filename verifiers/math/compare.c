/* Gold vs prediction equivalence. Exact rationals with GMP when both sides are exact; numbers with
 * a rounding tolerance (exact when the gold is an integer); expressions with variables by
 * evaluation at seeded random points with MPFR (domain-aware: points where a side is undefined are
 * skipped); sets order-insensitive, tuples ordered, intervals with their ends; relations up to
 * sides and scaling. Overflowing values (10^{10^{10}}) fall back to structural comparison, never to
 * "inf == inf". */
#include "verifiers/math/math_int.h"

#include <gmp.h>
#include <ctype.h>
#include <mpfr.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PREC 256
#define MAX_POINTS 12
#define MAX_VARS 16
#define MAX_FACT_EXACT 20000
#define MAX_FACT_NUM 1000000
#define MAX_POW_BITS (1L << 22)

typedef struct cctx {
    const mcmp_opts *o;
    mbudget *bud;
    marena *ar;
    /* variable renaming for non-strict mode: pred names -> gold names */
    const char *from[MAX_VARS], *to[MAX_VARS];
    int nmap;
} cctx;

/* ---- tree helpers ------------------------------------------------------------------------- */

static bool
has_float(const mnode *e, int depth)
{
    if (depth > 200)
        return true;
    if (e->kind == N_NUM)
        return e->is_float;
    for (int k = 0; k < e->n; k++)
        if (has_float(e->kids[k], depth + 1))
            return true;
    return false;
}

static int
count_pm(const mnode *e, int depth)
{
    if (depth > 200)
        return 99;
    int c = e->kind == N_PM;
    for (int k = 0; k < e->n; k++)
        c += count_pm(e->kids[k], depth + 1);
    return c;
}

static bool
is_scalar(const mnode *e)
{
    switch (e->kind) {
    case N_LIST:
    case N_SET:
    case N_TUPLE:
    case N_INTERVAL:
    case N_UNION:
    case N_EMPTY:
    case N_REL:
    case N_MATRIX:
    case N_TEXT:
        return false;
    default:
        return true;
    }
}

static void
collect_vars(const mnode *e, const char **v, int *nv, int depth)
{
    if (depth > 200)
        return;
    if (e->kind == N_SYM && strcmp(e->str, "e") != 0) {
        for (int k = 0; k < *nv; k++)
            if (strcmp(v[k], e->str) == 0)
                return;
        if (*nv < MAX_VARS)
            v[(*nv)++] = e->str;
        return;
    }
    for (int k = 0; k < e->n; k++)
        collect_vars(e->kids[k], v, nv, depth + 1);
}

static int
cmpstr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* ---- exact evaluation (GMP) --------------------------------------------------------------- */

typedef struct qctx {
    mbudget *bud;
    unsigned pm_mask;
    int pm_next;
} qctx;

static bool
q_from_literal(const char *s, mpq_t out)
{
    mpz_t m;
    long exp = 0, dec = 0;
    bool neg = false, seen_dot = false;
    mpz_init_set_ui(m, 0);
    const char *p = s;
    if (*p == '-')
        neg = true, p++;
    for (; *p && *p != 'e'; p++) {
        if (*p == '.') {
            seen_dot = true;
            continue;
        }
        if (*p < '0' || *p > '9') {
            mpz_clear(m);
            return false;
        }
        mpz_mul_ui(m, m, 10);
        mpz_add_ui(m, m, (unsigned long)(*p - '0'));
        dec += seen_dot;
    }
    if (*p == 'e') {
        char *end;
        exp = strtol(p + 1, &end, 10);
        if (*end || exp > 100000 || exp < -100000) {
            mpz_clear(m);
            return false;
        }
    }
    long e10 = exp - dec;
    mpz_t t;
    mpz_init(t);
    mpz_ui_pow_ui(t, 10, (unsigned long)(e10 < 0 ? -e10 : e10));
    mpq_set_z(out, m);
    if (e10 >= 0) {
        mpz_mul(mpq_numref(out), mpq_numref(out), t);
    } else {
        mpz_set(mpq_denref(out), t);
        mpq_canonicalize(out);
    }
    if (neg)
        mpq_neg(out, out);
    mpz_clear(t);
    mpz_clear(m);
    return true;
}

/* Exact root: sets out = x^(1/n) when it is rational. */
static bool
q_root(mpq_t x, unsigned long n, mpq_t out)
{
    if (mpq_sgn(x) < 0 && n % 2 == 0)
        return false;
    mpz_t a, b;
    mpz_inits(a, b, NULL);
    bool ok = mpz_root(a, mpq_numref(x), n) != 0 && mpz_root(b, mpq_denref(x), n) != 0;
    if (ok) {
        mpz_set(mpq_numref(out), a);
        mpz_set(mpq_denref(out), b);
        mpq_canonicalize(out);
    }
    mpz_clears(a, b, NULL);
    return ok;
}

static bool qeval(qctx *c, const mnode *e, mpq_t out, int depth);

static bool
q_pow(qctx *c, const mnode *e, mpq_t out, int depth)
{
    mpq_t b, x;
    bool ok = false;
    mpq_inits(b, x, NULL);
    if (!qeval(c, e->kids[0], b, depth + 1) || !qeval(c, e->kids[1], x, depth + 1))
        goto done;
    if (!mpz_fits_slong_p(mpq_numref(x)) || !mpz_fits_ulong_p(mpq_denref(x)))
        goto done;
    long p = mpz_get_si(mpq_numref(x));
    unsigned long q = mpz_get_ui(mpq_denref(x));
    if (q > 16)
        goto done;
    size_t bits = mpz_sizeinbase(mpq_numref(b), 2) + mpz_sizeinbase(mpq_denref(b), 2);
    unsigned long ap = (unsigned long)(p < 0 ? -p : p);
    if ((double)bits * (double)ap > (double)MAX_POW_BITS)
        goto done;
    if (!mb_step(c->bud, (int64_t)(bits * ap / 64 + 1)))
        goto done;
    if (mpq_sgn(b) == 0 && p < 0)
        goto done;
    if (q > 1 && !q_root(b, q, b))
        goto done;
    mpz_pow_ui(mpq_numref(out), mpq_numref(b), ap);
    mpz_pow_ui(mpq_denref(out), mpq_denref(b), ap);
    mpq_canonicalize(out);
    if (p < 0)
        mpq_inv(out, out);
    ok = true;
done:
    mpq_clears(b, x, NULL);
    return ok;
}

static bool
q_func(qctx *c, const mnode *e, mpq_t out, int depth)
{
    const char *f = e->str;
    if (e->n == 1 && (strcmp(f, "sqrt") == 0 || strcmp(f, "abs") == 0 || strcmp(f, "floor") == 0 ||
                      strcmp(f, "ceil") == 0)) {
        if (!qeval(c, e->kids[0], out, depth + 1))
            return false;
        if (f[0] == 's')
            return q_root(out, 2, out);
        if (f[0] == 'a') {
            mpq_abs(out, out);
            return true;
        }
        mpz_t r;
        mpz_init(r);
        if (f[0] == 'f')
            mpz_fdiv_q(r, mpq_numref(out), mpq_denref(out));
        else
            mpz_cdiv_q(r, mpq_numref(out), mpq_denref(out));
        mpq_set_z(out, r);
        mpz_clear(r);
        return true;
    }
    if (e->n == 2 && (strcmp(f, "root") == 0 || strcmp(f, "binom") == 0)) {
        mpq_t a, b;
        bool ok = false;
        mpq_inits(a, b, NULL);
        if (!qeval(c, e->kids[0], a, depth + 1) || !qeval(c, e->kids[1], b, depth + 1) ||
            mpz_cmp_ui(mpq_denref(b), 1) != 0 || !mpz_fits_ulong_p(mpq_numref(b)))
            goto done2;
        unsigned long k = mpz_get_ui(mpq_numref(b));
        if (f[0] == 'r') {
            ok = k >= 1 && k <= 64 && q_root(a, k, out);
        } else if (mpz_cmp_ui(mpq_denref(a), 1) == 0 && mpz_fits_ulong_p(mpq_numref(a)) &&
                   mpz_get_ui(mpq_numref(a)) <= MAX_FACT_EXACT) {
            unsigned long n = mpz_get_ui(mpq_numref(a));
            mpz_bin_uiui(mpq_numref(out), n, k);
            mpz_set_ui(mpq_denref(out), 1);
            ok = mb_step(c->bud, (int64_t)n);
        }
    done2:
        mpq_clears(a, b, NULL);
        return ok;
    }
    return false;
}

static bool
qeval(qctx *c, const mnode *e, mpq_t out, int depth)
{
    if (depth > 400 || !mb_step(c->bud, 1))
        return false;
    switch (e->kind) {
    case N_NUM:
        return q_from_literal(e->str, out);
    case N_ADD:
    case N_MUL: {
        mpq_t t;
        mpq_init(t);
        mpq_set_ui(out, e->kind == N_MUL ? 1 : 0, 1);
        bool ok = true;
        for (int k = 0; k < e->n && ok; k++) {
            ok = qeval(c, e->kids[k], t, depth + 1);
            if (ok && e->kind == N_ADD)
                mpq_add(out, out, t);
            else if (ok)
                mpq_mul(out, out, t);
            size_t bits = mpz_sizeinbase(mpq_numref(out), 2) + mpz_sizeinbase(mpq_denref(out), 2);
            if (ok && (bits > (size_t)MAX_POW_BITS || !mb_step(c->bud, (int64_t)(bits / 256))))
                ok = false;
        }
        mpq_clear(t);
        return ok;
    }
    case N_NEG:
        if (!qeval(c, e->kids[0], out, depth + 1))
            return false;
        mpq_neg(out, out);
        return true;
    case N_PCT:
        if (!qeval(c, e->kids[0], out, depth + 1))
            return false;
        mpz_mul_ui(mpq_denref(out), mpq_denref(out), 100);
        mpq_canonicalize(out);
        return true;
    case N_DIV: {
        mpq_t t;
        mpq_init(t);
        bool ok = qeval(c, e->kids[0], out, depth + 1) && qeval(c, e->kids[1], t, depth + 1) &&
                  mpq_sgn(t) != 0;
        if (ok)
            mpq_div(out, out, t);
        mpq_clear(t);
        return ok;
    }
    case N_POW:
        return q_pow(c, e, out, depth);
    case N_FACT: {
        if (!qeval(c, e->kids[0], out, depth + 1) || mpz_cmp_ui(mpq_denref(out), 1) != 0 ||
            mpq_sgn(out) < 0 || mpz_cmp_ui(mpq_numref(out), MAX_FACT_EXACT) > 0)
            return false;
        unsigned long n = mpz_get_ui(mpq_numref(out));
        if (!mb_step(c->bud, (int64_t)n * 4))
            return false;
        mpz_fac_ui(mpq_numref(out), n);
        return true;
    }
    case N_PM: {
        mpq_t t;
        int bit = c->pm_next++;
        mpq_init(t);
        bool ok = qeval(c, e->kids[0], out, depth + 1) && qeval(c, e->kids[1], t, depth + 1);
        if (ok) {
            if (c->pm_mask >> bit & 1)
                mpq_sub(out, out, t);
            else
                mpq_add(out, out, t);
        }
        mpq_clear(t);
        return ok;
    }
    case N_FUNC:
        return q_func(c, e, out, depth);
    default:
        return false;
    }
}

/* ---- numeric evaluation (MPFR) ------------------------------------------------------------ */

typedef struct nctx {
    cctx *c;
    int point;
    bool is_pred; /* apply the non-strict renaming */
    unsigned pm_mask;
    int pm_next;
} nctx;

static uint64_t
mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static uint64_t
hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/* Seeded value of a variable at a point: positive points first, then negative ones. */
static void
var_value(nctx *n, const char *name, mpfr_t out)
{
    if (n->is_pred)
        for (int k = 0; k < n->c->nmap; k++)
            if (strcmp(n->c->from[k], name) == 0) {
                name = n->c->to[k];
                break;
            }
    uint64_t h = mix(hash_str(name) ^ mix((uint64_t)n->point + 12345));
    double u = (double)(h >> 11) / 9007199254740992.0;
    double v = 0.31 + 2.9 * u;
    if (n->point >= 6)
        v = n->point >= 9 ? -v : v * 4;
    mpfr_set_d(out, v, MPFR_RNDN);
}

static bool neval(nctx *n, const mnode *e, mpfr_t out, int depth);

static bool
n_unknown_func(nctx *n, const mnode *e, mpfr_t out, int depth)
{
    /* f(x): a fixed smooth pseudo-random function of its arguments, so f(x) = f(x) and
     * f(x) != f(y) without knowing f */
    mpfr_t t;
    mpfr_init2(t, PREC);
    uint64_t h = hash_str(e->str);
    mpfr_set_d(out, (double)(h % 1000) / 997.0, MPFR_RNDN);
    bool ok = true;
    for (int k = 0; k < e->n && ok; k++) {
        ok = neval(n, e->kids[k], t, depth + 1);
        h = mix(h);
        mpfr_mul_d(t, t, 0.5 + (double)(h % 1000) / 1000.0, MPFR_RNDN);
        mpfr_add(out, out, t, MPFR_RNDN);
    }
    mpfr_sin(out, out, MPFR_RNDN);
    mpfr_clear(t);
    return ok;
}

static int
m_abs(mpfr_ptr r, mpfr_srcptr a, mpfr_rnd_t rnd)
{
    return mpfr_abs(r, a, rnd);
}

static int
m_floor(mpfr_ptr r, mpfr_srcptr a, mpfr_rnd_t rnd)
{
    (void)rnd;
    return mpfr_floor(r, a);
}

static int
m_ceil(mpfr_ptr r, mpfr_srcptr a, mpfr_rnd_t rnd)
{
    (void)rnd;
    return mpfr_ceil(r, a);
}

/* Functions of one argument; "trig" ones get no argument reduction at huge sizes (below). */
static const struct {
    const char *name;
    int (*fn)(mpfr_ptr, mpfr_srcptr, mpfr_rnd_t);
    bool trig;
} UNARY_FNS[] = {
    {"sqrt", mpfr_sqrt, false},   {"sin", mpfr_sin, true},      {"cos", mpfr_cos, true},
    {"tan", mpfr_tan, true},      {"sec", mpfr_sec, true},      {"csc", mpfr_csc, true},
    {"cot", mpfr_cot, true},      {"arcsin", mpfr_asin, false}, {"arccos", mpfr_acos, false},
    {"arctan", mpfr_atan, false}, {"sinh", mpfr_sinh, false},   {"cosh", mpfr_cosh, false},
    {"tanh", mpfr_tanh, false},   {"ln", mpfr_log, false},      {"log", mpfr_log, false},
    {"exp", mpfr_exp, false},     {"abs", m_abs, false},        {"floor", m_floor, false},
    {"ceil", m_ceil, false}};
/* Functions evaluated here with more than one argument (log with a base, root with an index). */
static const char *const MULTI_FNS[] = {"root", "log", "binom", "max", "min", NULL};

static bool
multi_fn(const char *f)
{
    for (int k = 0; MULTI_FNS[k]; k++)
        if (strcmp(MULTI_FNS[k], f) == 0)
            return true;
    return false;
}

static int
unary_fn(const char *f)
{
    for (int k = 0; k < (int)(sizeof UNARY_FNS / sizeof UNARY_FNS[0]); k++)
        if (strcmp(UNARY_FNS[k].name, f) == 0)
            return k;
    return -1;
}

/* binom(a, b) = Gamma(a+1) / (Gamma(b+1) Gamma(a-b+1)), rounded; a and b are overwritten. */
static void
m_binom(mpfr_t out, mpfr_t a, mpfr_t b)
{
    mpfr_t c;
    mpfr_init2(c, PREC);
    mpfr_sub(c, a, b, MPFR_RNDN);
    mpfr_add_ui(a, a, 1, MPFR_RNDN);
    mpfr_add_ui(b, b, 1, MPFR_RNDN);
    mpfr_add_ui(c, c, 1, MPFR_RNDN);
    mpfr_lngamma(a, a, MPFR_RNDN);
    mpfr_lngamma(b, b, MPFR_RNDN);
    mpfr_lngamma(c, c, MPFR_RNDN);
    mpfr_sub(a, a, b, MPFR_RNDN);
    mpfr_sub(a, a, c, MPFR_RNDN);
    mpfr_exp(out, a, MPFR_RNDN);
    mpfr_round(out, out);
    mpfr_clear(c);
}

/* root(a, b) (the b-th root), log(a, b) (base b), binom(a, b); a and b may be overwritten. */
static bool
m_binary(const char *f, mpfr_t out, mpfr_t a, mpfr_t b)
{
    if (strcmp(f, "root") == 0) {
        if (mpfr_integer_p(b) && mpfr_fits_ulong_p(b, MPFR_RNDN) && mpfr_get_ui(b, MPFR_RNDN) > 0)
            mpfr_rootn_ui(out, a, mpfr_get_ui(b, MPFR_RNDN), MPFR_RNDN);
        else {
            mpfr_ui_div(b, 1, b, MPFR_RNDN);
            mpfr_pow(out, a, b, MPFR_RNDN);
        }
    } else if (strcmp(f, "log") == 0) {
        mpfr_log(a, a, MPFR_RNDN);
        mpfr_log(b, b, MPFR_RNDN);
        mpfr_div(out, a, b, MPFR_RNDN);
    } else if (strcmp(f, "binom") == 0) {
        m_binom(out, a, b);
    } else {
        return false;
    }
    return true;
}

/* max/min over all of e's kids; the first is already in a; b is scratch. */
static bool
n_minmax(nctx *n, const mnode *e, mpfr_t out, mpfr_t a, mpfr_t b, int depth)
{
    bool ok = true;
    mpfr_set(out, a, MPFR_RNDN);
    for (int k = 1; k < e->n && ok; k++) {
        ok = neval(n, e->kids[k], b, depth + 1);
        if (e->str[1] == 'a')
            mpfr_max(out, out, b, MPFR_RNDN);
        else
            mpfr_min(out, out, b, MPFR_RNDN);
    }
    return ok;
}

static bool
n_func(nctx *n, const mnode *e, mpfr_t out, int depth)
{
    const char *f = e->str;
    if (e->n == 0)
        return false;
    int u = unary_fn(f);
    if (u < 0 && !multi_fn(f))
        return n_unknown_func(n, e, out, depth);
    mpfr_t a, b;
    mpfr_inits2(PREC, a, b, (mpfr_ptr)0);
    bool ok = neval(n, e->kids[0], a, depth + 1);
    if (ok && e->n > 1)
        ok = neval(n, e->kids[1], b, depth + 1);
    if (!ok)
        goto done;
    /* trig of a huge argument needs argument reduction at the argument's size in bits: treat it
     * as not evaluable instead of spending minutes on it */
    if (u >= 0 && UNARY_FNS[u].trig && mpfr_number_p(a) && mpfr_get_exp(a) > 64)
        mpfr_set_nan(out);
    else if (strcmp(f, "max") == 0 || strcmp(f, "min") == 0)
        ok = n_minmax(n, e, out, a, b, depth);
    else if (e->n == 2)
        ok = m_binary(f, out, a, b);
    else if (e->n == 1 && u >= 0)
        UNARY_FNS[u].fn(out, a, MPFR_RNDN);
    else
        ok = false;
done:
    mpfr_clears(a, b, (mpfr_ptr)0);
    return ok;
}

/* kids[0] op kids[1] op ... left to right (N_ADD, N_MUL, N_DIV, N_POW; N_PM adds or subtracts
 * each term as its bit in pm_mask says). */
static bool
neval_fold(nctx *n, const mnode *e, mpfr_t out, int depth)
{
    mpfr_t t;
    mpfr_init2(t, PREC);
    bool ok = neval(n, e->kids[0], out, depth + 1);
    int bit = e->kind == N_PM ? n->pm_next++ : 0;
    for (int k = 1; k < e->n && ok; k++) {
        ok = neval(n, e->kids[k], t, depth + 1);
        if (!ok)
            break;
        if (e->kind == N_ADD)
            mpfr_add(out, out, t, MPFR_RNDN);
        else if (e->kind == N_MUL)
            mpfr_mul(out, out, t, MPFR_RNDN);
        else if (e->kind == N_DIV)
            mpfr_div(out, out, t, MPFR_RNDN);
        else if (e->kind == N_POW)
            mpfr_pow(out, out, t, MPFR_RNDN);
        else if (n->pm_mask >> bit & 1)
            mpfr_sub(out, out, t, MPFR_RNDN);
        else
            mpfr_add(out, out, t, MPFR_RNDN);
    }
    mpfr_clear(t);
    return ok;
}

/* -x, x%, x! (exact factorial for integers up to MAX_FACT_NUM, else Gamma(x + 1)). */
static bool
neval_unary(nctx *n, const mnode *e, mpfr_t out, int depth)
{
    if (!neval(n, e->kids[0], out, depth + 1))
        return false;
    if (e->kind == N_NEG) {
        mpfr_neg(out, out, MPFR_RNDN);
    } else if (e->kind == N_PCT) {
        mpfr_div_ui(out, out, 100, MPFR_RNDN);
    } else if (mpfr_integer_p(out) && mpfr_sgn(out) >= 0 && mpfr_cmp_ui(out, MAX_FACT_NUM) <= 0) {
        unsigned long k = mpfr_get_ui(out, MPFR_RNDN);
        if (!mb_step(n->c->bud, (int64_t)k))
            return false;
        mpfr_fac_ui(out, k, MPFR_RNDN);
    } else {
        mpfr_add_ui(out, out, 1, MPFR_RNDN);
        mpfr_gamma(out, out, MPFR_RNDN);
    }
    return true;
}

static bool
neval(nctx *n, const mnode *e, mpfr_t out, int depth)
{
    if (depth > 400 || !mb_step(n->c->bud, 1))
        return false;
    switch (e->kind) {
    case N_NUM: {
        mpq_t q;
        mpq_init(q);
        bool ok = q_from_literal(e->str, q);
        if (ok)
            mpfr_set_q(out, q, MPFR_RNDN);
        mpq_clear(q);
        return ok;
    }
    case N_SYM:
        if (strcmp(e->str, "e") == 0) {
            mpfr_set_ui(out, 1, MPFR_RNDN);
            mpfr_exp(out, out, MPFR_RNDN);
        } else
            var_value(n, e->str, out);
        return true;
    case N_PI:
        mpfr_const_pi(out, MPFR_RNDN);
        return true;
    case N_INF:
        mpfr_set_inf(out, 1);
        return true;
    case N_ADD:
    case N_MUL:
    case N_DIV:
    case N_POW:
    case N_PM:
        return neval_fold(n, e, out, depth);
    case N_NEG:
    case N_PCT:
    case N_FACT:
        return neval_unary(n, e, out, depth);
    case N_FUNC:
        return n_func(n, e, out, depth);
    default:
        return false;
    }
}

/* ---- scalar comparison -------------------------------------------------------------------- */

/* Rounds x to `prec` decimals into an integer z (x * 10^prec, nearest). */
static void
round_dec(mpfr_t x, int prec, mpz_t z)
{
    mpfr_t t;
    mpfr_init2(t, PREC);
    mpfr_ui_pow_ui(t, 10, (unsigned long)prec, MPFR_RNDN);
    mpfr_mul(t, t, x, MPFR_RNDN);
    mpfr_round(t, t);
    mpfr_get_z(z, t, MPFR_RNDN);
    mpfr_clear(t);
}

static bool
close_enough(mpfr_t g, mpfr_t p, bool floats, int prec)
{
    /* rounding to `prec` places only means something for moderate magnitudes (and turning a
     * 10^(10^8) into an integer would take the budget's time in one call) */
    if (floats && mpfr_number_p(g) && mpfr_number_p(p) && mpfr_get_exp(g) < 200 &&
        mpfr_get_exp(p) < 200) {
        mpz_t a, b;
        mpz_inits(a, b, NULL);
        round_dec(g, prec, a);
        round_dec(p, prec, b);
        bool eq = mpz_cmp(a, b) == 0;
        if (eq && prec > 2) { /* and relatively close (see rel_close_q) */
            mpfr_t d, m;
            mpfr_inits2(PREC, d, m, (mpfr_ptr)0);
            mpfr_sub(d, g, p, MPFR_RNDN);
            mpfr_abs(d, d, MPFR_RNDN);
            mpfr_abs(m, mpfr_cmpabs(g, p) >= 0 ? g : p, MPFR_RNDN);
            mpfr_t t;
            mpfr_init2(t, PREC);
            mpfr_ui_pow_ui(t, 10, (unsigned long)(prec - 2), MPFR_RNDN);
            mpfr_div(m, m, t, MPFR_RNDN);
            mpfr_clear(t);
            eq = mpfr_cmp(d, m) <= 0;
            mpfr_clears(d, m, (mpfr_ptr)0);
        }
        mpz_clears(a, b, NULL);
        if (eq)
            return true;
    }
    mpfr_t d, m;
    mpfr_inits2(PREC, d, m, (mpfr_ptr)0);
    mpfr_sub(d, g, p, MPFR_RNDN);
    mpfr_abs(d, d, MPFR_RNDN);
    mpfr_abs(m, g, MPFR_RNDN);
    if (mpfr_cmp_ui(m, 1) < 0)
        mpfr_set_ui(m, 1, MPFR_RNDN);
    mpfr_mul_d(m, m, floats ? 1e-12 : 1e-40, MPFR_RNDN);
    bool eq = mpfr_cmp(d, m) <= 0;
    mpfr_clears(d, m, (mpfr_ptr)0);
    return eq;
}

static mcmp_res
structural(const mnode *g, const mnode *p)
{
    char a[2048], b[2048];
    mnode_print(g, a, sizeof a);
    mnode_print(p, b, sizeof b);
    /* a print cut short proves nothing: only complete prints may compare equal */
    if (strlen(a) + 16 >= sizeof a || strstr(a, "...") != NULL)
        return MC_NE;
    return strcmp(a, b) == 0 ? MC_EQ : MC_NE;
}

/* Rounding equality alone would make 1e-8 equal 2e-8 at six places: also ask that the relative
 * difference be below 10^(2 - precision). */
static bool
rel_close_q(const mpq_t a, const mpq_t b, int prec)
{
    if (prec <= 2)
        return true;
    mpq_t d, m, t;
    mpq_inits(d, m, t, NULL);
    mpq_sub(d, a, b);
    mpq_abs(d, d);
    mpq_abs(m, a);
    mpq_abs(t, b);
    if (mpq_cmp(t, m) > 0)
        mpq_set(m, t);
    mpz_ui_pow_ui(mpq_denref(t), 10, (unsigned long)(prec - 2));
    mpz_set_ui(mpq_numref(t), 1);
    mpq_canonicalize(t);
    mpq_mul(m, m, t);
    bool ok = mpq_cmp(d, m) <= 0;
    mpq_clears(d, m, t, NULL);
    return ok;
}

/* Exact comparison when both sides evaluate to rationals. Returns -1 when it cannot decide. */
static int
exact_eq(cctx *c, const mnode *g, unsigned gm, const mnode *p, unsigned pm, bool floats)
{
    qctx qg = {c->bud, gm, 0}, qp = {c->bud, pm, 0};
    mpq_t a, b;
    int r = -1;
    mpq_inits(a, b, NULL);
    if (qeval(&qg, g, a, 0) && qeval(&qp, p, b, 0)) {
        if (mpq_equal(a, b))
            r = 1;
        else if (!floats || (mpz_cmp_ui(mpq_denref(a), 1) == 0 && !has_float(g, 0)))
            r = 0; /* exact sides, or an integer gold: no tolerance */
        else {
            /* decimals: round both to `precision` places */
            mpz_t s, ra, rb;
            mpz_inits(s, ra, rb, NULL);
            mpz_ui_pow_ui(s, 10, (unsigned long)c->o->precision);
            mpq_t t;
            mpq_init(t);
            mpq_set_z(t, s);
            mpq_mul(t, t, a);
            /* round half away from zero: floor(t + 1/2) for t >= 0 */
            mpz_mul_ui(ra, mpq_numref(t), 2);
            mpz_add(ra, ra, mpq_denref(t));
            mpz_mul_ui(s, mpq_denref(t), 2);
            mpz_fdiv_q(ra, ra, s);
            mpz_ui_pow_ui(s, 10, (unsigned long)c->o->precision);
            mpq_set_z(t, s);
            mpq_mul(t, t, b);
            mpz_mul_ui(rb, mpq_numref(t), 2);
            mpz_add(rb, rb, mpq_denref(t));
            mpz_mul_ui(s, mpq_denref(t), 2);
            mpz_fdiv_q(rb, rb, s);
            r = mpz_cmp(ra, rb) == 0 && rel_close_q(a, b, c->o->precision);
            mpq_clear(t);
            mpz_clears(s, ra, rb, NULL);
        }
    }
    mpq_clears(a, b, NULL);
    return r;
}

static mcmp_res
value_eq(cctx *c, const mnode *g, unsigned gm, const mnode *p, unsigned pm)
{
    if (c->bud->exhausted)
        return MC_BUDGET;
    bool floats = has_float(g, 0) || has_float(p, 0);
    const char *vars[2 * MAX_VARS];
    int nv = 0;
    collect_vars(g, vars, &nv, 0);
    collect_vars(p, vars, &nv, 0);
    if (nv == 0) {
        int r = exact_eq(c, g, gm, p, pm, floats);
        if (c->bud->exhausted)
            return MC_BUDGET;
        if (r >= 0)
            return r ? MC_EQ : MC_NE;
    }
    mpfr_t a, b;
    mpfr_inits2(PREC, a, b, (mpfr_ptr)0);
    int good = 0;
    mcmp_res res = MC_NE;
    bool decided = false;
    for (int pt = 0; pt < (nv ? MAX_POINTS : 1) && !decided; pt++) {
        nctx ng = {c, pt, false, gm, 0}, np = {c, pt, true, pm, 0};
        mpfr_clear_flags();
        bool ok = neval(&ng, g, a, 0) && neval(&np, p, b, 0);
        if (c->bud->exhausted) {
            res = MC_BUDGET;
            decided = true;
            break;
        }
        if (!ok)
            break;
        if (mpfr_overflow_p() || mpfr_underflow_p()) {
            res = structural(g, p);
            decided = true;
            break;
        }
        if (mpfr_divby0_p()) {
            /* 1/0 vs 2/0: two infinities from division by zero are not a value to compare */
            res = structural(g, p);
            decided = true;
            break;
        }
        if (mpfr_nan_p(a) || mpfr_nan_p(b))
            continue; /* outside a side's domain: try another point */
        if (mpfr_inf_p(a) || mpfr_inf_p(b)) {
            if (nv == 0) {
                res =
                    (mpfr_inf_p(a) && mpfr_inf_p(b) && mpfr_sgn(a) == mpfr_sgn(b)) ? MC_EQ : MC_NE;
                decided = true;
            }
            continue;
        }
        if (!close_enough(a, b, floats, c->o->precision)) {
            res = MC_NE;
            decided = true;
            break;
        }
        good++;
        if (nv == 0 || good >= 4) {
            res = MC_EQ;
            decided = true;
        }
    }
    mpfr_clears(a, b, (mpfr_ptr)0);
    if (!decided)
        res = good >= 2 ? MC_EQ : structural(g, p);
    return res;
}

/* ---- structure ---------------------------------------------------------------------------- */

static mcmp_res cmp(cctx *c, const mnode *g, const mnode *p, int depth);

static mnode *
mk(cctx *c, mkind k, int n)
{
    mnode *e = ma_alloc(c->ar, sizeof *e);
    if (e == NULL)
        return NULL;
    e->kind = k;
    e->n = n;
    if (n && (e->kids = ma_alloc(c->ar, (size_t)n * sizeof *e->kids)) == NULL)
        return NULL;
    return e;
}

/* The quotient a/b of a ratio a:b (the ratio itself when out of memory). */
static const mnode *
quotient(cctx *c, const mnode *r)
{
    mnode *d = mk(c, N_DIV, 2);
    if (d == NULL)
        return r;
    d->kids[0] = r->kids[0];
    d->kids[1] = r->kids[1];
    return d;
}

/* Replaces each ± by + or - according to mask (in evaluation order). */
static mnode *
resolve_pm(cctx *c, const mnode *e, unsigned mask, int *next, int depth)
{
    if (depth > 200)
        return NULL;
    if (e->n == 0)
        return (mnode *)e;
    mnode *r = mk(c, e->kind, e->n);
    if (r == NULL)
        return NULL;
    *r = *e;
    if ((r->kids = ma_alloc(c->ar, (size_t)e->n * sizeof *r->kids)) == NULL)
        return NULL;
    int bit = e->kind == N_PM ? (*next)++ : -1;
    for (int k = 0; k < e->n; k++)
        if ((r->kids[k] = resolve_pm(c, e->kids[k], mask, next, depth + 1)) == NULL)
            return NULL;
    if (bit >= 0) {
        r->kind = N_ADD;
        if (mask >> bit & 1) {
            mnode *neg = mk(c, N_NEG, 1);
            if (neg == NULL)
                return NULL;
            neg->kids[0] = r->kids[1];
            r->kids[1] = neg;
        }
    }
    return r;
}

/* x ± y as the set {x + y, x - y}. */
static const mnode *
expand_pm(cctx *c, const mnode *e)
{
    int k = count_pm(e, 0);
    if (k == 0 || k > 4)
        return e;
    mnode *s = mk(c, N_SET, 1 << k);
    if (s == NULL)
        return e;
    for (unsigned m = 0; m < (1u << k); m++) {
        int next = 0;
        if ((s->kids[m] = resolve_pm(c, e, m, &next, 0)) == NULL)
            return e;
    }
    return s;
}

static bool
is_setlike(const mnode *e)
{
    return e->kind == N_SET || e->kind == N_LIST || e->kind == N_EMPTY;
}

/* Set equality: every gold element is in the prediction and every predicted element is in the
 * gold (duplicates collapse, as in a set). */
static mcmp_res
covers(cctx *c, const mnode *a, const mnode *b, bool a_is_gold, int depth)
{
    for (int i = 0; i < a->n; i++) {
        bool found = false;
        for (int j = 0; j < b->n && !found; j++) {
            mcmp_res r = a_is_gold ? cmp(c, a->kids[i], b->kids[j], depth + 1)
                                   : cmp(c, b->kids[j], a->kids[i], depth + 1);
            if (r == MC_BUDGET)
                return r;
            found = r == MC_EQ;
        }
        if (!found)
            return MC_NE;
    }
    return MC_EQ;
}

static mcmp_res
unordered(cctx *c, const mnode *g, const mnode *p, int depth)
{
    if (g->n == 0 || p->n == 0)
        return g->n == p->n ? MC_EQ : MC_NE;
    if ((int64_t)g->n * p->n > 4096)
        return structural(g, p);
    mcmp_res r = covers(c, g, p, true, depth);
    return r == MC_EQ ? covers(c, p, g, false, depth) : r;
}

static mcmp_res
ordered(cctx *c, const mnode *g, const mnode *p, int depth)
{
    if (g->n != p->n)
        return MC_NE;
    for (int i = 0; i < g->n; i++) {
        mcmp_res r = cmp(c, g->kids[i], p->kids[i], depth + 1);
        if (r != MC_EQ)
            return r;
    }
    return MC_EQ;
}

static mcmp_res
interval_eq(cctx *c, const mnode *g, const mnode *p, int depth)
{
    bool glo = g->kind == N_INTERVAL ? g->lopen : true,
         gro = g->kind == N_INTERVAL ? g->ropen : true;
    bool plo = p->kind == N_INTERVAL ? p->lopen : true,
         pro = p->kind == N_INTERVAL ? p->ropen : true;
    if (glo != plo || gro != pro)
        return MC_NE;
    return ordered(c, g, p, depth);
}

/* x < 3 -> (-inf, 3); 1 < x <= 2 -> (1, 2]; x = 3 -> {3}. NULL when not of that shape. */
static mnode *
rel_to_set(cctx *c, const mnode *r)
{
    if (r->kind != N_REL || r->n < 2 || r->n > 3)
        return NULL;
    int xi = -1;
    for (int k = 0; k < r->n && xi < 0; k++) {
        const char *v[MAX_VARS];
        int nv = 0;
        collect_vars(r->kids[k], v, &nv, 0);
        if (nv > 0)
            xi = k;
    }
    if (xi < 0)
        return NULL;
    mnode *inf = mk(c, N_INF, 0), *ninf = mk(c, N_NEG, 1);
    mnode *iv = mk(c, N_INTERVAL, 2);
    if (inf == NULL || ninf == NULL || iv == NULL)
        return NULL;
    ninf->kids[0] = inf;
    iv->kids[0] = ninf;
    iv->kids[1] = inf;
    iv->lopen = iv->ropen = true;
    for (int k = 0; k + 1 < r->n; k++) {
        char op = r->ops[k];
        const mnode *other;
        bool x_left;
        if (k == xi)
            other = r->kids[k + 1], x_left = true;
        else if (k + 1 == xi)
            other = r->kids[k], x_left = false;
        else
            return NULL;
        if (op == R_EQ && r->n == 2) {
            mnode *s = mk(c, N_SET, 1);
            if (s)
                s->kids[0] = (mnode *)other;
            return s;
        }
        bool upper = (op == R_LT || op == R_LE) == x_left; /* x < a: a is an upper bound */
        bool open = op == R_LT || op == R_GT;
        if (op != R_LT && op != R_LE && op != R_GT && op != R_GE)
            return NULL;
        if (upper) {
            iv->kids[1] = (mnode *)other;
            iv->ropen = open;
        } else {
            iv->kids[0] = (mnode *)other;
            iv->lopen = open;
        }
    }
    return iv;
}

static char
flip(char op)
{
    switch (op) {
    case R_LT:
        return R_GT;
    case R_GT:
        return R_LT;
    case R_LE:
        return R_GE;
    case R_GE:
        return R_LE;
    default:
        return op;
    }
}

/* (gl - gr) = k (pl - pr) with one constant k (k > 0 when positive is set). */
static mcmp_res
proportional(cctx *c, const mnode *gl, const mnode *gr, const mnode *pl, const mnode *pr,
             bool positive)
{
    mnode *gd = mk(c, N_ADD, 2), *pd = mk(c, N_ADD, 2), *gn = mk(c, N_NEG, 1),
          *pn = mk(c, N_NEG, 1);
    if (!gd || !pd || !gn || !pn)
        return MC_NE;
    gn->kids[0] = (mnode *)gr;
    pn->kids[0] = (mnode *)pr;
    gd->kids[0] = (mnode *)gl;
    gd->kids[1] = gn;
    pd->kids[0] = (mnode *)pl;
    pd->kids[1] = pn;
    mpfr_t a, b, k0, t;
    mpfr_inits2(PREC, a, b, k0, t, (mpfr_ptr)0);
    int good = 0;
    mcmp_res res = MC_NE;
    bool have_k = false, bad = false;
    for (int pt = 0; pt < MAX_POINTS && !bad && good < 4; pt++) {
        nctx ng = {c, pt, false, 0, 0}, np = {c, pt, true, 0, 0};
        if (!neval(&ng, gd, a, 0) || !neval(&np, pd, b, 0)) {
            bad = true;
            break;
        }
        if (!mpfr_number_p(a) || !mpfr_number_p(b))
            continue;
        bool za = mpfr_cmpabs_ui(a, 0) == 0, zb = mpfr_cmpabs_ui(b, 0) == 0;
        mpfr_set_d(t, 1e-40, MPFR_RNDN);
        za = za || mpfr_cmpabs(a, t) < 0;
        zb = zb || mpfr_cmpabs(b, t) < 0;
        if (za && zb)
            continue;
        if (za != zb) {
            bad = true;
            break;
        }
        mpfr_div(t, a, b, MPFR_RNDN);
        if (!have_k) {
            mpfr_set(k0, t, MPFR_RNDN);
            have_k = true;
            if (positive && mpfr_sgn(k0) < 0) {
                bad = true;
                break;
            }
        } else if (!close_enough(k0, t, false, 0)) {
            bad = true;
            break;
        }
        good++;
    }
    if (!bad && good >= 2)
        res = MC_EQ;
    if (c->bud->exhausted)
        res = MC_BUDGET;
    mpfr_clears(a, b, k0, t, (mpfr_ptr)0);
    return res;
}

static mcmp_res
rel_eq(cctx *c, const mnode *g, const mnode *p, int depth)
{
    if (g->n != p->n)
        return MC_NE;
    if (g->n == 2) {
        char go = g->ops[0], po = p->ops[0];
        if (go == R_IN || po == R_IN)
            return go == po ? ordered(c, g, p, depth) : MC_NE;
        if (go == R_EQ || go == R_NE)
            return go != po
                       ? MC_NE
                       : proportional(c, g->kids[0], g->kids[1], p->kids[0], p->kids[1], false);
        if (po == go)
            return proportional(c, g->kids[0], g->kids[1], p->kids[0], p->kids[1], true);
        if (po == flip(go))
            return proportional(c, g->kids[0], g->kids[1], p->kids[1], p->kids[0], true);
        return MC_NE;
    }
    /* chains: same operators (or all flipped, read backwards), operands equal */
    bool same = memcmp(g->ops, p->ops, (size_t)g->n - 1) == 0;
    if (same)
        return ordered(c, g, p, depth);
    for (int k = 0; k < g->n - 1; k++)
        if (p->ops[g->n - 2 - k] != flip(g->ops[k]))
            return MC_NE;
    for (int k = 0; k < g->n; k++) {
        mcmp_res r = cmp(c, g->kids[k], p->kids[g->n - 1 - k], depth + 1);
        if (r != MC_EQ)
            return r;
    }
    return MC_EQ;
}

static bool
only_eq(const mnode *r)
{
    for (int k = 0; k + 1 < r->n; k++)
        if (r->ops[k] != R_EQ && r->ops[k] != R_IN)
            return false;
    return true;
}

/* Does e contain only symbols at its leaves (AB, |AB|, (p, q), f(x), NO/BO)? */
static bool
only_symbols(const mnode *e, int depth)
{
    if (depth > 50)
        return false;
    if (e->kind == N_SYM)
        return true;
    if (e->kind == N_NUM || e->kind == N_PI || e->kind == N_INF || e->n == 0)
        return false;
    for (int k = 0; k < e->n; k++)
        if (!only_symbols(e->kids[k], depth + 1))
            return false;
    return true;
}

/* x = 3, y = 2x + 1, (p, q) = (3, 2): names on the left of '=' */
static bool
is_assignment(const mnode *r)
{
    return r->kind == N_REL && only_eq(r) && only_symbols(r->kids[0], 0);
}

/* x = a = b = 3 -> x = 3 (first left side, last right side) */
static const mnode *
first_last(cctx *c, const mnode *r)
{
    if (r->n <= 2)
        return r;
    mnode *e = mk(c, N_REL, 2);
    if (e == NULL)
        return r;
    e->kids[0] = r->kids[0];
    e->kids[1] = r->kids[r->n - 1];
    e->ops = (char *)(r->ops[r->n - 2] == R_IN ? "i" : "=");
    return e;
}

static bool
is_ineq(const mnode *r)
{
    if (r->kind != N_REL)
        return false;
    for (int k = 0; k + 1 < r->n; k++)
        if (r->ops[k] != R_LT && r->ops[k] != R_LE && r->ops[k] != R_GT && r->ops[k] != R_GE)
            return false;
    return true;
}

/* Concatenated names of a product of single letters ("odd" written as o*d*d). */
static bool
letters(const mnode *e, char *buf, size_t cap)
{
    size_t n = 0;
    if (e->kind == N_SYM) {
        snprintf(buf, cap, "%s", e->str);
        return true;
    }
    if (e->kind != N_MUL)
        return false;
    for (int k = 0; k < e->n; k++) {
        const mnode *x = e->kids[k];
        if (x->kind != N_SYM || strlen(x->str) != 1 || n + 2 >= cap)
            return false;
        buf[n++] = (char)tolower((unsigned char)x->str[0]);
    }
    buf[n] = 0;
    return true;
}

/* A sum or product of explicit matrices as one matrix of entry expressions. NULL otherwise. */
static const mnode *
mat_fold(cctx *c, const mnode *e, int depth)
{
    if (e->kind == N_MATRIX)
        return e;
    if (depth > 8 || (e->kind != N_ADD && e->kind != N_MUL) || e->n < 2)
        return NULL;
    const mnode *acc = mat_fold(c, e->kids[0], depth + 1);
    if (acc == NULL)
        return NULL;
    for (int k = 1; k < e->n; k++) {
        const mnode *b = mat_fold(c, e->kids[k], depth + 1);
        if (b == NULL)
            return NULL;
        int r = acc->rows, q = e->kind == N_ADD ? acc->cols : b->cols;
        if (e->kind == N_ADD ? (b->rows != r || b->cols != q) : acc->cols != b->rows)
            return NULL;
        if ((int64_t)r * q > 4096)
            return NULL;
        mnode *m = mk(c, N_MATRIX, r * q);
        if (m == NULL)
            return NULL;
        m->rows = r;
        m->cols = q;
        for (int i = 0; i < r; i++)
            for (int j = 0; j < q; j++) {
                mnode *x;
                if (e->kind == N_ADD) {
                    x = mk(c, N_ADD, 2);
                    if (x == NULL)
                        return NULL;
                    x->kids[0] = acc->kids[i * q + j];
                    x->kids[1] = b->kids[i * q + j];
                } else {
                    x = mk(c, N_ADD, acc->cols);
                    if (x == NULL)
                        return NULL;
                    for (int t = 0; t < acc->cols; t++) {
                        mnode *y = mk(c, N_MUL, 2);
                        if (y == NULL)
                            return NULL;
                        y->kids[0] = acc->kids[i * acc->cols + t];
                        y->kids[1] = b->kids[t * b->cols + j];
                        x->kids[t] = y;
                    }
                }
                m->kids[i * q + j] = x;
            }
        acc = m;
    }
    return acc;
}

/* Relations, one side or both: an equation stands for its value where the other side is a value,
 * an inequality for its set where the other side is a set, and two relations compare as
 * relations. Returns true when that decided the comparison (*out), else false with *g and *p
 * replaced by what they stand for. */
static bool
cmp_relations(cctx *c, const mnode **gp, const mnode **pp, int depth, mcmp_res *out)
{
    const mnode *g = *gp, *p = *pp;
    *out = MC_NE;
    /* a gold equation against a value: an assignment (x = 3, (p, q) = (3, 2)) or a chain
     * (a = b = 3) stands for its last value; any other equation does not (7 = 11a + c vs 11a + c)
     */
    if (g->kind == N_REL && only_eq(g) && p->kind != N_REL) {
        if (!is_assignment(g) && g->n <= 2)
            return true;
        g = g->kids[g->n - 1];
    }
    if (g->kind == N_REL && only_eq(g))
        g = first_last(c, g);
    if (p->kind == N_REL && only_eq(p))
        p = first_last(c, p);
    /* x in S against an inequality: compare S with the inequality's set */
    if (g->kind == N_REL && p->kind == N_REL && (g->ops[0] == R_IN) != (p->ops[0] == R_IN) &&
        (g->ops[0] != R_IN || c->o->allow_set_relation)) {
        const mnode *gs = g->ops[0] == R_IN ? g->kids[1] : is_ineq(g) ? rel_to_set(c, g) : NULL;
        const mnode *ps = p->ops[0] == R_IN ? p->kids[1] : is_ineq(p) ? rel_to_set(c, p) : NULL;
        if (gs != NULL && ps != NULL)
            *out = cmp(c, gs, ps, depth + 1);
        return true;
    }
    /* a relation against a value: keep what the value stands for */
    if (p->kind == N_REL && g->kind != N_REL) {
        if (only_eq(p))
            p = p->kids[p->n - 1];
        else if (c->o->allow_set_relation && !is_scalar(g)) {
            if ((p = rel_to_set(c, p)) == NULL)
                return true;
        } else
            return true; /* restating an inequality is not an answer */
    }
    if (g->kind == N_REL && p->kind != N_REL) {
        if (only_eq(g))
            g = g->kids[g->n - 1];
        else if (is_scalar(p) || (g = rel_to_set(c, g)) == NULL)
            return true;
    }
    if (g->kind == N_REL && p->kind == N_REL) {
        if (is_assignment(g) && is_assignment(p) && g->n == 2 && p->n == 2 &&
            cmp(c, g->kids[0], p->kids[0], depth + 1) == MC_EQ) {
            *out = cmp(c, g->kids[1], p->kids[1], depth + 1);
            return true;
        }
        *out = rel_eq(c, g, p, depth);
        return true;
    }
    *gp = g, *pp = p;
    return false;
}

/* Text (or letters) against anything: case-insensitive equality of the words. */
static mcmp_res
cmp_text(const mnode *g, const mnode *p)
{
    char a[128], b[128];
    const char *ga = g->kind == N_TEXT ? g->str : letters(g, a, sizeof a) ? a : NULL;
    const char *pb = p->kind == N_TEXT ? p->str : letters(p, b, sizeof b) ? b : NULL;
    return ga && pb && strcasecmp(ga, pb) == 0 ? MC_EQ : MC_NE;
}

static bool
empty_set(const mnode *x)
{
    return x->kind == N_EMPTY || (is_setlike(x) && x->n == 0);
}

/* Collections: ratios, sets, tuples, intervals, unions and matrices. Returns true when one side
 * is one of them (the result in *out); false for two scalars. */
static bool
cmp_shapes(cctx *c, const mnode *g, const mnode *p, int depth, mcmp_res *out)
{
    /* a ratio against a value or another ratio: 3:4 is 3/4 (and 6:8) */
    bool gr = g->kind == N_TUPLE && g->ratio, pr = p->kind == N_TUPLE && p->ratio;
    if ((gr && (pr || is_scalar(p))) || (pr && is_scalar(g))) {
        *out = gr && pr && ordered(c, g, p, depth) == MC_EQ
                   ? MC_EQ
                   : cmp(c, gr ? quotient(c, g) : g, pr ? quotient(c, p) : p, depth + 1);
        return true;
    }
    if (is_setlike(g) && (is_setlike(p) || p->kind == N_TUPLE))
        *out = unordered(c, g, p, depth);
    else if (g->kind == N_TUPLE && is_setlike(p))
        *out = g->amb || p->kind == N_LIST ? ordered(c, g, p, depth) : unordered(c, g, p, depth);
    else if (g->kind == N_TUPLE && p->kind == N_TUPLE)
        *out = ordered(c, g, p, depth);
    else if (g->kind == N_INTERVAL || p->kind == N_INTERVAL) {
        bool gi = g->kind == N_INTERVAL || (g->kind == N_TUPLE && g->amb);
        bool pi = p->kind == N_INTERVAL || (p->kind == N_TUPLE && p->amb);
        *out = gi && pi ? interval_eq(c, g, p, depth) : MC_NE;
    } else if (g->kind == N_UNION && p->kind == N_UNION)
        *out = unordered(c, g, p, depth);
    else if (g->kind == N_MATRIX || p->kind == N_MATRIX) {
        const mnode *m = g->kind == N_MATRIX && p->kind != N_MATRIX ? mat_fold(c, p, 0) : NULL;
        if (m)
            p = m;
        *out = g->kind != p->kind || g->rows != p->rows || g->cols != p->cols
                   ? MC_NE
                   : ordered(c, g, p, depth);
    } else if (!is_scalar(g) || !is_scalar(p))
        *out = MC_NE;
    else
        return false;
    return true;
}

static mcmp_res
cmp(cctx *c, const mnode *g, const mnode *p, int depth)
{
    mcmp_res r;
    if (depth > 64 || !mb_step(c->bud, 1))
        return c->bud->exhausted ? MC_BUDGET : MC_NE;
    if (cmp_relations(c, &g, &p, depth, &r))
        return r;
    if (is_scalar(g) && count_pm(g, 0))
        g = expand_pm(c, g);
    if (is_scalar(p) && count_pm(p, 0))
        p = expand_pm(c, p);
    /* singleton sets against a value */
    if (is_setlike(g) && g->n == 1 && is_scalar(p))
        g = g->kids[0];
    if (is_setlike(p) && p->n == 1 && is_scalar(g))
        p = p->kids[0];
    if (g->kind == N_TEXT || p->kind == N_TEXT)
        return cmp_text(g, p);
    if (g->kind == N_EMPTY || p->kind == N_EMPTY)
        return empty_set(g) && empty_set(p) ? MC_EQ : MC_NE;
    if (cmp_shapes(c, g, p, depth, &r))
        return r;
    /* percentages: 50% matches 50 and 0.5 */
    if (g->kind == N_PCT || p->kind == N_PCT) {
        const mnode *gs = g->kind == N_PCT ? g->kids[0] : g;
        const mnode *ps = p->kind == N_PCT ? p->kids[0] : p;
        if ((r = value_eq(c, gs, 0, ps, 0)) != MC_NE)
            return r;
    }
    return value_eq(c, g, 0, p, 0);
}

mcmp_res
mcompare(const mnode *gold, const mnode *pred, const mcmp_opts *o, mbudget *bud, marena *ar)
{
    cctx c = {o, bud, ar, {0}, {0}, 0};
    if (!o->strict) {
        const char *gv[MAX_VARS], *pv[MAX_VARS];
        int ng = 0, np = 0;
        collect_vars(gold, gv, &ng, 0);
        collect_vars(pred, pv, &np, 0);
        /* function names take part too: f(x) vs f(y) */
        if (ng == np && ng > 0) {
            qsort(gv, (size_t)ng, sizeof gv[0], cmpstr);
            qsort(pv, (size_t)np, sizeof pv[0], cmpstr);
            for (int k = 0; k < ng; k++) {
                c.from[k] = pv[k];
                c.to[k] = gv[k];
            }
            c.nmap = ng;
        }
    }
    mcmp_res r = cmp(&c, gold, pred, 0);
    /* MPFR keeps per-thread caches of constants (pi, log 2); drop them so a worker thread that
     * exits leaks nothing */
    mpfr_free_cache2(MPFR_FREE_LOCAL_CACHE);
    return r;
}
