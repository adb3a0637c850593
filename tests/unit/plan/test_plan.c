/* The plan: ranks in hostfile order after filtering, each rank's environment, spares,
 * local nodes, and the JSON document --dry-run prints (compared as exact strings). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "hostfile.h"
#include "jobspec.h"
#include "engine_opts.h"
#include "plan.h"

static void load(ds_hostlist *hl, const char *text, const char *inc, const char *exc, int nn, int ng) {
    ds_err err = {""};
    if (ds_hostfile_parse(hl, "hosts", text, &err) != 0 ||
        ds_hostlist_filter(hl, inc, exc, nn, ng, &err) != 0) {
        print_error("%s\n", err.msg);
        fail();
    }
}

/* Every engine option's DS_ENGINE_<NAME>=<default>, in the table's order: what each
 * rank's environment holds after the job's own variables (the table is the truth; a new
 * option is in the plan without a change here). */
static int engine_env(char out[][160]) {
    ds_engine_opts d;
    ds_engine_opts_init(&d);
    for (int i = 0; i < DS_EO_COUNT; i++) {
        char name[64], value[64];
        ds_engine_opt_env_name(&DS_ENGINE_OPTS[i], name, sizeof name);
        ds_engine_opt_format(&DS_ENGINE_OPTS[i], &d, value, sizeof value);
        snprintf(out[i], 160, "%s=%s", name, value);
    }
    return DS_EO_COUNT;
}

/* The same as JSON members: "DS_ENGINE_ZERO":"0",... */
static void engine_json(char *out, size_t len) {
    char env[DS_EO_COUNT][160];
    engine_env(env);
    size_t n = 0;
    for (int i = 0; i < DS_EO_COUNT; i++) {
        char *eq = strchr(env[i], '=');
        n += (size_t)snprintf(out + n, len - n, "%s\"%.*s\":\"%s\"", i ? "," : "", (int)(eq - env[i]),
                              env[i], eq + 1);
    }
}

static void spec_of(ds_jobspec *s, const char *text) {
    ds_err err = {""};
    if (ds_jobspec_parse(s, "/j/job.ini", text, &err) != 0) {
        print_error("%s\n", err.msg);
        fail();
    }
}

static void test_ranks(void **st) {
    (void)st;
    ds_hostlist hl;
    ds_jobspec spec;
    ds_plan p;
    ds_err err;
    load(&hl, "a slots=4\nb slots=2\nc slots=4\n", NULL, "a:1@c", -1, -1);
    spec_of(&spec, "[job]\nname=t\nscript=s\n");
    assert_int_equal(ds_plan_build(&p, &hl, &spec, NULL, 29500, &err), 0);
    assert_int_equal(p.world_size, 5);
    assert_int_equal(p.nnodes, 2);
    assert_string_equal(p.master_addr, "a");
    assert_int_equal(p.master_port, 29500);
    assert_int_equal(p.gpus, 0);
    assert_string_equal(p.nodes[0].host, "a");
    assert_int_equal(p.nodes[0].nslots, 3);
    assert_int_equal(p.nodes[0].first_rank, 0);
    assert_int_equal(p.nodes[1].node_rank, 1);
    assert_int_equal(p.nodes[1].first_rank, 3);
    int want[5][4] = {{0, 0, 0, 0}, {1, 0, 1, 2}, {2, 0, 2, 3}, {3, 1, 0, 0}, {4, 1, 1, 1}};
    for (int r = 0; r < 5; r++) {
        assert_int_equal(p.ranks[r].rank, want[r][0]);
        assert_int_equal(p.ranks[r].node_rank, want[r][1]);
        assert_int_equal(p.ranks[r].local_rank, want[r][2]);
        assert_int_equal(p.ranks[r].slot, want[r][3]);
    }
    assert_int_equal(p.spares.nhosts, 0);
    ds_plan_free(&p);
    assert_int_equal(ds_plan_build(&p, &hl, &spec, "10.1.1.1", 1234, &err), 0);
    assert_string_equal(p.master_addr, "10.1.1.1");
    assert_int_equal(p.master_port, 1234);
    ds_plan_free(&p);
    assert_int_equal(ds_plan_build(&p, &hl, &spec, NULL, 65536, &err), -1);
    assert_int_equal(ds_plan_build(&p, &hl, &spec, NULL, -1, &err), -1);
    /* 0: a free port, chosen on node 0 when the job starts */
    assert_int_equal(ds_plan_build(&p, &hl, &spec, NULL, 0, &err), 0);
    char **env = ds_plan_rank_env(&p, &spec, 0, "j", 0);
    assert_string_equal(env[6], "MASTER_PORT=auto");
    ds_plan_env_free(env);
    ds_plan_free(&p);
    ds_hostlist_free(&hl);
    ds_jobspec_free(&spec);
}

