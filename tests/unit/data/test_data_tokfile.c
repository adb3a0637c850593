/* Token files: the exact bytes written, round trips, and every refusal with its message. */
#include <stdarg.h>
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data_test_util.h"
#include "tokfile.h"

/* The header as docs/data.md specifies it, built byte by byte. */
static size_t make_header(unsigned char *h, const char *magic, uint32_t version, uint32_t width,
                          uint64_t count, uint32_t vocab, uint32_t reserved) {
    memcpy(h, magic, 8);
    for (int i = 0; i < 4; i++) h[8 + i] = (unsigned char)(version >> (8 * i));
    for (int i = 0; i < 4; i++) h[12 + i] = (unsigned char)(width >> (8 * i));
    for (int i = 0; i < 8; i++) h[16 + i] = (unsigned char)(count >> (8 * i));
    for (int i = 0; i < 4; i++) h[24 + i] = (unsigned char)(vocab >> (8 * i));
    for (int i = 0; i < 4; i++) h[28 + i] = (unsigned char)(reserved >> (8 * i));
    return 32;
}

static void test_exact_bytes(void **state) {
    (void)state;
    const uint32_t toks[3] = {1, 256, 0x1234};
    const char *p = scratch_path("exact.tok");
    ds_err err = {{0}};
    assert_int_equal(ds_tokfile_write(p, toks, 3, 2, 257, &err), -1); /* 0x1234 >= 257 */
    assert_non_null(strstr(err.msg, "token 4660 at index 2"));
    assert_int_equal(ds_tokfile_write(p, toks, 3, 2, 0, &err), 0);
    unsigned char want[38];
    make_header(want, "DSTOKENS", 1, 2, 3, 0, 0);
    const unsigned char body[6] = {1, 0, 0, 1, 0x34, 0x12};
    memcpy(want + 32, body, 6);
    size_t n;
    unsigned char *got = read_bytes(p, &n);
    assert_int_equal(n, sizeof want);
    assert_memory_equal(got, want, sizeof want);
    free(got);
    /* No temporary file is left behind. */
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", p, (long)getpid());
    assert_int_not_equal(access(tmp, F_OK), 0);
}

static void test_round_trip(void **state) {
    (void)state;
    enum { N = 10000 };
    static uint32_t toks[N];
    for (int w = 2; w <= 4; w += 2) {
        uint32_t vocab = w == 2 ? 65536 : 100000;
        for (int i = 0; i < N; i++) toks[i] = (uint32_t)(i * 7919u) % vocab;
        const char *p = scratch_path(w == 2 ? "rt2.tok" : "rt4.tok");
        ds_err err = {{0}};
        assert_int_equal(ds_tokfile_write(p, toks, N, w, vocab, &err), 0);
        ds_tokfile tf;
        assert_int_equal(ds_tokfile_open(&tf, p, &err), 0);
        assert_int_equal(tf.width, w);
        assert_int_equal(tf.vocab, vocab);
        assert_int_equal(tf.count, N);
        for (int i = 0; i < N; i++) assert_int_equal(ds_tokfile_get(&tf, i), toks[i]);
        assert_int_equal(ds_tokfile_check_range(&tf, vocab, &err), 0);
        assert_int_equal(ds_tokfile_check_range(&tf, 17, &err), -1);
        assert_non_null(strstr(err.msg, "out of range for vocab 17"));
        ds_tokfile_close(&tf);
    }
}

