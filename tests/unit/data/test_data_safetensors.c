/* safetensors: byte-exact files built here from the format's specification, round trips,
 * files from other writers, and every kind of malformed file refused with its message. */
#include <stdarg.h>
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data_test_util.h"
#include "safetensors.h"

/* 8-byte little-endian length of json, json, then the data bytes. */
static uint8_t *build(const char *json, const void *data, size_t ndata, size_t *len) {
    size_t h = strlen(json);
    uint8_t *b = malloc(8 + h + ndata + 1);
    assert_non_null(b);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(b + 8, json, h);
    if (ndata) memcpy(b + 8 + h, data, ndata);
    *len = 8 + h + ndata;
    return b;
}

static void f32_le(uint8_t *out, const float *v, int n) {
    for (int i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        for (int k = 0; k < 4; k++) out[4 * i + k] = (uint8_t)(u >> (8 * k));
    }
}

static void check_serialized(const ds_st_tensor *ts, size_t n, const ds_st_kv *meta,
                             size_t nmeta, const uint8_t *want, size_t want_len) {
    ds_err err = {{0}};
    size_t len;
    uint8_t *got = ds_st_serialize(ts, n, meta, nmeta, &len, &err);
    if (!got) fail_msg("%s", err.msg);
    if (len != want_len || memcmp(got, want, len) != 0)
        fail_msg("serialized bytes differ: got %zu bytes \"%.*s\"", len,
                 len > 8 ? (int)(len - 8) : 0, (const char *)got + 8);
    ds_st_file *f = ds_st_parse(got, len, "serialized", &err);
    if (!f) fail_msg("%s", err.msg);
    assert_int_equal(ds_st_count(f), n);
    ds_st_close(f);
    free(got);
}

/* One F32 tensor: the header is exactly 64 bytes, so no padding. */
static void test_exact_single(void **state) {
    (void)state;
    float v[6] = {0, 1, 2, 3, 4, 5};
    uint8_t data[24];
    f32_le(data, v, 6);
    ds_st_tensor t = {.name = "attn.0", .dtype = DS_ST_F32, .ndim = 3, .shape = {1, 2, 3},
                      .data = v, .nbytes = 24};
    const char *json = "{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,24]}}";
    assert_int_equal(strlen(json), 64);
    size_t len;
    uint8_t *want = build(json, data, 24, &len);
    check_serialized(&t, 1, NULL, 0, want, len);
    free(want);
    /* A header of 65 bytes is padded with 7 spaces to 72, so the data is 8-aligned. */
    t.name = "attn0";
    t.ndim = 4;
    t.shape[0] = 1, t.shape[1] = 1, t.shape[2] = 2, t.shape[3] = 3;
    json = "{\"attn0\":{\"dtype\":\"F32\",\"shape\":[1,1,2,3],\"data_offsets\":[0,24]}}       ";
    assert_int_equal(strlen(json), 72);
    want = build(json, data, 24, &len);
    check_serialized(&t, 1, NULL, 0, want, len);
    free(want);
}

static void test_exact_empty(void **state) {
    (void)state;
    size_t len;
    uint8_t *want = build("{}      ", NULL, 0, &len);
    check_serialized(NULL, 0, NULL, 0, want, len);
    free(want);
    ds_st_kv kv = {"framework", "pt"};
    want = build("{\"__metadata__\":{\"framework\":\"pt\"}}     ", NULL, 0, &len);
    assert_int_equal(len, 8 + 40);
    check_serialized(NULL, 0, &kv, 1, want, len);
    free(want);
}

/* Mixed dtypes: laid out largest dtype first (F32, I32, BF16, F16), then by name, with
 * __metadata__ first and its keys sorted; names escaped as JSON. */
