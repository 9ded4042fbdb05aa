/* LaTeX / plain-text math answers to an expression tree. One lexer pass normalizes the notation
 * (\left, \dfrac, spacing commands, units, degrees, thousands separators, Unicode operators); a
 * recursive-descent parser with a depth limit builds the tree. Nothing here can loop without
 * consuming a token, and every token costs a budget step. */
#include "verifiers/math/math_int.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum tkind {
    T_END,
    T_NUM,  /* s/n: the literal as written (normalized copy in str) */
    T_ID,   /* single letter or Greek name: str */
    T_WORD, /* multi-letter plain word: str (lowercase) */
    T_FN,   /* function command/word: str ("sin", "log", "sqrt", "frac", ...) */
    T_OP,   /* c: + - * / ^ _ = < > ! , ; | ( ) [ ] { } & ' */
    T_LE,
    T_GE,
    T_NE,
    T_APPROX,
    T_IN,
    T_LSET,
    T_RSET, /* \{ \} */
    T_LANG,
    T_RANG,
    T_PM,
    T_MP,
    T_INF,
    T_PI,
    T_DEG,
    T_PCT,
    T_ROWSEP,
    T_CUP,
    T_CAP,
    T_EMPTY,
    T_TEXT, /* \text{...}: s/n the content */
    T_BEGIN,
    T_ENDENV, /* \begin{name} / \end{name}: str */
    T_AND,    /* "and", "or" between list items */
    T_BAD     /* something we cannot parse */
} tkind;

typedef struct tok {
    tkind k;
    char c;
    const char *s;
    size_t n;
    const char *str;
} tok;

typedef struct lexer {
    mparse_ctx *ctx;
    tok *t;
    int nt, cap;
    int depth; /* ( [ { nesting, for thousands separators at the top level only */
    bool stop; /* the rest of the text is commentary */
} lexer;

static bool
push(lexer *L, tok t)
{
    if (L->nt == L->cap) {
        int nc = L->cap ? L->cap * 2 : 64;
        tok *nt = ma_alloc(L->ctx->ar, (size_t)nc * sizeof *nt);
        if (nt == NULL)
            return false;
        if (L->nt)
            memcpy(nt, L->t, (size_t)L->nt * sizeof *nt);
        L->t = nt;
        L->cap = nc;
    }
    L->t[L->nt++] = t;
    return true;
}

static bool
pushk(lexer *L, tkind k, char c)
{
    tok t = {k, c, NULL, 0, NULL};
    return push(L, t);
}

static bool
pushs(lexer *L, tkind k, const char *str)
{
    tok t = {k, 0, NULL, 0, str};
    return push(L, t);
}

/* Matches a brace group starting at s[i] == '{'; returns the index of the closing brace or -1. */
static long
brace_end(const char *s, size_t n, size_t i)
{
    int d = 0;
    for (size_t j = i; j < n; j++) {
        if (s[j] == '\\' && j + 1 < n) {
            j++;
            continue;
        }
        if (s[j] == '{')
            d++;
        else if (s[j] == '}' && --d == 0)
            return (long)j;
    }
    return -1;
}

static const char *const FUNCS[] = {
    "sin",  "cos",  "tan",  "sec",  "csc",  "cot",   "arcsin", "arccos", "arctan", "asin",
    "acos", "atan", "sinh", "cosh", "tanh", "ln",    "log",    "exp",    "sqrt",   "abs",
    "lg",   "max",  "min",  "gcd",  "lcm",  "floor", "ceil",   "det",    NULL};
static const char *const GREEK[] = {
    "alpha",    "beta",    "gamma", "delta",  "epsilon", "varepsilon", "zeta",  "eta",   "theta",
    "vartheta", "iota",    "kappa", "lambda", "mu",      "nu",         "xi",    "rho",   "sigma",
    "tau",      "upsilon", "phi",   "varphi", "chi",     "psi",        "omega", "Gamma", "Delta",
    "Theta",    "Lambda",  "Xi",    "Sigma",  "Phi",     "Psi",        "Omega", NULL};
/* Words dropped after a quantity (units and filler). */
static const char *const UNITS[] = {
    "cm",      "mm",      "km",       "m",     "kg",      "g",       "mg",      "s",
    "sec",     "second",  "seconds",  "min",   "minute",  "minutes", "h",       "hr",
    "hour",    "hours",   "day",      "days",  "week",    "weeks",   "year",    "years",
    "degree",  "degrees", "deg",      "unit",  "units",   "dollar",  "dollars", "cent",
    "cents",   "meter",   "meters",   "metre", "metres",  "inch",    "inches",  "foot",
    "feet",    "ft",      "mile",     "miles", "mph",     "yard",    "yards",   "liter",
    "liters",  "l",       "ml",       "sq",    "square",  "cubic",   "cm^2",    "m^2",
    "times",   "people",  "students", "ways",  "points",  "kmh",     "km/h",    "m/s",
    "pounds",  "lb",      "radians",  "rad",   "percent", "apples",  "books",   "cookies",
    "marbles", "pages",   "hours.",   NULL};

static bool
in_list(const char *const *l, const char *s, size_t n)
{
    for (; *l; l++)
        if (strlen(*l) == n && memcmp(*l, s, n) == 0)
            return true;
    return false;
}

static bool
is_unit_word(const char *s, size_t n)
{
    char low[32];
    if (n == 0 || n >= sizeof low)
        return false;
    for (size_t i = 0; i < n; i++)
        low[i] = (char)tolower((unsigned char)s[i]);
    return in_list(UNITS, low, n);
}

/* Reads a number starting at s[i]; handles thousands separators (top level, groups of three),
 * a decimal point and a plain-text exponent. Returns the end index. */
static size_t
lex_number(lexer *L, const char *s, size_t n, size_t i)
{
    char *buf = ma_alloc(L->ctx->ar, n - i + 8);
    size_t o = 0, j = i, int_digits = 0;
    bool dot = false;
    if (buf == NULL)
        return n;
    while (j < n && isdigit((unsigned char)s[j]))
        buf[o++] = s[j++], int_digits++;
    /* thousands: 1,234,567 or 1{,}234 or 1\,234 (only when the first group has 1-3 digits) */
    while (L->depth == 0 && int_digits >= 1 && int_digits <= 3 && !dot) {
        size_t k = j;
        bool esc = false;
        if (k < n && s[k] == ',')
            k++;
        else if (k + 2 < n && s[k] == '{' && s[k + 1] == ',' && s[k + 2] == '}')
            k += 3;
        else if (k + 3 < n && s[k] == '{' && s[k + 1] == ',' && s[k + 2] == ' ' && s[k + 3] == '}')
            k += 4;
        else if (k + 1 < n && s[k] == '\\' &&
                 (s[k + 1] == ',' || s[k + 1] == '!' || s[k + 1] == ' '))
            k += 2, esc = true;
        else if (k + 3 < n && s[k] == ' ' && s[k + 1] == '{' && s[k + 2] == ',')
            k += s[k + 3] == '}' ? 4 : (k + 4 < n && s[k + 4] == '}') ? 5 : 1;
        else if (k < n && s[k] == ' ')
            k++;
        else
            break;
        if (k + 1 < n && s[k] == '\\' && (s[k + 1] == '!' || s[k + 1] == ','))
            k += 2, esc = true;
        while (esc && k < n && s[k] == ' ')
            k++;
        if (k + 3 <= n && isdigit((unsigned char)s[k]) && isdigit((unsigned char)s[k + 1]) &&
            isdigit((unsigned char)s[k + 2]) && (k + 3 == n || !isdigit((unsigned char)s[k + 3]))) {
            memcpy(buf + o, s + k, 3);
            o += 3;
            j = k + 3;
            int_digits = 1; /* keep accepting groups */
        } else
            break;
    }
    if (j + 1 < n && s[j] == '.' && isdigit((unsigned char)s[j + 1])) {
        dot = true;
        buf[o++] = s[j++];
        while (j < n && isdigit((unsigned char)s[j]))
            buf[o++] = s[j++];
    }
    /* plain exponent: 1.5e-3, 2E10 (not "2e" alone: that is 2 times e) */
    if (j + 1 < n && (s[j] == 'e' || s[j] == 'E')) {
        size_t k = j + 1;
        if (k < n && (s[k] == '+' || s[k] == '-'))
            k++;
        if (k < n && isdigit((unsigned char)s[k]) &&
            !(k + 1 < n && isalpha((unsigned char)s[k + 1]))) {
            buf[o++] = 'e';
            for (size_t q = j + 1; q < k; q++)
                buf[o++] = s[q];
            while (k < n && isdigit((unsigned char)s[k]) && o < 40 + (n - i))
                buf[o++] = s[k++];
            j = k;
            dot = true;
        }
    }
    buf[o] = 0;
    tok t = {T_NUM, dot ? '.' : 0, s + i, j - i, buf};
    push(L, t);
    return j;
}

