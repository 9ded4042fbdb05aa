/* The code verifier's pure parts: extraction of the last fenced block, LiveCodeBench-style
 * stdout comparison, JSON equality for call-based results and the APPS test formats. Expected
 * values are worked out by hand from the rules in verifiers/code/code_int.h. */
#include "verifiers/code/code_int.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

static char *
ex(const char *text, code_lang lang, bool think_open)
{
    return grpo_code__extract(text, strlen(text), lang, think_open);
}

static void
t_extract(void **state)
{
    (void)state;
    char *c;
    c = ex("<think>```python\nprint(0)\n```</think>\nA:\n```python\nprint(1)\n```\nB:\n```py\n"
           "print(2)\n```\n",
           CODE_PY, true);
    assert_string_equal(c, "print(2)");
    free(c);
    /* the think part alone is no answer, when the template opened <think> */
    assert_null(ex("<think>```python\nprint(0)\n```", CODE_PY, true));
    c = ex("```python\nprint(0)\n```", CODE_PY, false); /* no think block at all */
    assert_string_equal(c, "print(0)");
    free(c);
    /* the requested language wins over a later block of another language */
    c = ex("</think>```cpp\nint main(){}\n```\n```python\nx=1\n```\n", CODE_CPP, true);
    assert_string_equal(c, "int main(){}");
    free(c);
    c = ex("</think>```c\nA\n```\n```c++\nB\n```\n", CODE_C, true);
    assert_string_equal(c, "A");
    free(c);
    /* an untagged block only when no tagged one exists */
    c = ex("</think>```\nU\n```\n", CODE_PY, true);
    assert_string_equal(c, "U");
    free(c);
    c = ex("</think>```python\nT\n```\n```\nU\n```\n", CODE_PY, true);
    assert_string_equal(c, "T");
    free(c);
    assert_null(ex("</think>no code", CODE_PY, true));
    assert_null(ex("</think>```python\n   \n```", CODE_PY, true));
    /* truncated generation: an unclosed last block still counts */
    c = ex("</think>```python\nprint(3)\n", CODE_PY, true);
    assert_string_equal(c, "print(3)");
    free(c);
}

static void
t_stdout(void **state)
{
    (void)state;
    const double tol = 1e-6;
    assert_true(grpo_code__stdout_match("3\n", 2, "3", tol));
    assert_true(grpo_code__stdout_match("  3  \n\n", 7, "3\n", tol));
    assert_true(grpo_code__stdout_match("1 2\n3 4\n", 8, "1 2\n3 4", tol));
    assert_true(grpo_code__stdout_match("1  2 \n", 6, "1 2", tol));          /* tokens */
    assert_true(grpo_code__stdout_match("0.3333333", 9, "0.33333333", tol)); /* |d| < 1e-6 */
    assert_true(grpo_code__stdout_match("1e3", 3, "1000", tol));
    assert_true(grpo_code__stdout_match("2000000.5", 9, "2000000.501", tol)); /* relative */
    assert_false(grpo_code__stdout_match("0.33", 4, "0.3334", tol));
    assert_false(grpo_code__stdout_match("3\n4", 3, "3", tol));
    assert_false(grpo_code__stdout_match("", 0, "3", tol));
    assert_false(grpo_code__stdout_match("0x10", 4, "16", tol));
    assert_false(grpo_code__stdout_match("YES", 3, "yes", tol));
    assert_false(grpo_code__stdout_match("1 2", 3, "1 2 3", tol));
    assert_true(grpo_code__stdout_match("nan", 3, "nan ", tol)); /* equal text */
    assert_false(grpo_code__stdout_match("inf", 3, "1e999", tol));
    assert_false(grpo_code__stdout_match("1\n\n2", 4, "1\n2", tol)); /* inner empty line counts */
    /* integers are exact at any size; only reals get the tolerance */
    assert_false(grpo_code__stdout_match("1000001", 7, "1000000", tol));
    assert_false(
        grpo_code__stdout_match("123456789012345678901", 21, "123456789012345678902", tol));
    assert_true(grpo_code__stdout_match("123456789012345678901", 21, "123456789012345678901", tol));
    assert_true(grpo_code__stdout_match("+007 -0", 7, "7 0", tol));
    assert_false(grpo_code__stdout_match("-7", 2, "7", tol));
    assert_false(grpo_code__stdout_match("-", 1, "0", tol));
    assert_true(grpo_code__stdout_match("1000000.0", 9, "1000000", tol)); /* a real: tolerance */
    assert_true(grpo_code__stdout_match("2.0000000001", 12, "2", tol));
}

