/* Slurm hostlist expressions: the examples of Slurm's own documentation and the edge
 * cases found by asking Slurm, each with its expansion; then every one of them again
 * against `scontrol show hostnames` (Slurm 22.05) as the oracle, so this parser and
 * Slurm agree on what they both accept and on what they both refuse. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "slurm_hostlist.h"

typedef struct hl_case {
    const char *expr;
    const char *names; /* space-separated; NULL: an error whose message contains why */
    const char *why;
} hl_case;

static const hl_case CASES[] = {
    /* Slurm's documentation (sbatch/srun --nodelist, scontrol, the hostlist docs) */
    {"lx[10-20]", "lx10 lx11 lx12 lx13 lx14 lx15 lx16 lx17 lx18 lx19 lx20", NULL},
    {"lx[15,18,32-33]", "lx15 lx18 lx32 lx33", NULL},
    {"tux[1,3-5]", "tux1 tux3 tux4 tux5", NULL},
    {"linux[00-07]", "linux00 linux01 linux02 linux03 linux04 linux05 linux06 linux07", NULL},
    {"rack[0-1]_blade[0-2]", "rack0_blade0 rack0_blade1 rack0_blade2 rack1_blade0 rack1_blade1 rack1_blade2", NULL},
    {"n[01-04,07],gpu-a[1-2]", "n01 n02 n03 n04 n07 gpu-a1 gpu-a2", NULL},
    /* zero padding: the width of the range's first number as written */
    {"n[009-011]", "n009 n010 n011", NULL},
    {"n[098-101]", "n098 n099 n100 n101", NULL},
    {"n[01-3]", "n01 n02 n03", NULL},
    {"n[1-03]", "n1 n2 n3", NULL},
    {"n[9-11]", "n9 n10 n11", NULL},
    {"n[99999999-100000001]", "n99999999 n100000000 n100000001", NULL},
    /* lists, separators, order and duplicates */
    {"node1,node2", "node1 node2", NULL},
    {"n1 n2", "n1 n2", NULL},
    {"a\tb", "a b", NULL},
    {"n[1-2] ,n3", "n1 n2 n3", NULL},
    {"a,,b", "a b", NULL},
    {",n1", "n1", NULL},
    {"n[1-2],", "n1 n2", NULL},
    {"n[4,1-2]", "n4 n1 n2", NULL},
    {"n[1-2],n[1-2]", "n1 n2 n1 n2", NULL},
    {"n[3]", "n3", NULL},
    {"n[0-0]", "n0", NULL},
    {"[1-2]", "1 2", NULL},
    {"n-[1-2]", "n-1 n-2", NULL},
    {"host.example.com", "host.example.com", NULL},
    /* several brackets: every combination, the first varying slowest */
    {"a[1-2]b[3-4]", "a1b3 a1b4 a2b3 a2b4", NULL},
    {"a[1-2]-[3-4]", "a1-3 a1-4 a2-3 a2-4", NULL},
    {"n[1-2][3-4]", "n13 n14 n23 n24", NULL},
    /* refused by both */
    {"n[2-1]", NULL, "runs backwards"},
    {"n[a-b]", NULL, "is not a range"},
    {"n[1-10:2]", NULL, "is not a range"},
    {"n[]", NULL, "is not a range"},
    {"n[,1]", NULL, "is not a range"},
    {"n[1,,2]", NULL, "is not a range"},
    {"n[-1]", NULL, "is not a range"},
    {"n[1-2-3]", NULL, "is not a range"},
    {"n[1-2]]", NULL, "']' without '['"},
    {"n[8-10]x", NULL, "text after the last ']'"},
    {"n[1-3,5]-ib", NULL, "text after the last ']'"},
    {"h[1-2].example.com", NULL, "text after the last ']'"},
    {"a[1-2,4-5]b", NULL, "text after the last ']'"},
};

/* Where Slurm reads malformed input as some names anyway, this parser refuses. */
static const hl_case STRICTER[] = {
    {"n[1-", NULL, "no closing ']'"},     /* Slurm: "n]" */
    {"n[[1-2]", NULL, "'[' inside brackets"}, /* Slurm: "n[1 n[2" */
    {"n]1", NULL, "']' without '['"},      /* Slurm: the name "n]1" */
    {"n[ 1-2]", NULL, "is not a range"},    /* Slurm: "n01 n02" */
    {"", NULL, "no host names"},
    {" , ", NULL, "no host names"},
    {"n@1", NULL, "not allowed in a host name"},
    {"n[1-200000]", NULL, "too many hosts"},
    {"n[1-1000]m[1-1000]", NULL, "too many hosts"},
};