/* A command name after a backslash at s[i]. */
static size_t
cmd_name(const char *s, size_t n, size_t i, char *name, size_t cap)
{
    size_t j = i, o = 0;
    if (j < n && !isalpha((unsigned char)s[j])) {
        if (cap > 1)
            name[o++] = s[j];
        name[o] = 0;
        return j + 1;
    }
    while (j < n && isalpha((unsigned char)s[j])) {
        if (o + 1 < cap)
            name[o++] = s[j];
        j++;
    }
    name[o] = 0;
    return j;
}

static size_t
skip_ws(const char *s, size_t n, size_t i)
{
    while (i < n && isspace((unsigned char)s[i]))
        i++;
    return i;
}

/* Handles \name at s[i] (just after the backslash). Returns the new index or 0 on failure. */
/* Commands that are only layout or spacing: dropped. */
static const char *const LAYOUT_CMDS[] = {",",
                                          "!",
                                          ";",
                                          ":",
                                          " ",
                                          "quad",
                                          "qquad",
                                          "displaystyle",
                                          "textstyle",
                                          "left",
                                          "right",
                                          "big",
                                          "Big",
                                          "bigl",
                                          "bigr",
                                          "Bigl",
                                          "Bigr",
                                          "bigg",
                                          "Bigg",
                                          "biggl",
                                          "biggr",
                                          "limits",
                                          "boxed",
                                          "fbox",
                                          "$",
                                          "mathrm ",
                                          "medskip",
                                          "noindent",
                                          "hfill",
                                          "middle",
                                          "enspace",
                                          "thinspace",
                                          "negthinspace",
                                          "mathord",
                                          "mathop",
                                          "cr",
                                          "nonumber",
                                          "displaylimits",
                                          NULL};

/* Commands that are one token (T_FN: \lfloor x \rfloor -> floor( x )). */
static const struct {
    const char *name;
    tkind k;
    char c;
} SIMPLE_CMDS[] = {{"cdot", T_OP, '*'},      {"times", T_OP, '*'},
                   {"ast", T_OP, '*'},       {"div", T_OP, '/'},
                   {"le", T_LE, 0},          {"leq", T_LE, 0},
                   {"leqslant", T_LE, 0},    {"ge", T_GE, 0},
                   {"geq", T_GE, 0},         {"geqslant", T_GE, 0},
                   {"ne", T_NE, 0},          {"neq", T_NE, 0},
                   {"lt", T_OP, '<'},        {"gt", T_OP, '>'},
                   {"simeq", T_APPROX, 0},   {"equiv", T_OP, '='},
                   {"in", T_IN, 0},          {"pm", T_PM, 0},
                   {"mp", T_MP, 0},          {"infty", T_INF, 0},
                   {"infinity", T_INF, 0},   {"pi", T_PI, 0},
                   {"circ", T_DEG, 0},       {"degree", T_DEG, 0},
                   {"cup", T_CUP, 0},        {"cap", T_CAP, 0},
                   {"emptyset", T_EMPTY, 0}, {"varnothing", T_EMPTY, 0},
                   {"langle", T_LANG, 0},    {"rangle", T_RANG, 0},
                   {"lbrace", T_LSET, 0},    {"rbrace", T_RSET, 0},
                   {"lfloor", T_FN, 0},      {"lceil", T_FN, 0},
                   {"rfloor", T_OP, ')'},    {"rceil", T_OP, ')'},
                   {"colon", T_OP, ':'},     {"land", T_AND, 0},
                   {"wedge", T_AND, 0},      {"lor", T_AND, 0},
                   {"vee", T_AND, 0},        {"to", T_BAD, 0},
                   {"rightarrow", T_BAD, 0}, {"cdots", T_BAD, 0},
                   {"ldots", T_BAD, 0},      {"dots", T_BAD, 0},
                   {"int", T_BAD, 0},        {"sum", T_BAD, 0},
                   {"prod", T_BAD, 0},       {"lim", T_BAD, 0},
                   {"subset", T_BAD, 0},     {"setminus", T_BAD, 0},
                   {"forall", T_BAD, 0},     {"exists", T_BAD, 0},
                   {"partial", T_BAD, 0},    {"nabla", T_BAD, 0},
                   {"|", T_OP, '|'},         {"vert", T_OP, '|'},
                   {"lvert", T_OP, '|'},     {"rvert", T_OP, '|'},
                   {"mid", T_OP, '|'},       {"%", T_PCT, 0},
                   {"\\", T_ROWSEP, 0},      {NULL, T_END, 0}};

/* Text-like wrappers whose braced argument is kept as one T_TEXT token. */
static const char *const TEXT_CMDS[] = {
    "text", "textbf",     "mathrm", "mbox",         "textrm", "mathbf", "textit",  "mathit",
    "emph", "textnormal", "mathsf", "operatorname", "textup", "mathbb", "mathcal", NULL};

/* Commands that take arguments like a function (\dfrac, \tfrac, \cfrac -> frac; \dbinom, \tbinom
 * -> binom). */
static const char *const FN_CMDS[] = {"frac",      "dfrac",  "tfrac",  "cfrac",    "sqrt",
                                      "binom",     "dbinom", "tbinom", "overline", "bar",
                                      "vec",       "hat",    "tilde",  "widehat",  "overrightarrow",
                                      "underline", "dot",    "ddot",   "mathring", NULL};

/* \approx: after an exact value ("x = 1/3 \approx 0.33", "\frac{1}{3} \approx 0.33") the rest is
 * commentary and lexing stops; alone at the start it is dropped ("\approx 0.33" is the value);
 * otherwise ("x \approx 0.33") it is a relation. */
static size_t
lex_approx(lexer *L, size_t j)
{
    bool value = L->nt > 0;
    for (int k = 0; k < L->nt; k++) {
        if (L->t[k].k == T_OP && L->t[k].c == '=') {
            value = true;
            break;
        }
        if (L->t[k].k == T_ID || L->t[k].k == T_WORD)
            value = false;
    }
    if (value) {
        L->stop = true;
        return j;
    }
    if (L->nt == 0)
        return j;
    return pushk(L, T_APPROX, 0) ? j : 0;
}

/* The braced argument of a text wrapper at t: "and", "or" and "," are list separators, "percent"
 * and "pct" a percent sign, a leading "Label:" (\boxed{\text{Answer: } 5}) is dropped, anything
 * else is one T_TEXT token. Returns the position after the closing brace e. */