static void test_env(void **st) {
    (void)st;
    ds_hostlist hl;
    ds_jobspec spec;
    ds_plan p;
    ds_err err;
    load(&hl, "a slots=2\nb slots=4\n", "a@b:1,3", NULL, -1, -1);
    spec_of(&spec, "[job]\nname=t\nscript=s.lua\n[resources]\ndevice=cuda\n[env]\nNCCL_DEBUG=INFO\nX=\n");
    assert_int_equal(ds_plan_build(&p, &hl, &spec, NULL, 29500, &err), 0);
    assert_int_equal(p.gpus, 1);
    char **env = ds_plan_rank_env(&p, &spec, 3, "job-7", 2);
    const char *job[] = {"RANK=3", "WORLD_SIZE=4", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2",
                         "NODE_RANK=1", "MASTER_ADDR=a", "MASTER_PORT=29500", "DS_JOB_ID=job-7",
                         "DS_ATTEMPT=2", "GROUP_RANK=1", "GROUP_WORLD_SIZE=2", "ROLE_RANK=3",
                         "ROLE_WORLD_SIZE=4", "ROLE_NAME=default", "TORCHELASTIC_RESTART_COUNT=2",
                         "TORCHELASTIC_MAX_RESTARTS=0", "TORCHELASTIC_RUN_ID=job-7",
                         "CUDA_VISIBLE_DEVICES=3"};
    char eng[DS_EO_COUNT][160];
    int ne = engine_env(eng), k = 0;
    for (int i = 0; i < 18; i++) assert_string_equal(env[k++], job[i]);
    assert_string_equal(env[k], "DS_ENGINE_ZERO=0");
    for (int i = 0; i < ne; i++) assert_string_equal(env[k++], eng[i]);
    assert_string_equal(env[k++], "NCCL_DEBUG=INFO");
    assert_string_equal(env[k++], "X=");
    assert_null(env[k]);
    ds_plan_env_free(env);
    assert_null(ds_plan_rank_env(&p, &spec, 4, "j", 0));
    assert_null(ds_plan_rank_env(&p, &spec, -1, "j", 0));
    ds_plan_free(&p);
    ds_jobspec_free(&spec);
    /* a program that is not Lua sees its node's slots and takes device LOCAL_RANK */
    spec_of(&spec, "[job]\nname=t\nscript=train.py\n[resources]\ndevice=cuda\n");
    assert_int_equal(ds_plan_build(&p, &hl, &spec, NULL, 29500, &err), 0);
    env = ds_plan_rank_env(&p, &spec, 3, "j", 0);
    assert_string_equal(env[17], "CUDA_VISIBLE_DEVICES=1,3");
    ds_plan_env_free(env);
    env = ds_plan_rank_env(&p, &spec, 0, "j", 0);
    assert_string_equal(env[17], "CUDA_VISIBLE_DEVICES=0,1");
    ds_plan_env_free(env);
    ds_plan_free(&p);
    ds_jobspec_free(&spec);
    /* CPU slots: no CUDA_VISIBLE_DEVICES */
    spec_of(&spec, "[job]\nname=t\nscript=s\n[resources]\ndevice=cpu\n");
    assert_int_equal(ds_plan_build(&p, &hl, &spec, NULL, 29500, &err), 0);
    env = ds_plan_rank_env(&p, &spec, 0, "j", 0);
    for (char **e = env; *e; e++) assert_null(strstr(*e, "CUDA_VISIBLE_DEVICES"));
    assert_string_equal(env[8], "DS_ATTEMPT=0");
    assert_string_equal(env[17], "DS_ENGINE_ZERO=0");
    assert_null(env[17 + DS_EO_COUNT]);
    ds_plan_env_free(env);
    ds_plan_free(&p);
    ds_jobspec_free(&spec);
    ds_hostlist_free(&hl);
}