static void test_exact_mixed(void **state) {
    (void)state;
    float fb[2] = {1.0f, 2.0f};
    int32_t ic = 7;
    uint16_t ha[2] = {0x3c00, 0x4000}, bd[1] = {0x3f80};
    ds_st_tensor ts[5] = {
        {.name = "a", .dtype = DS_ST_F16, .ndim = 2, .shape = {1, 2}, .data = ha, .nbytes = 4},
        {.name = "b", .dtype = DS_ST_F32, .ndim = 1, .shape = {2}, .data = fb, .nbytes = 8},
        {.name = "c", .dtype = DS_ST_I32, .ndim = 0, .data = &ic, .nbytes = 4},
        {.name = "d\"q\\\n", .dtype = DS_ST_BF16, .ndim = 1, .shape = {1}, .data = bd, .nbytes = 2},
        {.name = "e", .dtype = DS_ST_F32, .ndim = 1, .shape = {0}, .data = NULL, .nbytes = 0},
    };
    ds_st_kv meta[2] = {{"z", "last"}, {"format", "pt"}};
    const char *json =
        "{\"__metadata__\":{\"format\":\"pt\",\"z\":\"last\"},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]},"
        "\"c\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[8,12]},"
        "\"d\\\"q\\\\\\n\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[12,14]},"
        "\"a\":{\"dtype\":\"F16\",\"shape\":[1,2],\"data_offsets\":[14,18]}}";
    char padded[512];
    size_t h = strlen(json);
    memcpy(padded, json, h);
    while (h % 8) padded[h++] = ' ';
    padded[h] = '\0';
    const uint8_t data[18] = {0, 0, 0x80, 0x3f, 0, 0, 0, 0x40, /* b */
                              7, 0, 0, 0,                      /* c */
                              0x80, 0x3f,                      /* d */
                              0x00, 0x3c, 0x00, 0x40};         /* a */
    size_t len;
    uint8_t *want = build(padded, data, sizeof data, &len);
    check_serialized(ts, 5, meta, 2, want, len);
    free(want);
}

static void test_round_trip_file(void **state) {
    (void)state;
    enum { N = 1000 };
    static float w[N];
    for (int i = 0; i < N; i++) w[i] = (float)i * 0.5f - 3.0f;
    int32_t idx[3] = {-1, 0, 1 << 30};
    ds_st_tensor ts[3] = {
        {.name = "transformer.wte.weight", .dtype = DS_ST_F32, .ndim = 2, .shape = {100, 10},
         .data = w, .nbytes = sizeof w},
        {.name = "ids", .dtype = DS_ST_I32, .ndim = 1, .shape = {3}, .data = idx, .nbytes = 12},
        {.name = "caf\xc3\xa9", .dtype = DS_ST_U8, .ndim = 1, .shape = {3}, .data = "xyz", .nbytes = 3},
    };
    ds_st_kv meta[1] = {{"format", "pt"}};
    const char *p = scratch_path("rt.safetensors");
    ds_err err = {{0}};
    assert_int_equal(ds_st_write(p, ts, 3, meta, 1, &err), 0);
    ds_st_file *f = ds_st_open(p, &err);
    if (!f) fail_msg("%s", err.msg);
    assert_int_equal(ds_st_count(f), 3);
    assert_string_equal(ds_st_at(f, 0)->name, "caf\xc3\xa9"); /* sorted by name */
    const ds_st_tensor *t = ds_st_find(f, "transformer.wte.weight");
    assert_non_null(t);
    assert_int_equal(t->dtype, DS_ST_F32);
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[0], 100);
    assert_int_equal(t->begin, 0);
    assert_memory_equal(t->data, w, sizeof w);
    assert_int_equal((uintptr_t)t->data % 8, 0); /* aligned in the mapping */
    t = ds_st_find(f, "ids");
    assert_memory_equal(t->data, idx, 12);
    assert_null(ds_st_find(f, "nope"));
    assert_string_equal(ds_st_meta_get(f, "format"), "pt");
    assert_null(ds_st_meta_get(f, "other"));
    ds_st_close(f);
}

/* Files written by other tools: any order, whitespace, escapes, unknown keys (holding any
 * JSON: NULs in strings, integers beyond 64 bits), no padding. */
static void test_foreign_files(void **state) {
    (void)state;
    const char *json =
        "{ \"y\" : {\"data_offsets\" : [ 4 , 8 ], \"extra\": {\"k\": [1, -2.5e3, true, null, \"s\\u0000\","
        " 99999999999999999999, {\"\":{}}]},"
        " \"shape\": [1], \"dtype\": \"I32\"},\n\t\"\\u0078\\ud83d\\ude00\\/\":{\"dtype\":\"F32\",\"shape\":[],"
        "\"data_offsets\":[0,4]}, \"__metadata__\": null }\r\n";
    uint8_t data[8] = {0};
    size_t len;
    uint8_t *b = build(json, data, 8, &len);
    ds_err err = {{0}};
    ds_st_file *f = ds_st_parse(b, len, "foreign", &err);
    if (!f) fail_msg("%s", err.msg);
    assert_int_equal(ds_st_count(f), 2);
    assert_non_null(ds_st_find(f, "x\xf0\x9f\x98\x80/"));
    assert_int_equal(ds_st_find(f, "y")->begin, 4);
    assert_int_equal(ds_st_meta_count(f), 0);
    ds_st_close(f);
    free(b);
}