static size_t
lex_text_arg(lexer *L, tok t, size_t e)
{
    size_t a = 0, b = t.n;
    while (a < b && isspace((unsigned char)t.s[a]))
        a++;
    while (b > a && isspace((unsigned char)t.s[b - 1]))
        b--;
    if ((b - a == 3 && memcmp(t.s + a, "and", 3) == 0) ||
        (b - a == 2 && memcmp(t.s + a, "or", 2) == 0) || (b - a == 1 && t.s[a] == ','))
        return pushk(L, T_AND, 0) ? e + 1 : 0;
    if (b - a >= 3 && (memcmp(t.s + a, "percent", b - a < 7 ? b - a : 7) == 0 ||
                       (b - a == 3 && memcmp(t.s + a, "pct", 3) == 0)))
        return pushk(L, T_PCT, 0) ? e + 1 : 0;
    if (L->nt == 0 && b > a && t.s[b - 1] == ':')
        return e + 1;
    return push(L, t) ? e + 1 : 0;
}

static size_t
lex_text(lexer *L, const char *s, size_t n, size_t j, const char *name)
{
    size_t k = skip_ws(s, n, j);
    if (k >= n || s[k] != '{')
        return j; /* \mathrm x: just the next token */
    long e = brace_end(s, n, k);
    if (e < 0)
        return 0;
    tok t = {T_TEXT, name[0] == 'o' ? 'o' : (name[4] == 'b' && name[0] == 'm' ? 'b' : 0), s + k + 1,
             (size_t)e - k - 1, NULL};
    return lex_text_arg(L, t, (size_t)e);
}

/* \begin{env} / \end{env} (and an array's column spec, skipped). */
static size_t
lex_env(lexer *L, const char *s, size_t n, size_t j, bool begin)
{
    size_t k = skip_ws(s, n, j);
    if (k >= n || s[k] != '{')
        return 0;
    long e = brace_end(s, n, k);
    if (e < 0)
        return 0;
    tok t = {begin ? T_BEGIN : T_ENDENV, 0, s + k + 1, (size_t)e - k - 1, NULL};
    if (!push(L, t))
        return 0;
    j = (size_t)e + 1;
    k = skip_ws(s, n, j);
    if (begin && t.n == 5 && memcmp(t.s, "array", 5) == 0 && k < n && s[k] == '{') {
        e = brace_end(s, n, k);
        if (e < 0)
            return 0;
        j = (size_t)e + 1;
    }
    return j;
}

static size_t
lex_simple(lexer *L, int k, const char *name, size_t j)
{
    if (SIMPLE_CMDS[k].k == T_FN) /* \lfloor x \rfloor -> floor( x ) */
        return pushs(L, T_FN, name[1] == 'f' ? "floor" : "ceil") && pushk(L, T_OP, '(') ? j : 0;
    return pushk(L, SIMPLE_CMDS[k].k, SIMPLE_CMDS[k].c) ? j : 0;
}

/* A name as an interned T_FN or T_ID token. */
static size_t
lex_named(lexer *L, tkind kind, const char *nm, size_t j)
{
    char *c = ma_strndup(L->ctx->ar, nm, strlen(nm));
    return c && pushs(L, kind, c) ? j : 0;
}

static size_t
lex_cmd(lexer *L, const char *s, size_t n, size_t i)
{
    char name[32];
    size_t j = cmd_name(s, n, i, name, sizeof name), len = strlen(name);
    if (in_list(LAYOUT_CMDS, name, len)) {
        if ((strcmp(name, "left") == 0 || strcmp(name, "right") == 0) && j < n && s[j] == '.')
            j++;
        return j;
    }
    if (strcmp(name, "{") == 0)
        return pushk(L, T_LSET, 0) ? (L->depth++, j) : 0;
    if (strcmp(name, "}") == 0)
        return pushk(L, T_RSET, 0) ? (L->depth--, j) : 0;
    if (strcmp(name, "approx") == 0)
        return lex_approx(L, j);
    for (int k = 0; SIMPLE_CMDS[k].name; k++)
        if (strcmp(name, SIMPLE_CMDS[k].name) == 0)
            return lex_simple(L, k, name, j);
    if (in_list(TEXT_CMDS, name, len))
        return lex_text(L, s, n, j, name);
    if (strcmp(name, "begin") == 0 || strcmp(name, "end") == 0)
        return lex_env(L, s, n, j, name[0] == 'b');
    if (in_list(FN_CMDS, name, len) || in_list(FUNCS, name, len)) {
        bool frac = strcmp(name, "dfrac") == 0 || strcmp(name, "tfrac") == 0 ||
                    strcmp(name, "cfrac") == 0,
             binom = strcmp(name, "dbinom") == 0 || strcmp(name, "tbinom") == 0;
        return lex_named(L, T_FN, frac ? "frac" : binom ? "binom" : name, j);
    }
    if (in_list(GREEK, name, len))
        return lex_named(L, T_ID, name, j);
    if (strcmp(name, "dollar") == 0 || strcmp(name, "textdollar") == 0 || strcmp(name, "euro") == 0)
        return j;
    if (strcmp(name, "i") == 0 || strcmp(name, "imath") == 0)
        return pushs(L, T_ID, "i") ? j : 0;
    if (strncmp(name, "qquad", 5) == 0)
        return i + 5;
    if (strncmp(name, "quad", 4) == 0)
        return i + 4;                   /* "\quadx": the spacing command then x */
    return lex_named(L, T_ID, name, j); /* an unknown command is a symbol named after it (\zzz) */
}

/* Multi-byte UTF-8 symbols we understand; returns bytes consumed or 0. */
static size_t
lex_utf8(lexer *L, const unsigned char *u, size_t n)
{
    struct {
        const char *seq;
        tkind k;
        char c;
        const char *str;
    } m[] = {{"\xc3\x97", T_OP, '*', NULL},       /* × */
             {"\xc3\xb7", T_OP, '/', NULL},       /* ÷ */
             {"\xc2\xb7", T_OP, '*', NULL},       /* · */
             {"\xe2\x8b\x85", T_OP, '*', NULL},   /* ⋅ */
             {"\xe2\x88\x92", T_OP, '-', NULL},   /* − */
             {"\xe2\x89\xa4", T_LE, 0, NULL},     /* ≤ */
             {"\xe2\x89\xa5", T_GE, 0, NULL},     /* ≥ */
             {"\xe2\x89\xa0", T_NE, 0, NULL},     /* ≠ */
             {"\xe2\x89\x88", T_APPROX, 0, NULL}, /* ≈ */
             {"\xcf\x80", T_PI, 0, NULL},         /* π */
             {"\xe2\x88\x9e", T_INF, 0, NULL},    /* ∞ */
             {"\xc2\xb0", T_DEG, 0, NULL},        /* ° */
             {"\xc2\xb1", T_PM, 0, NULL},         /* ± */
             {"\xe2\x88\x9a", T_FN, 0, "sqrt"},   /* √ */
             {"\xe2\x88\xaa", T_CUP, 0, NULL},    /* ∪ */
             {"\xe2\x88\x85", T_EMPTY, 0, NULL},  /* ∅ */
             {"\xe2\x82\xac", T_END, 0, NULL},    /* € (skipped) */
             {"\xc2\xa3", T_END, 0, NULL},        /* £ */
             {"\xc2\xa5", T_END, 0, NULL},        /* ¥ */
             {"\xe2\x82\xb9", T_END, 0, NULL},    /* ₹ */
             {"\xc2\xa0", T_END, 0, NULL},        /* no-break space */
             {"\xe2\x80\x89", T_END, 0, NULL},    /* thin space */
             {"\xc2\xb2", T_OP, '2', NULL},       /* ² -> ^2 */
             {"\xc2\xb3", T_OP, '3', NULL},       /* ³ -> ^3 */
             {NULL, T_END, 0, NULL}};
    for (int k = 0; m[k].seq; k++) {
        size_t len = strlen(m[k].seq);
        if (len > n || memcmp(u, m[k].seq, len) != 0)
            continue;
        if (m[k].k == T_END)
            return len;
        if (m[k].k == T_OP && (m[k].c == '2' || m[k].c == '3')) {
            tok t = {T_NUM, 0, m[k].c == '2' ? "2" : "3", 1, m[k].c == '2' ? "2" : "3"};
            if (!pushk(L, T_OP, '^') || !push(L, t))
                return 0;
            return len;
        }
        if (m[k].str)
            return pushs(L, m[k].k, m[k].str) ? len : 0;
        return pushk(L, m[k].k, m[k].c) ? len : 0;
    }
    return 0;
}