static void test_streaming_writer(void **state) {
    (void)state;
    const char *p = scratch_path("stream.tok");
    ds_err err = {{0}};
    ds_tokwriter w;
    assert_int_equal(ds_tokwriter_open(&w, p, 4, 0, &err), 0);
    uint32_t a[2] = {5, 0xFFFFFFFFu}, b[1] = {7};
    assert_int_equal(ds_tokwriter_put(&w, a, 2, &err), 0);
    assert_int_equal(ds_tokwriter_put(&w, b, 1, &err), 0);
    assert_int_equal(ds_tokwriter_close(&w, &err), 0);
    ds_tokfile tf;
    assert_int_equal(ds_tokfile_open(&tf, p, &err), 0);
    assert_int_equal(tf.count, 3);
    assert_int_equal(ds_tokfile_get(&tf, 1), 0xFFFFFFFFu);
    assert_int_equal(ds_tokfile_get(&tf, 2), 7);
    ds_tokfile_close(&tf);
    /* 2-byte tokens refuse what does not fit; the error names the global index. */
    assert_int_equal(ds_tokwriter_open(&w, p, 2, 0, &err), 0);
    uint32_t c[2] = {1, 65536};
    assert_int_equal(ds_tokwriter_put(&w, b, 1, &err), 0);
    assert_int_equal(ds_tokwriter_put(&w, c, 2, &err), -1);
    assert_non_null(strstr(err.msg, "token 65536 at index 2"));
    ds_tokwriter_abort(&w);
    assert_int_equal(ds_tokwriter_open(&w, p, 3, 0, &err), -1);
    assert_non_null(strstr(err.msg, "token width 3"));
    assert_int_equal(ds_tokwriter_open(&w, p, 2, 70000, &err), -1);
    assert_non_null(strstr(err.msg, "does not fit 2-byte tokens"));
}

/* Writes raw bytes as a file and checks ds_tokfile_open refuses them with msg. */
static void refuse(const char *name, const void *bytes, size_t n, const char *msg) {
    const char *p = scratch_path(name);
    write_bytes(p, bytes, n);
    ds_tokfile tf;
    ds_err err = {{0}};
    assert_int_equal(ds_tokfile_open(&tf, p, &err), -1);
    if (!strstr(err.msg, msg) || !strstr(err.msg, p))
        fail_msg("for %s expected \"%s\" naming the file, got \"%s\"", name, msg, err.msg);
}

static void test_refusals(void **state) {
    (void)state;
    unsigned char f[64] = {0};
    make_header(f, "DSTOKENX", 1, 2, 2, 257, 0);
    refuse("magic.tok", f, 36, "bad magic");
    refuse("short-magic.tok", "DST", 3, "bad magic");
    refuse("empty.tok", "", 0, "empty file");
    make_header(f, "DSTOKENS", 1, 2, 2, 257, 0);
    refuse("short-header.tok", f, 20, "truncated header (20 of 32 bytes)");
    make_header(f, "DSTOKENS", 2, 2, 2, 257, 0);
    refuse("version.tok", f, 36, "unsupported token file version 2");
    make_header(f, "DSTOKENS", 1, 3, 2, 257, 0);
    refuse("width.tok", f, 38, "bad token width 3");
    make_header(f, "DSTOKENS", 1, 2, 2, 257, 9);
    refuse("reserved.tok", f, 36, "reserved header field");
    make_header(f, "DSTOKENS", 1, 2, 2, 70000, 0);
    refuse("vocab.tok", f, 36, "vocab 70000 does not fit 2-byte tokens");
    make_header(f, "DSTOKENS", 1, 2, 3, 257, 0);
    refuse("truncated.tok", f, 37, "truncated: header says 3 tokens (6 bytes), file has 5");
    make_header(f, "DSTOKENS", 1, 4, UINT64_MAX / 2, 257, 0);
    refuse("huge-count.tok", f, 40, "truncated: header says");
    make_header(f, "DSTOKENS", 1, 2, 2, 257, 0);
    refuse("trailing.tok", f, 37, "1 bytes after the last of 2 tokens");
    ds_tokfile tf;
    ds_err err = {{0}};
    assert_int_equal(ds_tokfile_open(&tf, scratch_path("missing.tok"), &err), -1);
    assert_non_null(strstr(err.msg, "No such file"));
    assert_int_equal(ds_tokfile_open(&tf, scratch_dir(), &err), -1);
    assert_non_null(strstr(err.msg, "not a regular file"));
}

static void test_zero_tokens(void **state) {
    (void)state;
    const char *p = scratch_path("zero.tok");
    ds_err err = {{0}};
    assert_int_equal(ds_tokfile_write(p, NULL, 0, 2, 257, &err), 0);
    ds_tokfile tf;
    assert_int_equal(ds_tokfile_open(&tf, p, &err), 0);
    assert_int_equal(tf.count, 0);
    ds_tokfile_close(&tf);
}

static int teardown(void **state) {
    (void)state;
    scratch_cleanup();
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_bytes),     cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_streaming_writer), cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_zero_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, teardown);
}