/* Parses json + ndata zero bytes and expects a refusal whose message contains msg. */
static void refuse_json(const char *json, size_t ndata, const char *msg) {
    static uint8_t zeros[64];
    assert_true(ndata <= sizeof zeros);
    size_t len;
    uint8_t *b = build(json, zeros, ndata, &len);
    ds_err err = {{0}};
    ds_st_file *f = ds_st_parse(b, len, "bad.safetensors", &err);
    free(b);
    if (f) {
        ds_st_close(f);
        fail_msg("accepted %s", json);
    }
    if (!strstr(err.msg, msg) || !strstr(err.msg, "bad.safetensors: not a valid safetensors file"))
        fail_msg("for %s\nexpected \"%s\"\n     got \"%s\"", json, msg, err.msg);
}

#define T1(shape, offs) "{\"t\":{\"dtype\":\"F32\",\"shape\":" shape ",\"data_offsets\":" offs "}}"

static void test_bad_json(void **state) {
    (void)state;
    refuse_json("[]", 0, "header does not start with '{'");
    refuse_json("{", 0, "header length 1 is too short");
    refuse_json("{\"t\" {}}", 0, "header byte 5: expected ':' after a key, found '{'");
    refuse_json("{\"t\":{\"dtype\":\"F32\",}}", 0, "header byte 20: expected a key (a string), found '}'");
    refuse_json("{\"t\":{\"dtype\":\"F32", 0, "unterminated string");
    refuse_json("{\"t\\q\":{}}", 0, "bad escape in string");
    refuse_json("{\"t\\ud800x\":{}}", 0, "high surrogate not followed");
    refuse_json("{\"t\\udc00\":{}}", 0, "lone low surrogate");
    refuse_json("{\"t\\u0000\":{}}", 0, "header byte 3: \\u0000 inside a key");
    refuse_json("{\"__metadata__\":{\"k\":\"a\\u0000\"}}", 0, "header byte 21: \\u0000 inside a string");
    refuse_json("{\"t\":{\"dtype\":\"F\\u000032\",\"shape\":[],\"data_offsets\":[0,4]}}", 4,
                "tensor 't': header byte 14: \\u0000 inside a string");
    refuse_json("{\"t\\u12g4\":{}}", 0, "expected a hex digit");
    refuse_json("{\"a\tb\":{}}", 0, "control character inside a string");
    refuse_json("{\"t\":{}}", 0, "empty tensor entry");
    refuse_json(T1("[2]", "[0,8]") " x", 8, "header byte 55: only whitespace may follow the value, found 'x'");
    refuse_json(T1("[2]", "[0,8]") ",", 8, "only whitespace may follow the value");
    refuse_json("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},}", 8,
                "expected a key (a string), found '}'");
    refuse_json(T1("[-2]", "[0,8]"), 8, "expected a dimension size, found '-'");
    refuse_json(T1("[2.0]", "[0,8]"), 8, "no fraction or exponent");
    refuse_json(T1("[02]", "[0,8]"), 8, "leading zero");
    refuse_json(T1("[99999999999999999999]", "[0,8]"), 8, "integer too large");
    refuse_json(T1("[1,1,1,1,1,1,1,1,1]", "[0,4]"), 4, "more than 8 dimensions");
    refuse_json(T1("[2 1]", "[0,8]"), 8, "header byte 31: expected ',' or ']', found '1'");
    refuse_json(" " T1("[2]", "[0,8]"), 8, "header does not start with '{'");
    refuse_json(T1("[2]", "[0]"), 8, "data_offsets must be an array of two integers [begin, end]");
    refuse_json(T1("[2]", "[0,8,9]"), 8, "data_offsets must be an array of two integers");
    refuse_json(T1("[2]", "\"0,8\""), 8, "data_offsets must be an array of two integers");
    refuse_json("{\"t\":{\"dtype\":\"F128\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
                "tensor 't': header byte 14: unknown dtype \"F128\"");
    refuse_json("{\"t\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, "lacks \"shape\"");
    refuse_json("{\"t\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "lacks \"dtype\"");
    refuse_json("{\"t\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "lacks \"data_offsets\"");
    refuse_json("{\"t\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                8, "key \"dtype\" given twice");
    refuse_json("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                "\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
                "tensor 't' given twice");
    refuse_json("{\"__metadata__\":{\"a\":\"1\",\"a\":\"2\"}}", 0, "__metadata__ key 'a' given twice");
    refuse_json("{\"__metadata__\":{},\"__metadata__\":{}}", 0, "__metadata__ given twice");
    refuse_json("{\"__metadata__\":{\"a\":1}}", 0, "__metadata__ values must be strings");
    refuse_json("{\"__metadata__\":[]}", 0, "__metadata__ must be an object, found an array");
    refuse_json("{\"t\":{\"x\":tru,\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4,
                "expected a JSON value");
    refuse_json("{\"t\":{\"x\":-,\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4,
                "expected a digit, found ','");
    /* Values of the wrong JSON type, and integers out of range, name what was found. */
    refuse_json("{\"t\":[]}", 0, "tensor 't': header byte 5: a tensor entry must be an object, found an array");
    refuse_json("{\"t\":{\"dtype\":32,\"shape\":[],\"data_offsets\":[0,4]}}", 4,
                "\"dtype\" must be a string, found a number");
    refuse_json(T1("{}", "[0,8]"), 8, "\"shape\" must be an array, found an object");
    refuse_json(T1("[\"2\"]", "[0,8]"), 8, "expected a dimension size, found a string");
    refuse_json(T1("[-0]", "[0,0]"), 0, "expected a dimension size, found '-'");
    refuse_json(T1("[2]", "[0,-8]"), 8, "expected the end offset, found '-'");
    refuse_json(T1("[2]", "[0,1e1]"), 8, "expected the end offset, an integer (no fraction");
    refuse_json(T1("[2]", "[0,9223372036854775808]"), 8, "integer too large for the end offset");
    refuse_json(T1("[2]", "[null,8]"), 8, "expected the begin offset, found null");
    refuse_json("{\"__metadata__\":true}", 0, "__metadata__ must be an object, found a boolean");
    refuse_json("{\"__metadata__\":{\"a\":1}}", 0, "header byte 21: __metadata__ values must be strings, "
                "\"a\" is a number");
    /* Numbers a double cannot hold are refused even under unknown keys (the reference
     * skips those unread): the shared JSON reader refuses them everywhere. */
    refuse_json("{\"t\":{\"x\":1e999,\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4,
                "header byte 10: number out of range");
    /* Deep nesting in an unknown key is refused, not recursed into without bound. */
    char deep[400] = "{\"t\":{\"x\":";
    for (int i = 0; i < 100; i++) strcat(deep, "[");
    refuse_json(deep, 0, "JSON nested too deeply");
    /* Invalid UTF-8 in the header. */
    refuse_json("{\"\xff\":{}}", 0, "header byte 2: invalid UTF-8");
}