/* A run of letters from s[i]: one letter is an identifier; a longer word is lowercased and typed
 * (function, pi, infinity, and/or, percent, else a word). Returns the end, 0 on failure. */
static size_t
lex_word(lexer *L, const char *s, size_t n, size_t i)
{
    size_t j = i;
    while (j < n && isalpha((unsigned char)s[j]))
        j++;
    size_t len = j - i;
    char *w = ma_strndup(L->ctx->ar, s + i, len);
    if (w == NULL)
        return 0;
    if (len == 1)
        return pushs(L, T_ID, w) ? j : 0;
    for (size_t q = 0; q < len; q++)
        w[q] = (char)tolower((unsigned char)w[q]);
    tkind k = T_WORD;
    if (in_list(FUNCS, w, len))
        k = T_FN;
    else if (strcmp(w, "pi") == 0)
        k = T_PI;
    else if (strcmp(w, "oo") == 0 || strcmp(w, "inf") == 0 || strcmp(w, "infinity") == 0)
        k = T_INF;
    else if (strcmp(w, "and") == 0 || strcmp(w, "or") == 0)
        k = T_AND;
    else if (strcmp(w, "percent") == 0 || strcmp(w, "percentage") == 0 || strcmp(w, "pct") == 0)
        k = T_PCT;
    return pushs(L, k, w) ? j : 0;
}

/* An operator or bracket at s[i] (** is power; <=, >=, != are one token). Returns the end, 0 on
 * failure. */
static size_t
lex_op(lexer *L, const char *s, size_t n, size_t i)
{
    char c = s[i];
    if (c == '*' && i + 1 < n && s[i + 1] == '*')
        return pushk(L, T_OP, '^') ? i + 2 : 0;
    if ((c == '<' || c == '>' || c == '!') && i + 1 < n && s[i + 1] == '=')
        return pushk(L, c == '<' ? T_LE : c == '>' ? T_GE : T_NE, 0) ? i + 2 : 0;
    if (c == '%')
        return pushk(L, T_PCT, 0) ? i + 1 : 0;
    if (strchr("+-*/^_=<>!,;|()[]{}&':", (int)(unsigned char)c) == NULL) {
        L->ctx->err = "unexpected character";
        return 0;
    }
    if (c == '(' || c == '[' || c == '{')
        L->depth++;
    else if (c == ')' || c == ']' || c == '}')
        L->depth--;
    return pushk(L, T_OP, c) ? i + 1 : 0;
}

/* A non-ASCII character at s[i] (lex_utf8). Returns the end, 0 on failure. */
static size_t
lex_high(lexer *L, const char *s, size_t n, size_t i)
{
    size_t used = lex_utf8(L, (const unsigned char *)s + i, n - i);
    if (used == 0) {
        L->ctx->err = "unsupported character";
        return 0;
    }
    return i + used;
}

static bool
lex(lexer *L, const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && !L->stop) {
        if (!mb_step(L->ctx->bud, 1))
            return false;
        unsigned char c = (unsigned char)s[i];
        if (isspace(c) || c == '$' || c == '~' || c == '\0') {
            i++;
            continue;
        }
        if (isdigit(c) || (c == '.' && i + 1 < n && isdigit((unsigned char)s[i + 1]))) {
            i = lex_number(L, s, n, i);
            continue;
        }
        size_t j;
        if (isalpha(c)) {
            j = lex_word(L, s, n, i);
        } else if (c == '\\') {
            /* "\\frac" from a doubly escaped string is \frac; "\\" alone is a row break */
            if (i + 2 < n && s[i + 1] == '\\' && isalpha((unsigned char)s[i + 2]))
                i++;
            j = lex_cmd(L, s, n, i + 1);
        } else {
            j = c >= 0x80 ? lex_high(L, s, n, i) : lex_op(L, s, n, i);
        }
        if (j == 0)
            return false;
        i = j;
    }
    return pushk(L, T_END, 0);
}

/* ---- parser ------------------------------------------------------------------------------- */

typedef struct parser {
    mparse_ctx *ctx;
    tok *t;
    int i, nt;
} parser;

static mnode *p_list(parser *P);
static mnode *p_rel(parser *P);
static mnode *p_expr(parser *P);
static mnode *p_unary(parser *P);
static mnode *p_power(parser *P);
static mnode *p_primary(parser *P);

static tok *
cur(parser *P)
{
    return &P->t[P->i];
}

static bool
is_op(parser *P, char c)
{
    return cur(P)->k == T_OP && cur(P)->c == c;
}

static mnode *
fail(parser *P, const char *why)
{
    if (P->ctx->err == NULL)
        P->ctx->err = why;
    return NULL;
}

static mnode *
node(parser *P, mkind k, int n)
{
    mnode *e = ma_alloc(P->ctx->ar, sizeof *e);
    if (e == NULL)
        return fail(P, "out of memory");
    e->kind = k;
    e->n = n;
    if (n > 0) {
        e->kids = ma_alloc(P->ctx->ar, (size_t)n * sizeof *e->kids);
        if (e->kids == NULL)
            return fail(P, "out of memory");
    }
    return e;
}

static mnode *
node2(parser *P, mkind k, mnode *a, mnode *b)
{
    if (a == NULL || b == NULL)
        return NULL;
    mnode *e = node(P, k, 2);
    if (e) {
        e->kids[0] = a;
        e->kids[1] = b;
    }
    return e;
}

static mnode *
node1(parser *P, mkind k, mnode *a)
{
    if (a == NULL)
        return NULL;
    mnode *e = node(P, k, 1);
    if (e)
        e->kids[0] = a;
    return e;
}

static mnode *
num(parser *P, const char *s)
{
    mnode *e = node(P, N_NUM, 0);
    if (e)
        e->str = s;
    return e;
}

static bool
enter(parser *P)
{
    if (++P->ctx->depth > P->ctx->max_depth) {
        P->ctx->err = "nesting too deep";
        return false;
    }
    return mb_step(P->ctx->bud, 1) || (P->ctx->err = "budget", false);
}

static void
leave(parser *P)
{
    P->ctx->depth--;
}

/* Growable kid vector in the arena. */
typedef struct kv {
    mnode **v;
    int n, cap;
} kv;

static bool
kv_push(parser *P, kv *k, mnode *e)
{
    if (e == NULL)
        return false;
    if (k->n == k->cap) {
        int nc = k->cap ? k->cap * 2 : 4;
        mnode **nv = ma_alloc(P->ctx->ar, (size_t)nc * sizeof *nv);
        if (nv == NULL)
            return false;
        if (k->n)
            memcpy(nv, k->v, (size_t)k->n * sizeof *nv);
        k->v = nv;
        k->cap = nc;
    }
    k->v[k->n++] = e;
    return true;
}

static mnode *
from_kv(parser *P, mkind kind, kv *k)
{
    mnode *e = node(P, kind, 0);
    if (e) {
        e->kids = k->v;
        e->n = k->n;
    }
    return e;
}

/* Parses a text group's content with a fresh lexer. */
static mnode *
p_sub(parser *P, const char *s, size_t n)
{
    if (!enter(P))
        return NULL;
    mnode *e = mparse(P->ctx, s, n);
    leave(P);
    return e;
}

