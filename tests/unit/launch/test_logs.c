/* The log demultiplexer: files get the exact bytes; the terminal gets whole lines, tagged,
 * filtered by tee, never split or merged; the stderr tail keeps the last lines. The
 * terminal is captured by pointing fd 1 and 2 at files for the duration of a test. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "logs.h"

typedef struct fixture {
    char dir[64];
    ds_plan_node node;
    ds_plan_rank ranks[2];
    ds_plan plan;
    int saved[3], cap[3]; /* fd 1 and 2 captured */
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    strcpy(f->dir, "/tmp/ds-test-logs.XXXXXX");
    if (!mkdtemp(f->dir)) return -1;
    f->node = (ds_plan_node){.host = "h", .nslots = 2};
    for (int r = 0; r < 2; r++) f->ranks[r] = (ds_plan_rank){.rank = r, .local_rank = r, .slot = r};
    f->plan = (ds_plan){.world_size = 2, .nodes = &f->node, .nnodes = 1, .ranks = f->ranks};
    for (int k = 1; k <= 2; k++) {
        char path[128];
        snprintf(path, sizeof path, "%s/term%d", f->dir, k);
        fflush(k == 1 ? stdout : stderr);
        f->saved[k] = dup(k);
        f->cap[k] = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
        dup2(f->cap[k], k);
    }
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    for (int k = 1; k <= 2; k++) {
        dup2(f->saved[k], k);
        close(f->saved[k]);
        close(f->cap[k]);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
    if (system(cmd) != 0) return -1;
    free(f);
    return 0;
}

/* Reads a file whole (NUL-terminated; *len without it). */
static char *slurp(const char *dir, const char *name, size_t *len) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    rewind(fp);
    char *buf = malloc((size_t)n + 1);
    assert_int_equal(fread(buf, 1, (size_t)n, fp), (size_t)n);
    buf[n] = 0;
    fclose(fp);
    if (len) *len = (size_t)n;
    return buf;
}

static void lines_are_whole_tagged_and_files_exact(void **state) {
    fixture *f = *state;
    ds_err err;
    ds_logs *l = ds_logs_open(f->dir, &f->plan, "all", 0700, &err);
    assert_non_null(l);
    /* Chunks cut mid-line and interleaved between ranks and streams. */
    ds_logs_write(l, 0, 1, "hel", 3);
    ds_logs_write(l, 1, 1, "other ", 6);
    ds_logs_write(l, 0, 1, "lo\nwor", 6);
    ds_logs_write(l, 0, 2, "oops\n", 5);
    ds_logs_write(l, 1, 1, "rank\n", 5);
    ds_logs_write(l, 0, 1, "ld\n\nbin \0\377 x\npartial", 20);
    ds_logs_end_rank(l, 0);
    ds_logs_end_rank(l, 1);
    ds_logs_close(l);
    size_t n;
    char *out0 = slurp(f->dir, "rank-0.out", &n);
    assert_int_equal(n, 3 + 6 + 20);
    assert_memory_equal(out0, "hello\nworld\n\nbin \0\377 x\npartial", n);
    char *err0 = slurp(f->dir, "rank-0.err", NULL);
    assert_string_equal(err0, "oops\n");
    char *term = slurp(f->dir, "term1", &n);
    /* in the order lines complete; rank 1's sits between two of rank 0's */
    const char want[] = "[h:0] hello\n[h:1] other rank\n[h:0] world\n[h:0] \n[h:0] bin \0\377 x\n[h:0] partial\n";
    assert_int_equal(n, sizeof want - 1);
    assert_memory_equal(term, want, n);
    char *term2 = slurp(f->dir, "term2", NULL);
    assert_string_equal(term2, "[h:0] oops\n");
    free(out0);
    free(err0);
    free(term);
    free(term2);
}