static void test_bad_layout(void **state) {
    (void)state;
    refuse_json(T1("[2]", "[0,4]"), 4, "data_offsets [0, 4) hold 4 bytes, its F32 shape needs 8");
    refuse_json(T1("[2]", "[8,0]"), 8, "end before they begin");
    refuse_json(T1("[2]", "[0,8]"), 4, "run past the end of the 4-byte buffer");
    refuse_json(T1("[2]", "[0,8]"), 12, "4 bytes after the last tensor");
    refuse_json(T1("[2]", "[4,12]"), 12, "a gap of 4 bytes before tensor 't' at offset 4");
    refuse_json(T1("[4611686018427387904,4]", "[0,8]"), 8, "shape too large");
    refuse_json("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
                "tensor 'b' at [4, 12) overlaps tensor 'a' ending at 8");
    refuse_json("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}", 8,
                "tensor 'z' at [4, 4) overlaps tensor 'a'");
}

static void refuse_bytes(const uint8_t *b, size_t len, const char *msg) {
    ds_err err = {{0}};
    ds_st_file *f = ds_st_parse(b, len, "raw", &err);
    if (f) {
        ds_st_close(f);
        fail_msg("accepted");
    }
    if (!strstr(err.msg, msg)) fail_msg("expected \"%s\", got \"%s\"", msg, err.msg);
}