/* A macro argument: {group} or one token (\frac12: one digit of a number). */
static mnode *
p_arg(parser *P)
{
    tok *t = cur(P);
    if (t->k == T_OP && t->c == '{') {
        P->i++;
        mnode *e = p_list(P);
        if (e == NULL)
            return NULL;
        if (!is_op(P, '}'))
            return fail(P, "missing }");
        P->i++;
        return e;
    }
    if (t->k == T_NUM && t->n > 1 && t->c == 0 && t->str[0] != 0 && t->str[1] != 0) {
        char *d = ma_strndup(P->ctx->ar, t->str, 1);
        if (d == NULL)
            return NULL;
        t->str++;
        t->s++;
        t->n--;
        return num(P, d);
    }
    if (t->k == T_NUM || t->k == T_ID || t->k == T_PI || t->k == T_INF)
        return p_primary(P);
    return p_power(P);
}

/* A node for the function `name` over kids a (and b when not NULL). */
static mnode *
fn_node(parser *P, const char *name, mnode *a, mnode *b)
{
    mnode *e = b ? node2(P, N_FUNC, a, b) : node1(P, N_FUNC, a);
    if (e)
        e->str = name;
    return e;
}

/* \sqrt[n]{x} or \sqrt{x} (\sqrt(x) and \sqrt3 too) */
static mnode *
p_sqrt(parser *P)
{
    mnode *idx = NULL;
    if (is_op(P, '[')) {
        P->i++;
        idx = p_expr(P);
        if (idx == NULL || !is_op(P, ']'))
            return fail(P, "bad root index");
        P->i++;
    }
    mnode *a = is_op(P, '(') ? p_power(P) : p_arg(P);
    if (a == NULL)
        return NULL;
    return idx ? fn_node(P, "root", a, idx) : fn_node(P, "sqrt", a, NULL);
}

/* sin, log, ...: an optional ^power and _base (either order) before the argument. */
static bool
p_fn_scripts(parser *P, mnode **pw, mnode **base)
{
    for (int k = 0; k < 2; k++) {
        mnode **to = is_op(P, '^') ? pw : is_op(P, '_') ? base : NULL;
        if (to == NULL)
            break;
        P->i++;
        if ((*to = p_arg(P)) == NULL)
            return false;
    }
    return true;
}

/* The argument of sin, log, ...: a parenthesised list, or a power followed by the letters and
 * \pi written right after it (\sin 2x, \cos \pi t, \ln 3x; \sin x \cos x stops at \cos, \sin x
 * \cdot 2 at \cdot). */
static mnode *
p_fn_arg(parser *P)
{
    mnode *arg;
    if (is_op(P, '(')) {
        P->i++;
        if ((arg = p_list(P)) == NULL)
            return NULL;
        if (!is_op(P, ')'))
            return fail(P, "missing )");
        P->i++;
        return arg;
    }
    if ((arg = p_power(P)) == NULL)
        return NULL;
    kv k = {0};
    if (!kv_push(P, &k, arg))
        return NULL;
    while (cur(P)->k == T_ID || cur(P)->k == T_PI) {
        mnode *f = p_power(P);
        if (f == NULL || !kv_push(P, &k, f))
            return NULL;
    }
    return k.n > 1 ? from_kv(P, N_MUL, &k) : arg;
}

/* A named function (sin, log, max, ...) after its name. */
static mnode *
p_named_fn(parser *P, const char *name)
{
    static const char *const alias[][2] = {
        {"asin", "arcsin"}, {"acos", "arccos"}, {"atan", "arctan"}, {"lg", "log"}};
    static const char *const variadic[] = {"max", "min", "gcd", "lcm", NULL};
    mnode *pw = NULL, *base = NULL, *arg, *e;
    if (!p_fn_scripts(P, &pw, &base) || (arg = p_fn_arg(P)) == NULL)
        return NULL;
    const char *nm = name;
    for (size_t k = 0; k < sizeof alias / sizeof alias[0]; k++)
        if (strcmp(name, alias[k][0]) == 0)
            nm = alias[k][1];
    if (strcmp(name, "lg") == 0 && base == NULL)
        base = num(P, "10");
    if (arg->kind == N_LIST && in_list(variadic, nm, strlen(nm))) {
        if ((e = node(P, N_FUNC, 0)) != NULL) {
            e->kids = arg->kids;
            e->n = arg->n;
            e->str = nm;
        }
    } else {
        e = fn_node(P, nm, arg, base);
    }
    return e && pw ? node2(P, N_POW, e, pw) : e;
}

static mnode *
p_func(parser *P, const char *name)
{
    static const char *const accents[] = {
        "overline",       "bar",       "vec", "hat",  "tilde",    "widehat",
        "overrightarrow", "underline", "dot", "ddot", "mathring", NULL};
    if (strcmp(name, "frac") == 0 || strcmp(name, "binom") == 0) {
        mnode *a = p_arg(P), *b = a ? p_arg(P) : NULL;
        if (b == NULL)
            return NULL;
        return name[0] == 'f' ? node2(P, N_DIV, a, b) : fn_node(P, "binom", a, b);
    }
    if (strcmp(name, "sqrt") == 0)
        return p_sqrt(P);
    if (strcmp(name, "floor") == 0 || strcmp(name, "ceil") == 0)
        return fn_node(P, name, p_power(P), NULL); /* \lfloor: the lexer pushed "(" */
    if (in_list(accents, name, strlen(name)))
        return p_arg(P); /* \overline{AB}: the content */
    return p_named_fn(P, name);
}

/* Closes a bracketed list: ( ), [ ], ( ], [ ), or a single grouped expression. */
static mnode *
p_bracket(parser *P, char open)
{
    P->i++;
    if (is_op(P, ')') && open == '(') {
        P->i++;
        return fail(P, "empty parentheses");
    }
    mnode *e = p_list(P);
    if (e == NULL)
        return NULL;
    tok *t = cur(P);
    if (t->k != T_OP || (t->c != ')' && t->c != ']'))
        return fail(P, "unclosed bracket");
    char close = t->c;
    P->i++;
    bool list = e->kind == N_LIST;
    if (!list) {
        if (open == '(' && close == ')')
            return e;
        if (open == '[' && close == ']')
            return e;
        return fail(P, "mismatched brackets");
    }
    if (e->n == 2 && (open != '(' || close != ')')) {
        mnode *iv = node2(P, N_INTERVAL, e->kids[0], e->kids[1]);
        if (iv) {
            iv->lopen = open == '(';
            iv->ropen = close == ')';
        }
        return iv;
    }
    e->kind = N_TUPLE;
    e->amb = e->n == 2;
    return e;
}

static mnode *
p_matrix(parser *P, const char *env, size_t envn)
{
    kv cells = {0};
    int rows = 0, cols = -1, c = 0;
    for (;;) {
        tok *t = cur(P);
        if (t->k == T_ENDENV) {
            P->i++;
            break;
        }
        if (t->k == T_END)
            return fail(P, "unclosed environment");
        mnode *e = p_expr(P);
        if (!kv_push(P, &cells, e))
            return NULL;
        c++;
        t = cur(P);
        if (t->k == T_OP && t->c == '&') {
            P->i++;
            continue;
        }
        if (t->k == T_ROWSEP || t->k == T_ENDENV) {
            if (cols >= 0 && c != cols)
                return fail(P, "ragged matrix");
            cols = c;
            c = 0;
            rows++;
            if (t->k == T_ROWSEP) {
                P->i++;
                if (cur(P)->k == T_ENDENV) {
                    P->i++;
                    break;
                }
            }
            continue;
        }
        return fail(P, "bad matrix cell");
    }
    (void)env;
    (void)envn;
    if (rows == 0 || cols <= 0)
        return fail(P, "empty matrix");
    mnode *m = from_kv(P, N_MATRIX, &cells);
    if (m) {
        m->rows = rows;
        m->cols = cols;
    }
    return m;
}