static char *joined(char **names, int n) {
    static char buf[4096];
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && len < sizeof buf - 1; i++)
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s", i ? " " : "", names[i]);
    return buf;
}

static void check_case(const hl_case *c) {
    char **names;
    int n;
    ds_err err = {""};
    int rc = ds_slurm_hostlist_expand(c->expr, 100000, &names, &n, &err);
    if (c->names) {
        if (rc != 0) fail_msg("'%s': unexpected error: %s", c->expr, err.msg);
        assert_string_equal(joined(names, n), c->names);
        ds_slurm_names_free(names, n);
    } else {
        if (rc == 0) fail_msg("'%s': expected an error (%s), got '%s'", c->expr, c->why, joined(names, n));
        if (!strstr(err.msg, c->why)) fail_msg("'%s': error '%s' does not say '%s'", c->expr, err.msg, c->why);
        if (!strstr(err.msg, c->expr)) fail_msg("'%s': error '%s' does not quote the expression", c->expr, err.msg);
    }
}

static void test_cases(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) check_case(&CASES[i]);
}

static void test_stricter_than_slurm(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof STRICTER / sizeof STRICTER[0]; i++) check_case(&STRICTER[i]);
}

static void test_limit_is_exact(void **state) {
    (void)state;
    char **names;
    int n;
    ds_err err = {""};
    assert_int_equal(ds_slurm_hostlist_expand("n[1-4]", 4, &names, &n, &err), 0);
    assert_int_equal(n, 4);
    ds_slurm_names_free(names, n);
    assert_int_equal(ds_slurm_hostlist_expand("n[1-4],m", 4, &names, &n, &err), -1);
    assert_non_null(strstr(err.msg, "more than 4 hosts"));
    /* a name of 255 characters is a host name; 256 is not */
    char longname[300];
    memset(longname, 'x', 254);
    strcpy(longname + 254, "[1-1]");
    assert_int_equal(ds_slurm_hostlist_expand(longname, 10, &names, &n, &err), 0);
    assert_int_equal((int)strlen(names[0]), 255);
    ds_slurm_names_free(names, n);
    strcpy(longname + 254, "[10-10]");
    assert_int_equal(ds_slurm_hostlist_expand(longname, 10, &names, &n, &err), -1);
    assert_non_null(strstr(err.msg, "longer than 255"));
}

/* ---- Slurm itself as the oracle ---- */

static char conf_dir[] = "/tmp/ds-hostlist-oracle-XXXXXX";

/* What `scontrol show hostnames EXPR` prints, names joined by spaces, or NULL when Slurm
 * says the list is invalid (scontrol exits 0 either way). */
static char *slurm_expand(const char *expr) {
    static char out[8192];
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "SLURM_CONF=%s/slurm.conf scontrol show hostnames '%s' 2>&1", conf_dir, expr);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t len = 0;
    char line[512];
    int invalid = 0;
    out[0] = '\0';
    while (fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = '\0';
        if (strstr(line, "Invalid hostlist") || strstr(line, "error:")) invalid = 1;
        else len += (size_t)snprintf(out + len, sizeof out - len, "%s%s", len ? " " : "", line);
    }
    int st = pclose(p);
    if (st != 0) fail_msg("scontrol failed (status %d) on '%s': %s", st, expr, out);
    return invalid ? NULL : out;
}

static void test_slurm_agrees(void **state) {
    (void)state;
    if (system("command -v scontrol >/dev/null 2>&1") != 0)
        fail_msg("scontrol is missing: scripts/install-deps.sh installs Slurm's client");
    assert_non_null(mkdtemp(conf_dir));
    char path[256];
    snprintf(path, sizeof path, "%s/slurm.conf", conf_dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("ClusterName=oracle\nSlurmctldHost=localhost\n", f); /* enough to parse a hostlist */
    fclose(f);
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const hl_case *c = &CASES[i];
        char *got = slurm_expand(c->expr);
        if (c->names && !got) fail_msg("'%s': Slurm refuses what this parser expands", c->expr);
        if (!c->names && got) fail_msg("'%s': Slurm expands it to '%s', this parser refuses", c->expr, got);
        if (c->names) assert_string_equal(got, c->names);
    }
    unlink(path);
    rmdir(conf_dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_stricter_than_slurm),
        cmocka_unit_test(test_limit_is_exact),
        cmocka_unit_test(test_slurm_agrees),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