static void test_bad_lengths(void **state) {
    (void)state;
    uint8_t b[32] = {0};
    refuse_bytes(b, 5, "5 bytes: too short for the 8-byte header length");
    b[0] = 0x00, b[1] = 0xe1, b[2] = 0xf5, b[3] = 0x05; /* 100000000 + 0 */
    b[0] = 0x01;                                        /* 100000001 */
    refuse_bytes(b, 32, "header length 100000001 exceeds the limit");
    memset(b, 0xff, 8);
    refuse_bytes(b, 32, "header length 18446744073709551615 exceeds the limit");
    memset(b, 0, 8);
    b[0] = 30;
    refuse_bytes(b, 32, "header length 30 runs past the end of the file (32 bytes)");
    /* A file truncated in its data: valid header, missing bytes. */
    float v[4] = {1, 2, 3, 4};
    ds_st_tensor t = {.name = "w", .dtype = DS_ST_F32, .ndim = 1, .shape = {4}, .data = v, .nbytes = 16};
    size_t len;
    ds_err err = {{0}};
    uint8_t *full = ds_st_serialize(&t, 1, NULL, 0, &len, &err);
    assert_non_null(full);
    refuse_bytes(full, len - 1, "run past the end of the 15-byte buffer");
    for (size_t cut = 0; cut < len - 16; cut++) { /* every truncation inside the header */
        ds_st_file *f = ds_st_parse(full, cut, "cut", &err);
        assert_null(f);
    }
    free(full);
    /* Files that do not exist or are not files. */
    assert_null(ds_st_open(scratch_path("missing.safetensors"), &err));
    assert_non_null(strstr(err.msg, "cannot open"));
    assert_null(ds_st_open(scratch_dir(), &err));
    assert_non_null(strstr(err.msg, "not a regular file"));
    const char *e = scratch_path("empty.safetensors");
    write_bytes(e, "", 0);
    assert_null(ds_st_open(e, &err));
    assert_non_null(strstr(err.msg, "too short"));
}

static void test_writer_refusals(void **state) {
    (void)state;
    float v[2] = {0};
    ds_st_tensor t[2] = {
        {.name = "a", .dtype = DS_ST_F32, .ndim = 1, .shape = {2}, .data = v, .nbytes = 8},
        {.name = "a", .dtype = DS_ST_F16, .ndim = 1, .shape = {4}, .data = v, .nbytes = 8},
    };
    size_t len;
    ds_err err = {{0}};
    assert_null(ds_st_serialize(t, 2, NULL, 0, &len, &err));
    assert_non_null(strstr(err.msg, "tensor name 'a' given twice"));
    t[1].name = NULL;
    assert_null(ds_st_serialize(t, 2, NULL, 0, &len, &err));
    assert_non_null(strstr(err.msg, "no name"));
    t[1].name = "__metadata__";
    assert_null(ds_st_serialize(t, 2, NULL, 0, &len, &err));
    t[1].name = "b";
    t[1].nbytes = 6;
    assert_null(ds_st_serialize(t, 2, NULL, 0, &len, &err));
    assert_non_null(strstr(err.msg, "6 bytes given, its shape and dtype make 8"));
    t[1].nbytes = 8;
    t[1].name = "bad\xff";
    assert_null(ds_st_serialize(t, 2, NULL, 0, &len, &err));
    assert_non_null(strstr(err.msg, "not valid UTF-8"));
    t[1].name = "b";
    ds_st_kv kv[2] = {{"k", "1"}, {"k", "2"}};
    assert_null(ds_st_serialize(t, 2, kv, 2, &len, &err));
    assert_non_null(strstr(err.msg, "metadata key 'k' given twice"));
    assert_int_equal(ds_st_write(scratch_path("no/such/dir.safetensors"), t, 2, NULL, 0, &err), -1);
    assert_non_null(strstr(err.msg, "cannot create"));
}

static int teardown(void **state) {
    (void)state;
    scratch_cleanup();
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_single),   cmocka_unit_test(test_exact_empty),
        cmocka_unit_test(test_exact_mixed),    cmocka_unit_test(test_round_trip_file),
        cmocka_unit_test(test_foreign_files),  cmocka_unit_test(test_bad_json),
        cmocka_unit_test(test_bad_layout),     cmocka_unit_test(test_bad_lengths),
        cmocka_unit_test(test_writer_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, teardown);
}