static mnode *
p_text(parser *P, tok *t)
{
    /* \operatorname{f}: a function name */
    size_t a = 0, b = t->n;
    while (a < b && isspace((unsigned char)t->s[a]))
        a++;
    while (b > a && isspace((unsigned char)t->s[b - 1]))
        b--;
    bool alpha = b > a;
    for (size_t k = a; k < b; k++)
        if (!isalpha((unsigned char)t->s[k]) && t->s[k] != ' ' && t->s[k] != '.')
            alpha = false;
    if (t->c == 'o' && alpha) {
        char *nm = ma_strndup(P->ctx->ar, t->s + a, b - a);
        return nm ? p_func(P, nm) : NULL;
    }
    if (alpha && b - a == 1) {
        /* 5\text{ m}, 9\,\mathrm{s}: a unit letter after a number; \mathrm{e}, \text{x} stay
         * symbols */
        bool after_num = P->i > 1 && P->t[P->i - 2].k == T_NUM;
        mnode *e = node(P, after_num && is_unit_word(t->s + a, 1) ? N_UNIT : N_SYM, 0);
        if (e && (e->str = ma_strndup(P->ctx->ar, t->s + a, 1)) == NULL)
            return NULL;
        return e;
    }
    if (alpha) {
        mnode *e = node(P, is_unit_word(t->s + a, b - a) ? N_UNIT : N_TEXT, 0);
        if (e == NULL)
            return NULL;
        char *w = ma_strndup(P->ctx->ar, t->s + a, b - a);
        if (w == NULL)
            return NULL;
        for (char *q = w; *q; q++)
            *q = (char)tolower((unsigned char)*q);
        e->str = w;
        if (e->kind == N_TEXT) {
            size_t len = strlen(w);
            if (len > 2 && (strstr(w, " ") != NULL || len > 0)) {
                /* words after a number: "5 apples" -> unit; a lone phrase is a text answer */
                bool unitish = true;
                for (const char *q = w; *q; q++)
                    if (!isalpha((unsigned char)*q) && *q != ' ')
                        unitish = false;
                if (unitish && P->i > 1 && P->t[P->i - 2].k == T_NUM)
                    e->kind = N_UNIT;
            }
        }
        return e;
    }
    if (b == a) {
        mnode *e = node(P, N_UNIT, 0);
        if (e)
            e->str = "";
        return e;
    }
    return p_sub(P, t->s + a, b - a);
}

/* f(...), g(...), h(...): a call of an unknown function (args already past the name). */
static mnode *
p_call(parser *P, const char *name)
{
    P->i++;
    mnode *a = p_list(P), *e;
    if (a == NULL || !is_op(P, ')'))
        return fail(P, "bad function call");
    P->i++;
    if (a->kind == N_LIST) {
        if ((e = node(P, N_FUNC, 0)) != NULL) {
            e->kids = a->kids;
            e->n = a->n;
        }
    } else {
        e = node1(P, N_FUNC, a);
    }
    if (e)
        e->str = name;
    return e;
}

/* A word: a unit, a product of up to three letters ("xy"), or text. */
static mnode *
p_word(parser *P, const char *w)
{
    size_t len = strlen(w);
    mnode *e;
    if (is_unit_word(w, len)) {
        e = node(P, N_UNIT, 0);
    } else if (len <= 3 && !P->ctx->plain) {
        kv k = {0};
        for (size_t q = 0; q < len; q++) {
            mnode *s = node(P, N_SYM, 0);
            if (s == NULL || (s->str = ma_strndup(P->ctx->ar, w + q, 1)) == NULL ||
                !kv_push(P, &k, s))
                return NULL;
        }
        return from_kv(P, N_MUL, &k);
    } else {
        e = node(P, N_TEXT, 0);
    }
    if (e)
        e->str = w;
    return e;
}

static bool
at_close(parser *P, tkind k, char c)
{
    return cur(P)->k == k && (k != T_OP || cur(P)->c == c);
}

/* An enclosed list after its opener: \{ ... \} and { ... } (may be empty: the empty set),
 * \langle ... \rangle. A list becomes `as`; a single element is wrapped in `as` when `wrap`
 * (else returned as it is: plain braces group). */
static mnode *
p_enclosed(parser *P, tkind close_k, char close_c, mkind as, bool wrap, bool may_be_empty,
           const char *why)
{
    P->i++;
    if (may_be_empty && at_close(P, close_k, close_c)) {
        P->i++;
        return node(P, N_EMPTY, 0);
    }
    mnode *l = p_list(P);
    if (l == NULL || !at_close(P, close_k, close_c))
        return fail(P, why);
    P->i++;
    if (l->kind == N_LIST) {
        l->kind = as;
        return l;
    }
    return wrap ? node1(P, as, l) : l;
}

/* |x| */
static mnode *
p_abs(parser *P)
{
    P->i++;
    mnode *a = p_expr(P), *e;
    if (a == NULL || !is_op(P, '|'))
        return fail(P, "bad absolute value");
    P->i++;
    if ((e = node1(P, N_FUNC, a)) != NULL)
        e->str = "abs";
    return e;
}

static mnode *
p_env(parser *P, const tok *t)
{
    static const char *const mats[] = {"pmatrix", "bmatrix", "matrix",      "vmatrix",
                                       "Bmatrix", "array",   "smallmatrix", NULL};
    P->i++;
    if (in_list(mats, t->s, t->n))
        return p_matrix(P, t->s, t->n);
    return fail(P, "unsupported environment");
}

static mnode *
p_op_primary(parser *P, char c)
{
    switch (c) {
    case '(':
    case '[':
        return p_bracket(P, c);
    case '{':
        return p_enclosed(P, T_OP, '}', N_SET, false, true, "missing }");
    case '|':
        return p_abs(P);
    default:
        return fail(P, "unexpected token");
    }
}

static mnode *
p_primary(parser *P)
{
    tok *t = cur(P);
    mnode *e;
    switch (t->k) {
    case T_NUM:
        P->i++;
        if ((e = num(P, t->str)) != NULL)
            e->is_float = t->c == '.';
        return e;
    case T_ID:
        P->i++;
        if ((strcmp(t->str, "f") == 0 || strcmp(t->str, "g") == 0 || strcmp(t->str, "h") == 0) &&
            is_op(P, '('))
            return p_call(P, t->str);
        if ((e = node(P, N_SYM, 0)) != NULL)
            e->str = t->str;
        return e;
    case T_WORD:
        P->i++;
        return p_word(P, t->str);
    case T_FN:
        P->i++;
        return p_func(P, t->str);
    case T_PI:
    case T_INF:
    case T_EMPTY:
        P->i++;
        return node(P, t->k == T_PI ? N_PI : t->k == T_INF ? N_INF : N_EMPTY, 0);
    case T_TEXT:
        P->i++;
        return p_text(P, t);
    case T_LSET:
        return p_enclosed(P, T_RSET, 0, N_SET, true, true, "bad set");
    case T_LANG:
        return p_enclosed(P, T_RANG, 0, N_TUPLE, true, false, "bad vector");
    case T_BEGIN:
        return p_env(P, t);
    case T_OP:
        return p_op_primary(P, t->c);
    default:
        return fail(P, "unexpected token");
    }
}