static void test_spares(void **st) {
    (void)st;
    ds_hostlist hl;
    ds_jobspec spec;
    ds_plan p;
    ds_err err;
    load(&hl, "a slots=1\nx slots=1 spare\nb slots=1\nc slots=1\n", NULL, NULL, -1, -1);
    spec_of(&spec, "[job]\nname=t\nscript=s\n[restart]\nspares=1\n");
    assert_int_equal(ds_plan_build(&p, &hl, &spec, NULL, 29500, &err), 0);
    assert_int_equal(p.world_size, 2);
    assert_string_equal(p.nodes[1].host, "b");
    assert_int_equal(p.spares.nhosts, 2);
    assert_string_equal(p.spares.hosts[0].name, "x");
    assert_string_equal(p.spares.hosts[1].name, "c");
    assert_int_equal(p.spares.hosts[1].nkept, 1);
    ds_plan_free(&p);
    ds_jobspec_free(&spec);
    spec_of(&spec, "[job]\nname=t\nscript=s\n[restart]\nspares=3\n");
    assert_int_equal(ds_plan_build(&p, &hl, &spec, NULL, 29500, &err), -1);
    assert_non_null(strstr(err.msg, "spares = 3 leaves no node to run on (3 nodes after filtering)"));
    ds_jobspec_free(&spec);
    ds_hostlist_free(&hl);
}

static void test_local_nodes(void **st) {
    (void)st;
    char me[256], text[600];
    assert_int_equal(gethostname(me, sizeof me), 0);
    snprintf(text, sizeof text,
             "localhost slots=1\n127.0.0.1 slots=1\n::1 slots=1\n%s slots=1\n127.0.0.2 slots=1\n"
             "other.example slots=1\n", me);
    ds_hostlist hl;
    ds_plan p;
    ds_err err;
    load(&hl, text, NULL, NULL, -1, -1);
    assert_int_equal(ds_plan_build(&p, &hl, NULL, "10.9.9.9", 29500, &err), 0);
    int want[] = {1, 1, 1, 1, 0, 0};
    for (int i = 0; i < 6; i++) assert_int_equal(p.nodes[i].local, want[i]);
    ds_plan_free(&p);
    /* MASTER_ADDR would be localhost, which other.example cannot reach: refused */
    assert_int_equal(ds_plan_build(&p, &hl, NULL, NULL, 29500, &err), 0);
    assert_int_equal(ds_plan_check_master_addr(&p, &err), -1);
    assert_non_null(strstr(err.msg, "MASTER_ADDR would be 'localhost', a loopback address that "
                                    "node 5 (other.example) cannot reach"));
    assert_non_null(strstr(err.msg, "or give --master_addr"));
    ds_plan_free(&p);
    assert_int_equal(ds_plan_build(&p, &hl, NULL, "::1", 29500, &err), 0);
    assert_int_equal(ds_plan_check_master_addr(&p, &err), -1);
    ds_plan_free(&p);
    ds_hostlist_free(&hl);
    /* every node on this machine (loopback nodes too): fine */
    load(&hl, "localhost slots=1\n127.0.0.2 slots=1\n", NULL, NULL, -1, -1);
    assert_int_equal(ds_plan_build(&p, &hl, NULL, NULL, 29500, &err), 0);
    assert_int_equal(ds_plan_check_master_addr(&p, &err), 0);
    ds_plan_free(&p);
    ds_hostlist_free(&hl);
}

static void test_json_exact(void **st) {
    (void)st;
    ds_hostlist hl;
    ds_plan p;
    ds_err err;
    load(&hl, "n1 slots=2\nn2 slots=2\nsp slots=1 spare\n", NULL, "n1:0", -1, -1);
    assert_int_equal(ds_plan_build(&p, &hl, NULL, NULL, 29500, &err), 0);
    char *js = ds_plan_json(&p, NULL, NULL, 0, 0);
    assert_string_equal(js,
        "{\"world_size\":3,\"master_addr\":\"n1\",\"master_port\":29500,\"gpus\":false,"
        "\"nodes\":[{\"host\":\"n1\",\"node_rank\":0,\"slots\":[1],\"first_rank\":0,\"local\":false},"
        "{\"host\":\"n2\",\"node_rank\":1,\"slots\":[0,1],\"first_rank\":1,\"local\":false}],"
        "\"ranks\":[{\"rank\":0,\"host\":\"n1\",\"node_rank\":0,\"local_rank\":0,\"slot\":1},"
        "{\"rank\":1,\"host\":\"n2\",\"node_rank\":1,\"local_rank\":0,\"slot\":0},"
        "{\"rank\":2,\"host\":\"n2\",\"node_rank\":1,\"local_rank\":1,\"slot\":1}],"
        "\"spares\":[{\"host\":\"sp\",\"slots\":[0]}]}\n");
    free(js);
    /* pretty form: same document, indented */
    js = ds_plan_json(&p, NULL, NULL, 0, 1);
    assert_non_null(strstr(js, "{\n  \"world_size\": 3,\n  \"master_addr\": \"n1\",\n"));
    assert_non_null(strstr(js, "      \"slots\": [\n        1\n      ],\n"));
    free(js);
    ds_plan_free(&p);
    ds_hostlist_free(&hl);
}

