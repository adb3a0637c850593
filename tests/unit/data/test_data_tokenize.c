/* The byte-level tokenizer: strict UTF-8, the three document modes, and `dsrun tokenize`
 * end to end (encode, decode, --info, refusals). */
#include <stdarg.h>
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bytetok.h"
#include "data_test_util.h"
#include "subcommands.h"
#include "tokfile.h"

static void check_valid(const char *s, size_t n) {
    size_t bad = 999;
    assert_int_equal(ds_utf8_validate((const uint8_t *)s, n, &bad), 0);
}

static void check_invalid(const char *s, size_t n, size_t want_bad) {
    size_t bad = 999;
    assert_int_equal(ds_utf8_validate((const uint8_t *)s, n, &bad), -1);
    assert_int_equal(bad, want_bad);
}

static void test_utf8(void **state) {
    (void)state;
    check_valid("", 0);
    check_valid("plain ascii\n", 12);
    check_valid("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 14); /* é € 😀 */
    check_valid("\xed\x9f\xbf", 3);                              /* U+D7FF */
    check_valid("\xf4\x8f\xbf\xbf", 4);                          /* U+10FFFF */
    check_valid("a\0b", 3);                                     /* NUL is valid UTF-8 */
    check_invalid("ab\x80", 3, 2);                               /* lone continuation */
    check_invalid("a\xc0\xaf", 3, 1);                            /* overlong '/' */
    check_invalid("\xe0\x80\xaf", 3, 0);                         /* overlong 3-byte */
    check_invalid("xy\xed\xa0\x80", 5, 2);                       /* surrogate U+D800 */
    check_invalid("\xf4\x90\x80\x80", 4, 0);                     /* above U+10FFFF */
    check_invalid("\xf5\x80\x80\x80", 4, 0);
    check_invalid("ok\xe2\x82", 4, 2);                           /* cut short at the end */
    check_invalid("\xe2\x82x", 3, 0);                            /* bad continuation */
    check_invalid("\xff", 1, 0);
}

typedef struct collect {
    uint32_t t[256];
    size_t n;
    int calls;
} collect;

static int collect_sink(void *ctx, const uint32_t *t, size_t n, ds_err *err) {
    (void)err;
    collect *c = ctx;
    assert_true(c->n + n <= 256);
    memcpy(c->t + c->n, t, n * sizeof *t);
    c->n += n;
    c->calls++;
    return 0;
}

/* Encodes s under mode; the result rendered with '|' for end-of-text must equal want. */
static void check_encode(const char *s, ds_docs_mode mode, const char *want) {
    collect c = {.n = 0};
    ds_err err = {{0}};
    assert_int_equal(ds_bytetok_encode((const uint8_t *)s, strlen(s), mode, collect_sink, &c, &err), 0);
    char got[300];
    for (size_t i = 0; i < c.n; i++) got[i] = c.t[i] == DS_BYTETOK_EOT ? '|' : (char)c.t[i];
    got[c.n] = '\0';
    assert_string_equal(got, want);
}

static void test_doc_modes(void **state) {
    (void)state;
    check_encode("a\nb\n\n\nc\n", DS_DOCS_NONE, "a\nb\n\n\nc\n");
    check_encode("a\nb\n\n\nc\n", DS_DOCS_FILE, "a\nb\n\n\nc\n|");
    check_encode("", DS_DOCS_FILE, "");
    check_encode("a\nb\n\n\nc\n", DS_DOCS_BLANK, "a\nb\n|c\n|");
    check_encode("\n\none\r\n\r\ntwo", DS_DOCS_BLANK, "one\r\n|two|");
    check_encode(" \n\nx\n", DS_DOCS_BLANK, " \n|x\n|"); /* a space is not blank */
    check_encode("\n\n\n", DS_DOCS_BLANK, "");
    /* Multi-byte characters are their bytes, one token each. */
    collect c = {.n = 0};
    ds_err err = {{0}};
    assert_int_equal(ds_bytetok_encode((const uint8_t *)"\xc3\xa9", 2, DS_DOCS_FILE, collect_sink, &c, &err), 0);
    assert_int_equal(c.n, 3);
    assert_int_equal(c.t[0], 0xc3);
    assert_int_equal(c.t[1], 0xa9);
    assert_int_equal(c.t[2], DS_BYTETOK_EOT);
}

/* Checks tokens arrive in order across the sink's batches. */
typedef struct order_check {
    const uint8_t *s;
    size_t n, count;
    int calls;
} order_check;

static int order_sink(void *ctx, const uint32_t *t, size_t n, ds_err *err) {
    (void)err;
    order_check *k = ctx;
    for (size_t i = 0; i < n; i++) {
        size_t at = k->count + i;
        assert_int_equal(t[i], at < k->n ? k->s[at] : DS_BYTETOK_EOT);
    }
    k->count += n;
    k->calls++;
    return 0;
}

static void test_sink_batches(void **state) {
    (void)state;
    enum { N = 10000 };
    static uint8_t s[N];
    for (int i = 0; i < N; i++) s[i] = (uint8_t)('a' + i % 26);
    order_check k = {.s = s, .n = N};
    ds_err err = {{0}};
    assert_int_equal(ds_bytetok_encode(s, N, DS_DOCS_FILE, order_sink, &k, &err), 0);
    assert_int_equal(k.count, N + 1);
    assert_true(k.calls >= 2 && k.calls <= 4); /* batched, not per token */
}

static int run_tokenize(const char *a1, const char *a2, const char *a3, const char *a4) {
    char *argv[6] = {"tokenize", (char *)a1, (char *)a2, (char *)a3, (char *)a4, NULL};
    int argc = 1;
    while (argc < 5 && argv[argc]) argc++;
    return dsrun_tokenize_main(argc, argv);
}

static void test_cli_round_trip(void **state) {
    (void)state;
    const char *text = "Hello, w\xc3\xb6rld \xe2\x82\xac!\n\nSecond doc.\n";
    const char *in = scratch_path("in.txt"), *out = scratch_path("out.tok");
    write_bytes(in, text, strlen(text));
    assert_int_equal(run_tokenize(in, out, NULL, NULL), 0);
    ds_tokfile tf;
    ds_err err = {{0}};
    assert_int_equal(ds_tokfile_open(&tf, out, &err), 0);
    assert_int_equal(tf.width, 2);
    assert_int_equal(tf.vocab, DS_BYTETOK_VOCAB);
    assert_int_equal(tf.count, strlen(text) + 1);
    for (size_t i = 0; i < strlen(text); i++)
        assert_int_equal(ds_tokfile_get(&tf, i), (uint8_t)text[i]);
    assert_int_equal(ds_tokfile_get(&tf, strlen(text)), DS_BYTETOK_EOT);
    ds_tokfile_close(&tf);
    /* Decoding gives the text back, end-of-text as the chosen marker. */
    const char *dec = scratch_path("dec.txt");
    assert_int_equal(run_tokenize("--decode", "--eot=@@", out, dec), 0);
    size_t n;
    unsigned char *got = read_bytes(dec, &n);
    assert_int_equal(n, strlen(text) + 2);
    assert_memory_equal(got, text, strlen(text));
    assert_memory_equal(got + strlen(text), "@@", 2);
    free(got);
    /* Blank-line documents, two input files, 4-byte tokens. */
    assert_int_equal(run_tokenize("--docs=blank", "--width=4", in, NULL), 2); /* needs OUT */
    char *argv[] = {"tokenize", "--docs=blank", "--width=4", (char *)in, (char *)in, (char *)out};
    assert_int_equal(dsrun_tokenize_main(6, argv), 0);
    assert_int_equal(ds_tokfile_open(&tf, out, &err), 0);
    assert_int_equal(tf.width, 4);
    assert_int_equal(tf.count, 2 * (strlen(text) - 1 + 2)); /* one blank line dropped */
    ds_tokfile_close(&tf);
    assert_int_equal(run_tokenize("--info", out, NULL, NULL), 0);
}

static void test_cli_refusals(void **state) {
    (void)state;
    const char *bad = scratch_path("bad.txt"), *out = scratch_path("bad.tok");
    write_bytes(bad, "line one\nli\xffne two\n", 19);
    unlink(out);
    assert_int_equal(run_tokenize(bad, out, NULL, NULL), 1);
    assert_int_not_equal(access(out, F_OK), 0); /* nothing written on failure */
    /* The library's message names the file, the byte offset, line and column. */
    ds_err err = {{0}};
    uint64_t bytes;
    order_check k = {.s = NULL};
    assert_int_equal(ds_bytetok_encode_file(bad, DS_DOCS_FILE, 0, order_sink, &k, &bytes, &err), -1);
    assert_int_equal(k.count, 0);
    assert_non_null(strstr(err.msg, bad));
    assert_non_null(strstr(err.msg, "invalid UTF-8 at byte offset 11 (line 2, byte column 3)"));
    /* --bytes takes any bytes. */
    assert_int_equal(run_tokenize("--bytes", bad, out, NULL), 0);
    ds_tokfile tf;
    assert_int_equal(ds_tokfile_open(&tf, out, &err), 0);
    assert_int_equal(ds_tokfile_get(&tf, 11), 0xff);
    ds_tokfile_close(&tf);
    assert_int_equal(run_tokenize("--docs=pages", bad, out, NULL), 2);
    assert_int_equal(run_tokenize("--width=3", bad, out, NULL), 2);
    assert_int_equal(run_tokenize("--frobnicate", bad, out, NULL), 2);
    assert_int_equal(run_tokenize(scratch_path("missing.txt"), out, NULL, NULL), 1);
    /* Decoding refuses a token outside the byte vocabulary. */
    uint32_t toks[2] = {65, 300};
    assert_int_equal(ds_tokfile_write(out, toks, 2, 2, 0, &err), 0);
    assert_int_equal(run_tokenize("--decode", out, scratch_path("x.txt"), NULL), 1);
    assert_int_equal(run_tokenize("--info", out, NULL, NULL), 0); /* vocab unknown: fine */
}

static int teardown(void **state) {
    (void)state;
    scratch_cleanup();
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_utf8),           cmocka_unit_test(test_doc_modes),
        cmocka_unit_test(test_sink_batches),   cmocka_unit_test(test_cli_round_trip),
        cmocka_unit_test(test_cli_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, teardown);
}