static void
t_json(void **state)
{
    (void)state;
    struct {
        const char *a, *b;
        bool eq;
    } cases[] = {
        {"3", "3", true},
        {"3", "3.0", true},
        {"3", "4", false},
        {"0.1", "0.1000000001", true},
        {"0.1", "0.11", false},
        {"true", "1", false},
        {"true", "true", true},
        {"null", "null", true},
        {"\"a\"", "\"a\"", true},
        {"\"a\"", "\"A\"", false},
        {"[1,[2,3]]", "[1,[2,3]]", true},
        {"[1,2]", "[2,1]", false},
        {"[1]", "[1,1]", false},
        {"{\"a\":1,\"b\":[2]}", "{\"b\":[2],\"a\":1}", true},
        {"{\"a\":1}", "{\"a\":1,\"b\":2}", false},
        {"[]", "{}", false},
        {"100000000000000000", "100000000000000016", false}, /* > 2^53, one double apart */
        {"1e17", "100000000000000000", true},
        {"1000000", "1000001", false},
        {"2", "1.9999999999999998", true}, /* a real beside an integer: tolerance */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cJSON *a = cJSON_Parse(cases[i].a), *b = cJSON_Parse(cases[i].b);
        assert_non_null(a);
        assert_non_null(b);
        if (grpo_code__json_equal(a, b, 1e-6) != cases[i].eq)
            fail_msg("%s vs %s", cases[i].a, cases[i].b);
        cJSON_Delete(a);
        cJSON_Delete(b);
    }
}

static void
t_tests(void **state)
{
    (void)state;
    code_tests t;
    assert_int_equal(grpo_code__tests_parse("{\"inputs\": [\"1\\n\", [\"2\", \"3\"]], \"outputs\": "
                                            "[\"a\", [\"b\", \"c\"]]}",
                                            &t),
                     GRPO_OK);
    assert_int_equal(t.n, 2);
    assert_false(t.call_based);
    assert_string_equal(t.inputs[1], "2\n3");
    assert_string_equal(t.outputs[1], "b\nc");
    grpo_code__tests_fini(&t);
    /* APPS keeps input_output as a JSON string */
    assert_int_equal(grpo_code__tests_parse("\"{\\\"fn_name\\\": \\\"f\\\", \\\"inputs\\\": "
                                            "[[1, 2]], \\\"outputs\\\": [3]}\"",
                                            &t),
                     GRPO_OK);
    assert_true(t.call_based);
    assert_string_equal(t.fn_name, "f");
    assert_int_equal(cJSON_GetArraySize(t.args[0]), 2);
    assert_int_equal(t.expected[0]->valueint, 3);
    grpo_code__tests_fini(&t);
    assert_int_equal(grpo_code__tests_parse("[{\"input\": \"x\", \"output\": \"y\"}]", &t),
                     GRPO_OK);
    assert_string_equal(t.outputs[0], "y");
    grpo_code__tests_fini(&t);
    assert_int_equal(grpo_code__tests_parse("{\"inputs\": [\"1\"], \"outputs\": []}", &t),
                     GRPO_EFORMAT);
    assert_non_null(strstr(grpo_error_last(), "1 inputs but 0 outputs"));
    grpo_code__tests_fini(&t);
    assert_int_equal(grpo_code__tests_parse("{\"inputs\": [], \"outputs\": []}", &t),
                     GRPO_ENOTFOUND);
    grpo_code__tests_fini(&t);
    assert_int_not_equal(grpo_code__tests_parse("{\"inputs\": [1", &t), GRPO_OK);
    grpo_code__tests_fini(&t);
    assert_int_equal(grpo_code__tests_parse("{\"inputs\": [3], \"outputs\": [\"3\"]}", &t),
                     GRPO_EFORMAT);
    grpo_code__tests_fini(&t);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_extract),
        cmocka_unit_test(t_stdout),
        cmocka_unit_test(t_json),
        cmocka_unit_test(t_tests),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