static void test_json_with_spec(void **st) {
    (void)st;
    ds_hostlist hl;
    ds_jobspec spec;
    ds_plan p;
    ds_err err;
    load(&hl, "h slots=1\n", NULL, NULL, -1, -1);
    spec_of(&spec, "[job]\nname=t\nscript=s.lua\nargs=a \"b c\"\ndsrun=/x/dsrun\n"
                   "[resources]\ndevice=cuda\n[env]\nQ=say \"hi\"\\n\n");
    assert_int_equal(ds_plan_build(&p, &hl, &spec, NULL, 29500, &err), 0);
    char *js = ds_plan_json(&p, &spec, "t-1", 3, 0);
    char eng[2048], want[4096];
    engine_json(eng, sizeof eng);
    snprintf(want, sizeof want,
        "{\"job\":{\"name\":\"t\",\"id\":\"t-1\",\"attempt\":3,\"spec\":\"/j/job.ini\","
        "\"script\":\"s.lua\",\"args\":[\"a\",\"b c\"],\"workdir\":\"/j\",\"dsrun\":\"/x/dsrun\","
        "\"device\":\"cuda\",\"log_dir\":\"logs\",\"tee\":\"all\",\"launch\":\"auto\"},"
        "\"world_size\":1,\"master_addr\":\"h\",\"master_port\":29500,\"gpus\":true,"
        "\"nodes\":[{\"host\":\"h\",\"node_rank\":0,\"slots\":[0],\"first_rank\":0,\"local\":false}],"
        "\"ranks\":[{\"rank\":0,\"host\":\"h\",\"node_rank\":0,\"local_rank\":0,\"slot\":0,"
        "\"env\":{\"RANK\":\"0\",\"WORLD_SIZE\":\"1\",\"LOCAL_RANK\":\"0\",\"LOCAL_WORLD_SIZE\":\"1\","
        "\"NODE_RANK\":\"0\",\"MASTER_ADDR\":\"h\",\"MASTER_PORT\":\"29500\",\"DS_JOB_ID\":\"t-1\","
        "\"DS_ATTEMPT\":\"3\",\"GROUP_RANK\":\"0\",\"GROUP_WORLD_SIZE\":\"1\",\"ROLE_RANK\":\"0\","
        "\"ROLE_WORLD_SIZE\":\"1\",\"ROLE_NAME\":\"default\",\"TORCHELASTIC_RESTART_COUNT\":\"3\","
        "\"TORCHELASTIC_MAX_RESTARTS\":\"0\",\"TORCHELASTIC_RUN_ID\":\"t-1\","
        "\"CUDA_VISIBLE_DEVICES\":\"0\",%s,\"Q\":\"say \\\"hi\\\"\\\\n\"}}],"
        "\"spares\":[]}\n", eng);
    assert_non_null(strstr(eng, "\"DS_ENGINE_ZERO\":\"0\""));
    assert_string_equal(js, want);
    free(js);
    /* the FILE writer prints the same bytes */
    char *mem = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&mem, &len);
    ds_plan_write_json_spec(&p, &spec, "t-1", 3, 1, f);
    fclose(f);
    js = ds_plan_json(&p, &spec, "t-1", 3, 1);
    assert_string_equal(mem, js);
    free(js);
    free(mem);
    ds_plan_free(&p);
    ds_jobspec_free(&spec);
    ds_hostlist_free(&hl);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ranks),
        cmocka_unit_test(test_env),
        cmocka_unit_test(test_spares),
        cmocka_unit_test(test_local_nodes),
        cmocka_unit_test(test_json_exact),
        cmocka_unit_test(test_json_with_spec),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