static mnode *
p_postfix(parser *P)
{
    mnode *e = p_primary(P);
    while (e) {
        tok *t = cur(P);
        if (t->k == T_OP && t->c == '!') {
            P->i++;
            e = node1(P, N_FACT, e);
        } else if (t->k == T_PCT) {
            P->i++;
            e = node1(P, N_PCT, e);
        } else if (t->k == T_DEG) {
            P->i++; /* degrees are a unit */
        } else if (t->k == T_OP && t->c == '\'') {
            P->i++;
        } else if (t->k == T_OP && t->c == '_') {
            /* subscript: part of a name (x_1, a_{n}); a number base (1010_2) */
            P->i++;
            tok *s = cur(P);
            char sub[48] = {0};
            if (s->k == T_NUM || s->k == T_ID) {
                snprintf(sub, sizeof sub, "%s", s->str);
                P->i++;
            } else if (s->k == T_OP && s->c == '{') {
                int j = P->i + 1;
                size_t o = 0;
                while (P->t[j].k != T_END && !(P->t[j].k == T_OP && P->t[j].c == '}')) {
                    const char *w = P->t[j].str ? P->t[j].str : "";
                    if (P->t[j].k == T_OP) {
                        if (o + 1 < sizeof sub)
                            sub[o++] = P->t[j].c;
                    } else {
                        size_t l = strlen(w);
                        if (o + l + 1 < sizeof sub) {
                            memcpy(sub + o, w, l);
                            o += l;
                        }
                    }
                    j++;
                    if (!mb_step(P->ctx->bud, 1))
                        return fail(P, "budget");
                }
                if (P->t[j].k == T_END)
                    return fail(P, "unclosed subscript");
                P->i = j + 1;
            } else
                return fail(P, "bad subscript");
            if (e->kind == N_SYM) {
                size_t l = strlen(e->str) + strlen(sub) + 2;
                char *nm = ma_alloc(P->ctx->ar, l);
                if (nm == NULL)
                    return NULL;
                snprintf(nm, l, "%s_%s", e->str, sub);
                e->str = nm;
            } else if (e->kind == N_NUM && !e->is_float) {
                /* a number in base b */
                char *end;
                long base = strtol(sub, &end, 10);
                if (*end || base < 2 || base > 36)
                    return fail(P, "bad base");
                unsigned long long v = 0;
                for (const char *q = e->str; *q; q++) {
                    int d = *q - '0';
                    if (d < 0 || d >= base || v > (1ULL << 56))
                        return fail(P, "bad digit for base");
                    v = v * (unsigned long long)base + (unsigned long long)d;
                }
                char *nb = ma_alloc(P->ctx->ar, 24);
                if (nb == NULL)
                    return NULL;
                snprintf(nb, 24, "%llu", v);
                e->str = nb;
            } else
                return fail(P, "subscript on an expression");
        } else
            break;
    }
    return e;
}

static mnode *
p_power(parser *P)
{
    if (!enter(P))
        return NULL;
    mnode *b = p_postfix(P);
    while (b && is_op(P, '^')) {
        P->i++;
        tok *t = cur(P);
        if (t->k == T_DEG) { /* ^\circ */
            P->i++;
            continue;
        }
        if (t->k == T_OP && t->c == '{' && P->t[P->i + 1].k == T_DEG && P->t[P->i + 2].k == T_OP &&
            P->t[P->i + 2].c == '}') {
            P->i += 3;
            continue;
        }
        mnode *x;
        if (t->k == T_OP && t->c == '{')
            x = p_arg(P);
        else if (t->k == T_OP && (t->c == '-' || t->c == '+'))
            x = p_unary(P);
        else
            x = p_power(P);
        if (b->kind == N_UNIT && x) /* cm^2: still a unit */
            continue;
        b = node2(P, N_POW, b, x);
        /* postfix after a power: x^2! is rare; a degree sign after ^{...} is handled above */
        while (b && cur(P)->k == T_PCT) {
            P->i++;
            b = node1(P, N_PCT, b);
        }
    }
    leave(P);
    return b;
}

static mnode *
p_unary(parser *P)
{
    if (!enter(P))
        return NULL;
    mnode *e;
    tok *t = cur(P);
    if (t->k == T_OP && t->c == '-') {
        P->i++;
        e = node1(P, N_NEG, p_unary(P));
    } else if (t->k == T_OP && t->c == '+') {
        P->i++;
        e = p_unary(P);
    } else if (t->k == T_PM || t->k == T_MP) {
        P->i++;
        mnode *z = num(P, "0");
        e = node2(P, N_PM, z, p_unary(P));
    } else
        e = p_power(P);
    leave(P);
    return e;
}

/* Can the current token start an implicit factor (2x, 2\pi, x(y+1), 3\sqrt2)? */
static bool
starts_factor(parser *P)
{
    tok *t = cur(P);
    switch (t->k) {
    case T_NUM:
    case T_ID:
    case T_WORD:
    case T_FN:
    case T_PI:
    case T_INF:
    case T_TEXT:
    case T_BEGIN:
        return true;
    case T_OP:
        return t->c == '(' || t->c == '{';
    default:
        return false;
    }
}

static bool
is_small_int(const mnode *e)
{
    return e && e->kind == N_NUM && !e->is_float && strlen(e->str) < 10;
}

/* A number as written: 60, 3.5, -2, 1/2. */
static bool
is_number_literal(const mnode *e)
{
    if (e->kind == N_NEG)
        return e->kids[0]->kind == N_NUM;
    if (e->kind == N_DIV)
        return e->kids[0]->kind == N_NUM && e->kids[1]->kind == N_NUM;
    return e->kind == N_NUM;
}

/* "60m", "3.5 s", "2h", "4g": when a whole answer is a number and one of these letters, the
 * letter is a unit (as math-verify reads it), not a product with a variable. Other letters
 * (2x, 3n, 3d) stay products. */
static bool
is_unit_letter(const mnode *f)
{
    return f->kind == N_SYM && f->str && f->str[0] && !f->str[1] && strchr("mshg", f->str[0]);
}

static mnode *
p_term(parser *P)
{
    kv k = {0};
    int start = P->i;
    mnode *first = p_unary(P);
    if (first == NULL)
        return NULL;
    if (first->kind != N_UNIT && !kv_push(P, &k, first))
        return NULL;
    for (;;) {
        tok *t = cur(P);
        mnode *f;
        if (t->k == T_OP && (t->c == '*' || t->c == '/')) {
            char op = t->c;
            P->i++;
            f = p_unary(P);
            if (f == NULL)
                return NULL;
            if (f->kind == N_UNIT)
                continue;
            if (op == '/') {
                if (k.n == 0)
                    return fail(P, "nothing to divide");
                mnode *prev = k.n == 1 ? k.v[0] : from_kv(P, N_MUL, &k);
                mnode *d = node2(P, N_DIV, prev, f);
                k = (kv){0};
                if (!kv_push(P, &k, d))
                    return NULL;
                continue;
            }
        } else if (start == 0 && t->k == T_FN && t->str && is_unit_word(t->str, strlen(t->str)) &&
                   P->t[P->i + 1].k == T_END && k.n == 1 && is_number_literal(k.v[0])) {
            P->i++; /* "8 min": a unit that is also a function name, ending the answer */
            continue;
        } else if (starts_factor(P)) {
            /* mixed number: 3\frac{1}{2} (integer then a proper fraction of integers) */
            bool mixed =
                k.n == 1 && is_small_int(k.v[0]) && t->k == T_FN && strcmp(t->str, "frac") == 0;
            f = p_power(P);
            if (f == NULL)
                return NULL;
            if (mixed && f->kind == N_DIV && is_small_int(f->kids[0]) && is_small_int(f->kids[1]) &&
                atol(f->kids[0]->str) < atol(f->kids[1]->str) && P->i > 0) {
                mnode *a = node2(P, N_ADD, k.v[0], f);
                k.v[0] = a;
                continue;
            }
            if (f->kind == N_UNIT)
                continue;
            if (start == 0 && cur(P)->k == T_END && k.n == 1 && is_number_literal(k.v[0]) &&
                is_unit_letter(f))
                continue;
        } else
            break;
        if (!kv_push(P, &k, f))
            return NULL;
    }
    if (k.n == 0) {
        mnode *u = node(P, N_UNIT, 0);
        if (u)
            u->str = first->str ? first->str : "";
        return u;
    }
    return k.n == 1 ? k.v[0] : from_kv(P, N_MUL, &k);
}