static void tee_filters_the_terminal_not_the_files(void **state) {
    fixture *f = *state;
    ds_err err;
    ds_logs *l = ds_logs_open(f->dir, &f->plan, "1", 0700, &err);
    assert_non_null(l);
    ds_logs_write(l, 0, 1, "zero\n", 5);
    ds_logs_write(l, 1, 1, "one\n", 4);
    ds_logs_close(l);
    char *term = slurp(f->dir, "term1", NULL), *out0 = slurp(f->dir, "rank-0.out", NULL);
    assert_string_equal(term, "[h:1] one\n");
    assert_string_equal(out0, "zero\n");
    free(term);
    free(out0);
}

static void long_lines_come_in_pieces_with_every_byte(void **state) {
    fixture *f = *state;
    ds_err err;
    ds_logs *l = ds_logs_open(f->dir, &f->plan, "all", 0700, &err);
    size_t big = DS_LOG_LINE_MAX + 1000;
    char *line = malloc(big + 1);
    memset(line, 'x', big);
    line[big] = '\n';
    for (size_t off = 0; off < big + 1; off += 4096)
        ds_logs_write(l, 0, 1, line + off, big + 1 - off < 4096 ? big + 1 - off : 4096);
    ds_logs_close(l);
    size_t n;
    char *term = slurp(f->dir, "term1", &n);
    /* two pieces, each tagged, all the x's there */
    assert_int_equal(n, big + 2 * (strlen("[h:0] ") + 1));
    assert_memory_equal(term, "[h:0] xxx", 9);
    assert_int_equal(term[strlen("[h:0] ") + DS_LOG_LINE_MAX], '\n');
    free(term);
    free(line);
}

static void tail_keeps_the_last_stderr_lines(void **state) {
    fixture *f = *state;
    ds_err err;
    ds_logs *l = ds_logs_open(f->dir, &f->plan, "none", 0700, &err);
    for (int i = 0; i < DS_LOG_TAIL_LINES + 3; i++) {
        char s[32];
        int n = snprintf(s, sizeof s, "line %d\n", i);
        ds_logs_write(l, 1, 2, s, (size_t)n);
    }
    ds_logs_write(l, 1, 2, "last, no newline", 16);
    ds_logs_end_rank(l, 1);
    const char *lines[DS_LOG_TAIL_LINES];
    assert_int_equal(ds_logs_tail(l, 1, lines), DS_LOG_TAIL_LINES);
    assert_string_equal(lines[0], "line 4");
    assert_string_equal(lines[DS_LOG_TAIL_LINES - 1], "last, no newline");
    assert_int_equal(ds_logs_tail(l, 0, lines), 0);
    ds_logs_close(l);
    char *term = slurp(f->dir, "term2", NULL);
    assert_string_equal(term, ""); /* tee = none */
    free(term);
}

static void tee_filter_parsing(void **state) {
    (void)state;
    unsigned char show[5];
    ds_err err;
    assert_int_equal(ds_logs_parse_tee("0,2-3", 5, show, &err), 0);
    assert_memory_equal(show, "\1\0\1\1\0", 5);
    assert_int_equal(ds_logs_parse_tee("none", 5, show, &err), 0);
    assert_memory_equal(show, "\0\0\0\0\0", 5);
    assert_int_equal(ds_logs_parse_tee(NULL, 5, show, &err), 0);
    assert_memory_equal(show, "\1\1\1\1\1", 5);
    assert_int_equal(ds_logs_parse_tee("3-1", 5, show, &err), -1);
    assert_int_equal(ds_logs_parse_tee("x", 5, show, &err), -1);
    assert_non_null(strstr(err.msg, "expected all, none or ranks"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(lines_are_whole_tagged_and_files_exact, setup, teardown),
        cmocka_unit_test_setup_teardown(tee_filters_the_terminal_not_the_files, setup, teardown),
        cmocka_unit_test_setup_teardown(long_lines_come_in_pieces_with_every_byte, setup, teardown),
        cmocka_unit_test_setup_teardown(tail_keeps_the_last_stderr_lines, setup, teardown),
        cmocka_unit_test(tee_filter_parsing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
