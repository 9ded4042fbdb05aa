/* Private interface of the math verifier: answer extraction, the LaTeX/plain-text parser into an
 * expression tree, exact (GMP) and numeric (MPFR) evaluation, and the gold/prediction comparison.
 * Every stage runs under one budget (steps + wall deadline) so no input can hang a check. */
#ifndef GRPO_VERIFY_MATH_INT_H
#define GRPO_VERIFY_MATH_INT_H

#include "grpo/common.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- budget ------------------------------------------------------------------------------- */

typedef struct mbudget {
    int64_t steps, max_steps;
    double deadline; /* grpo_now() value after which the check stops */
    bool exhausted;
} mbudget;

/* Counts n steps; returns false (and sets exhausted) once the budget is spent. */
bool mb_step(mbudget *b, int64_t n);

/* ---- arena -------------------------------------------------------------------------------- */

typedef struct marena {
    grpo_arena *a;
    bool oom;
} marena;
void *ma_alloc(marena *m, size_t n);
char *ma_strndup(marena *m, const char *s, size_t n);

/* ---- expression tree ---------------------------------------------------------------------- */

typedef enum mkind {
    N_NUM, /* str: decimal literal "123", "1.5", "2.5e-3"; is_float when written with a point */
    N_SYM, /* str: variable name ("x", "x_1", "alpha"); "e" evaluates to Euler's number */
    N_PI,
    N_INF,      /* +infinity (negate with N_NEG) */
    N_ADD,      /* kids[0] + kids[1] + ... */
    N_MUL,      /* kids[0] * kids[1] * ... */
    N_NEG,      /* -kids[0] */
    N_DIV,      /* kids[0] / kids[1] */
    N_POW,      /* kids[0] ^ kids[1] */
    N_FUNC,     /* str: name; kids: args ("sqrt", "root"(x, n), "log"(x[, base]), "f"(x), ...) */
    N_FACT,     /* kids[0]! */
    N_PCT,      /* kids[0] % */
    N_PM,       /* kids[0] ± kids[1]; the sign is chosen per evaluation (ctx pm mask) */
    N_LIST,     /* a bare comma list "1, 2, 3": order-insensitive against sets */
    N_SET,      /* \{a, b\} */
    N_TUPLE,    /* (a, b, c) ordered; two-element (a, b) is also an open interval (flag amb) */
    N_INTERVAL, /* kids[0], kids[1]; lopen/ropen */
    N_UNION,    /* kids: sets/intervals */
    N_EMPTY,    /* the empty set */
    N_REL,      /* chain kids[0] ops[0] kids[1] ops[1] ... */
    N_MATRIX,   /* rows x cols, kids row-major */
    N_TEXT,     /* str: lowercased text answer */
    N_UNIT      /* a unit word; dropped from products */
} mkind;

/* Relation operators in N_REL.ops. */
enum { R_EQ = '=', R_LT = '<', R_LE = 'l', R_GT = '>', R_GE = 'g', R_NE = '!', R_IN = 'i' };

typedef struct mnode {
    mkind kind;
    int n; /* number of kids */
    struct mnode **kids;
    const char *str;   /* N_NUM, N_SYM, N_FUNC, N_TEXT */
    char *ops;         /* N_REL: n-1 operators */
    int rows, cols;    /* N_MATRIX */
    bool lopen, ropen; /* N_INTERVAL */
    bool amb;          /* N_TUPLE of two written (a, b): may be an open interval */
    bool ratio;        /* N_TUPLE of two written a:b: also stands for the quotient a/b */
    bool is_float;     /* N_NUM written with a decimal point */
} mnode;

/* ---- parsing ------------------------------------------------------------------------------ */

typedef struct mparse_ctx {
    marena *ar;
    mbudget *bud;
    int depth, max_depth;
    const char *err; /* static reason on failure */
    bool plain;      /* plain prose: multi-letter words are words, not products of letters */
} mparse_ctx;

/* Parses text[0..n) (LaTeX or plain) into a tree, or NULL (ctx->err says why). */
mnode *mparse(mparse_ctx *ctx, const char *text, size_t n);
/* A canonical text form (for structural comparison and debugging). */
void mnode_print(const mnode *e, char *buf, size_t cap);

/* ---- extraction --------------------------------------------------------------------------- */

#define MX_MAX_CAND 24

typedef struct mspan {
    const char *s;
    size_t n;
    int group;  /* candidates of one kind and priority share a group */
    bool plain; /* plain prose after an anchor, not a math environment */
    int n_join; /* >1: this candidate is a join of that many math spans ("$1$ and $2$") */
    const char *join_s[6];
    size_t join_n[6];
    char num[96]; /* storage for a normalized plain number (s points here when used) */
} mspan;

typedef struct mextract_opts {
    bool latex;       /* \boxed, anchors, $...$ environments */
    bool last_number; /* also a plain last number / simple expression */
    bool boxed_first; /* \boxed before "final answer is" (math-verify's boxed_match_priority=0) */
} mextract_opts;

/* Fills up to MX_MAX_CAND candidates in priority order (best first). Returns the count. */
int mextract(const char *text, size_t n, const mextract_opts *o, mspan *out, mbudget *bud);

/* ---- comparison --------------------------------------------------------------------------- */

typedef struct mcmp_opts {
    int precision;           /* decimal places for float comparisons (math-verify float_rounding) */
    bool strict;             /* variables matter */
    bool allow_set_relation; /* compare a relation prediction with a set gold */
} mcmp_opts;

typedef enum mcmp_res { MC_NE = 0, MC_EQ = 1, MC_BUDGET = 2 } mcmp_res;

mcmp_res mcompare(const mnode *gold, const mnode *pred, const mcmp_opts *o, mbudget *bud,
                  marena *ar);

/* ---- the whole check ---------------------------------------------------------------------- */

typedef enum mverdict {
    MV_CORRECT = 0,
    MV_WRONG,
    MV_NO_ANSWER,
    MV_BAD_ANSWER,
    MV_BAD_GOLD,
    MV_TIMEOUT,
    MV_ERROR
} mverdict;

typedef struct mgrade_opts {
    mextract_opts gold_x, pred_x;
    mcmp_opts cmp;
    bool think; /* grade only what follows the last </think> */
    bool prompt_opens_think;
    bool gold_whole; /* gold with no extractable answer is parsed whole */
    int64_t max_steps;
    double timeout_s;
    size_t max_answer; /* candidate spans longer than this are unparseable */
} mgrade_opts;

void mgrade_opts_default(mgrade_opts *o);
/* Grades one prediction against one gold answer. detail (may be NULL) gets a short text. */
mverdict mgrade(const char *gold, size_t glen, const char *pred, size_t plen, const mgrade_opts *o,
                char *detail, size_t detail_cap);
const char *mverdict_label(mverdict v);

#endif