static mnode *
p_expr(parser *P)
{
    if (!enter(P))
        return NULL;
    kv k = {0};
    mnode *e = p_term(P);
    if (!kv_push(P, &k, e)) {
        leave(P);
        return NULL;
    }
    for (;;) {
        tok *t = cur(P);
        if (t->k == T_OP && (t->c == '+' || t->c == '-')) {
            P->i++;
            mnode *x = p_term(P);
            if (t->c == '-')
                x = node1(P, N_NEG, x);
            if (!kv_push(P, &k, x)) {
                leave(P);
                return NULL;
            }
        } else if (t->k == T_PM || t->k == T_MP) {
            P->i++;
            mnode *x = p_term(P);
            mnode *a = k.n == 1 ? k.v[0] : from_kv(P, N_ADD, &k);
            mnode *pm = node2(P, N_PM, a, x);
            k = (kv){0};
            if (!kv_push(P, &k, pm)) {
                leave(P);
                return NULL;
            }
        } else
            break;
    }
    leave(P);
    return k.n == 1 ? k.v[0] : from_kv(P, N_ADD, &k);
}

static mnode *
p_setexpr(parser *P)
{
    mnode *e = p_expr(P);
    if (e && is_op(P, ':') && P->t[P->i + 1].k != T_END) { /* a ratio or a time: 3:2, 12:00 */
        P->i++;
        mnode *r = node2(P, N_TUPLE, e, p_expr(P));
        if (r)
            r->ratio = true;
        return r;
    }
    if (e == NULL || (cur(P)->k != T_CUP && cur(P)->k != T_CAP))
        return e;
    kv k = {0};
    kv_push(P, &k, e);
    while (cur(P)->k == T_CUP) {
        P->i++;
        if (!kv_push(P, &k, p_expr(P)))
            return NULL;
    }
    if (cur(P)->k == T_CAP)
        return fail(P, "intersection");
    return from_kv(P, N_UNION, &k);
}

static int
relop(tok *t)
{
    switch (t->k) {
    case T_OP:
        return t->c == '=' ? R_EQ : t->c == '<' ? R_LT : t->c == '>' ? R_GT : 0;
    case T_LE:
        return R_LE;
    case T_GE:
        return R_GE;
    case T_NE:
        return R_NE;
    case T_APPROX:
        return R_EQ;
    case T_IN:
        return R_IN;
    default:
        return 0;
    }
}

static mnode *
p_rel(parser *P)
{
    if (!enter(P))
        return NULL;
    kv k = {0};
    char ops[64];
    int nops = 0;
    mnode *e = p_setexpr(P);
    if (!kv_push(P, &k, e)) {
        leave(P);
        return NULL;
    }
    int op;
    while ((op = relop(cur(P))) != 0) {
        P->i++;
        if (nops == (int)sizeof ops - 1) {
            leave(P);
            return fail(P, "relation chain too long");
        }
        ops[nops++] = (char)op;
        if (!kv_push(P, &k, p_setexpr(P))) {
            leave(P);
            return NULL;
        }
    }
    leave(P);
    if (nops == 0)
        return e;
    mnode *r = from_kv(P, N_REL, &k);
    if (r && (r->ops = ma_strndup(P->ctx->ar, ops, (size_t)nops)) == NULL)
        return NULL;
    return r;
}

static mnode *
p_list(parser *P)
{
    if (!enter(P))
        return NULL;
    kv k = {0};
    mnode *e = p_rel(P);
    if (!kv_push(P, &k, e)) {
        leave(P);
        return NULL;
    }
    while (is_op(P, ',') || is_op(P, ';') || cur(P)->k == T_AND) {
        P->i++;
        while (cur(P)->k == T_AND)
            P->i++;
        if (cur(P)->k == T_END)
            break; /* a trailing comma */
        if (!kv_push(P, &k, p_rel(P))) {
            leave(P);
            return NULL;
        }
    }
    leave(P);
    return k.n == 1 ? k.v[0] : from_kv(P, N_LIST, &k);
}

static bool
has_text(const mnode *e, int depth)
{
    if (e->kind == N_TEXT || depth > 300)
        return true;
    for (int k = 0; k < e->n; k++)
        if (has_text(e->kids[k], depth + 1))
            return true;
    return false;
}

mnode *
mparse(mparse_ctx *ctx, const char *text, size_t n)
{
    lexer L = {ctx, NULL, 0, 0, 0, false};
    /* trailing sentence punctuation is not part of the answer */
    while (n > 0 && (text[n - 1] == '.' || isspace((unsigned char)text[n - 1])))
        n--;
    if (n == 0) {
        ctx->err = "empty";
        return NULL;
    }
    if (!lex(&L, text, n)) {
        if (ctx->err == NULL)
            ctx->err = ctx->bud->exhausted ? "budget" : "lexer failed";
        return NULL;
    }
    for (int k = 0; k < L.nt; k++)
        if (L.t[k].k == T_BAD) {
            ctx->err = "unsupported notation";
            return NULL;
        }
    parser P = {ctx, L.t, 0, L.nt};
    /* a leading "x =" / "=" left by extraction is harmless; a leading ":" too */
    while (is_op(&P, ':') || is_op(&P, '='))
        P.i++;
    mnode *e = p_list(&P);
    if (e && cur(&P)->k != T_END)
        return fail(&P, "trailing tokens");
    if (e && e->kind != N_TEXT && has_text(e, 0))
        return fail(&P, "words inside an expression");
    return e;
}

/* ---- printing ----------------------------------------------------------------------------- */

typedef struct pbuf {
    char *b;
    size_t n, cap;
} pbuf;

static void
pput(pbuf *p, const char *s)
{
    while (*s && p->n + 1 < p->cap)
        p->b[p->n++] = *s++;
    p->b[p->n] = 0;
}

static void
pnode(pbuf *p, const mnode *e, int depth)
{
    static const char *const names[] = {"num",   "sym",  "pi",     "inf",   "add",      "mul",
                                        "neg",   "div",  "pow",    "fn",    "fact",     "pct",
                                        "pm",    "list", "set",    "tuple", "interval", "union",
                                        "empty", "rel",  "matrix", "text",  "unit"};
    if (depth > 64 || p->n + 8 >= p->cap) {
        pput(p, "...");
        return;
    }
    if (e->kind == N_NUM || e->kind == N_SYM || e->kind == N_TEXT) {
        pput(p, e->str);
        return;
    }
    pput(p, names[e->kind]);
    if (e->kind == N_FUNC) {
        pput(p, ":");
        pput(p, e->str);
    }
    if (e->kind == N_INTERVAL)
        pput(p, e->lopen ? "(" : "[");
    if (e->kind == N_REL) {
        pput(p, ":");
        pput(p, e->ops);
    }
    pput(p, "(");
    for (int k = 0; k < e->n; k++) {
        if (k)
            pput(p, ",");
        pnode(p, e->kids[k], depth + 1);
    }
    pput(p, ")");
    if (e->kind == N_INTERVAL)
        pput(p, e->ropen ? ")" : "]");
}

void
mnode_print(const mnode *e, char *buf, size_t cap)
{
    pbuf p = {buf, 0, cap};
    if (cap == 0)
        return;
    buf[0] = 0;
    if (e)
        pnode(&p, e, 0);
}
