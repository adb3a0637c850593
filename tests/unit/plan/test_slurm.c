/* The Slurm allocation as the source of hosts: which source a spec resolves to, the
 * nodes and slots read from the variables Slurm sets (salloc, sbatch, with and without
 * GPUs), Slurm's compressed counts, and the launch method that follows. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "hostfile.h"
#include "launch_method.h"
#include "plan.h"
#include "slurm.h"

static const char *const SLURM_VARS[] = {"SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_NODELIST",
                                         "SLURM_TASKS_PER_NODE", "SLURM_GPUS_ON_NODE", "SLURM_JOB_GPUS",
                                         "SLURM_GPUS_PER_NODE", "SLURMD_NODENAME"};

static int clear_env(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof SLURM_VARS / sizeof SLURM_VARS[0]; i++) unsetenv(SLURM_VARS[i]);
    return 0;
}

static void spec_of(ds_jobspec *spec, const char *text) {
    ds_err err = {""};
    if (ds_jobspec_parse(spec, "/j/job.ini", text, &err) != 0) fail_msg("spec: %s", err.msg);
}

#define MIN "[job]\nname = t\nscript = s.lua\n"

/* The hostlist as "n1:0,1 n2:0,1", or "ERR: message". */
static const char *hosts(const char *spec_text, ds_device *device, char **from) {
    static char out[1200];
    ds_jobspec spec;
    spec_of(&spec, spec_text);
    ds_hostlist hl;
    ds_err err = {""};
    char *f = NULL;
    if (ds_slurm_hosts(&hl, &spec, &f, &err) != 0) {
        snprintf(out, sizeof out, "ERR: %s", err.msg);
        ds_jobspec_free(&spec);
        return out;
    }
    size_t len = 0;
    out[0] = '\0';
    for (int i = 0; i < hl.nhosts; i++) {
        len += (size_t)snprintf(out + len, sizeof out - len, "%s%s:", i ? " " : "", hl.hosts[i].name);
        for (int s = 0; s < hl.hosts[i].nkept; s++)
            len += (size_t)snprintf(out + len, sizeof out - len, "%s%d", s ? "," : "", hl.hosts[i].slots[s]);
    }
    if (device) *device = spec.device;
    if (from) *from = f;
    else free(f);
    ds_hostlist_free(&hl);
    ds_jobspec_free(&spec);
    return out;
}

static void allocation(const char *nodelist, const char *tasks) {
    setenv("SLURM_JOB_ID", "42", 1);
    setenv("SLURM_JOB_NODELIST", nodelist, 1);
    if (tasks) setenv("SLURM_TASKS_PER_NODE", tasks, 1);
}

static void test_counts(void **state) {
    (void)state;
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"2(x3),1", "2 2 2 1"}, {"1(x3)", "1 1 1"}, {"4", "4"}, {"1,2,3", "1 2 3"},
        {"8(x2),4(x1),2", "8 8 4 2"}, {"x", NULL}, {"2(x)", NULL}, {"2(3)", NULL}, {"2(x3", NULL},
        {"", NULL}, {"-1", NULL}, {"2(x0)", NULL}, {"1,,2", NULL}, {"3(x99999999)", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int *v, n;
        ds_err err = {""};
        int rc = ds_slurm_counts_expand(cases[i].in, 1000, &v, &n, &err);
        if (!cases[i].out) {
            if (rc == 0) fail_msg("'%s': expected an error", cases[i].in);
            assert_non_null(strstr(err.msg, cases[i].in));
            continue;
        }
        if (rc != 0) fail_msg("'%s': %s", cases[i].in, err.msg);
        char got[256];
        size_t len = 0;
        for (int k = 0; k < n; k++) len += (size_t)snprintf(got + len, sizeof got - len, "%s%d", k ? " " : "", v[k]);
        assert_string_equal(got, cases[i].out);
        free(v);
    }
}

static void test_source_resolution(void **state) {
    (void)state;
    ds_jobspec spec;
    ds_err err = {""};
    spec_of(&spec, MIN);
    assert_int_equal(ds_hosts_source_resolve(&spec, &err), 0);
    assert_int_equal(spec.host_source, DS_HOSTS_LOCAL); /* no hostfile, no allocation */
    ds_jobspec_free(&spec);

    setenv("SLURM_JOB_ID", "42", 1);
    spec_of(&spec, MIN);
    assert_int_equal(ds_hosts_source_resolve(&spec, &err), 0);
    assert_int_equal(spec.host_source, DS_HOSTS_SLURM); /* inside an allocation */
    ds_jobspec_free(&spec);
    spec_of(&spec, MIN "[resources]\nhostfile = hosts\n");
    assert_int_equal(ds_hosts_source_resolve(&spec, &err), 0);
    assert_int_equal(spec.host_source, DS_HOSTS_HOSTFILE); /* a hostfile wins */
    ds_jobspec_free(&spec);
    spec_of(&spec, MIN "[resources]\nsource = local\n");
    assert_int_equal(ds_hosts_source_resolve(&spec, &err), 0);
    assert_int_equal(spec.host_source, DS_HOSTS_LOCAL); /* asked for */
    ds_jobspec_free(&spec);
    spec_of(&spec, MIN "[resources]\nsource = slurm\nhostfile = hosts\n");
    assert_int_equal(ds_hosts_source_resolve(&spec, &err), -1);
    assert_non_null(strstr(err.msg, "source = slurm, but a hostfile is given too"));
    ds_jobspec_free(&spec);

    unsetenv("SLURM_JOB_ID");
    spec_of(&spec, MIN "[resources]\nsource = slurm\n");
    assert_int_equal(ds_hosts_source_resolve(&spec, &err), -1);
    assert_non_null(strstr(err.msg, "not inside a Slurm allocation (SLURM_JOB_ID is not set)"));
    ds_jobspec_free(&spec);
    spec_of(&spec, MIN "[resources]\nsource = hostfile\n");
    assert_int_equal(ds_hosts_source_resolve(&spec, &err), -1);
    assert_non_null(strstr(err.msg, "no hostfile is given"));
    ds_jobspec_free(&spec);
}

/* salloc -N3 (one task per node), --ntasks-per-node=2, and an uneven -n7 over 3 nodes */
static void test_cpu_slots_from_tasks(void **state) {
    (void)state;
    char *from;
    ds_device dev;
    allocation("n[1-3]", "1(x3)");
    assert_string_equal(hosts(MIN, &dev, &from), "n1:0 n2:0 n3:0");
    assert_int_equal(dev, DS_DEVICE_CPU);
    assert_string_equal(from, "slurm job 42: SLURM_JOB_NODELIST=n[1-3]; CPU slots from SLURM_TASKS_PER_NODE=1(x3)");
    free(from);
    allocation("n[01-02,07]", "3(x2),1");
    assert_string_equal(hosts(MIN, NULL, NULL), "n01:0,1,2 n02:0,1,2 n07:0");
    /* the spec says otherwise */
    assert_string_equal(hosts(MIN "[resources]\nnum_gpus = 2\n", NULL, &from), "n01:0,1 n02:0,1 n07:0,1");
    assert_non_null(strstr(from, "2 CPU slots per node from num_gpus"));
    free(from);
    /* no task count: one slot per node */
    unsetenv("SLURM_TASKS_PER_NODE");
    assert_string_equal(hosts(MIN, NULL, NULL), "n01:0 n02:0 n07:0");
    /* SLURM_NODELIST when SLURM_JOB_NODELIST is missing (older Slurm) */
    unsetenv("SLURM_JOB_NODELIST");
    setenv("SLURM_NODELIST", "gpu-a[1-2]", 1);
    assert_string_equal(hosts(MIN, NULL, NULL), "gpu-a1:0 gpu-a2:0");
}

static void test_gpu_slots(void **state) {
    (void)state;
    char *from;
    ds_device dev;
    allocation("g[1-2]", "1(x2)");
    setenv("SLURM_GPUS_ON_NODE", "4", 1);
    assert_string_equal(hosts(MIN, &dev, &from), "g1:0,1,2,3 g2:0,1,2,3");
    assert_int_equal(dev, DS_DEVICE_CUDA); /* auto: Slurm gave GPUs */
    assert_non_null(strstr(from, "4 GPU slots per node from SLURM_GPUS_ON_NODE=4"));
    free(from);
    /* device = cpu uses the tasks, whatever the GPUs */
    assert_string_equal(hosts(MIN "[resources]\ndevice = cpu\n", &dev, NULL), "g1:0 g2:0");
    assert_int_equal(dev, DS_DEVICE_CPU);
    unsetenv("SLURM_GPUS_ON_NODE");
    setenv("SLURM_JOB_GPUS", "0,1,3", 1);
    assert_string_equal(hosts(MIN, NULL, NULL), "g1:0,1,2 g2:0,1,2");
    unsetenv("SLURM_JOB_GPUS");
    setenv("SLURM_GPUS_PER_NODE", "a100:2", 1);
    assert_string_equal(hosts(MIN, NULL, NULL), "g1:0,1 g2:0,1");
    setenv("SLURM_GPUS_PER_NODE", "two", 1);
    assert_non_null(strstr(hosts(MIN, NULL, NULL), "ERR: SLURM_GPUS_PER_NODE=two: not a GPU count"));
    unsetenv("SLURM_GPUS_PER_NODE");
    assert_non_null(strstr(hosts(MIN "[resources]\ndevice = cuda\n", NULL, NULL),
                           "ERR: [resources] device = cuda, but the Slurm allocation has no GPUs"));
}

static void test_bad_allocations(void **state) {
    (void)state;
    allocation("n[1-", "1");
    assert_non_null(strstr(hosts(MIN, NULL, NULL), "ERR: SLURM_JOB_NODELIST: hostlist 'n[1-': '[1-' has no closing ']'"));
    allocation("n[1-3]", "1");
    assert_non_null(strstr(hosts(MIN, NULL, NULL),
                           "ERR: SLURM_TASKS_PER_NODE=1 gives 1 node, SLURM_JOB_NODELIST 3 (is dslaunch running inside a job step?"));
    allocation("n[1-3]", "1(x3");
    assert_non_null(strstr(hosts(MIN, NULL, NULL), "ERR: SLURM_TASKS_PER_NODE: '1(x3': '1(x3' is not a count"));
    allocation("n1,n1", "1(x2)");
    assert_non_null(strstr(hosts(MIN, NULL, NULL), "ERR: node 'n1' is listed twice"));
    unsetenv("SLURM_JOB_NODELIST");
    assert_non_null(strstr(hosts(MIN, NULL, NULL), "ERR: inside a Slurm allocation, but SLURM_JOB_NODELIST is not set"));
}

static void test_store_addr(void **state) {
    (void)state;
    setenv("SLURMD_NODENAME", "n7", 1);
    assert_string_equal(ds_slurm_store_addr(), "n7");
    unsetenv("SLURMD_NODENAME");
    char me[256] = "";
    gethostname(me, sizeof me - 1);
    assert_string_equal(ds_slurm_store_addr(), me);
}

/* A plan on hosts, then [launch] method resolved against it: the method or "ERR: ...". */
static const char *launch(const char *spec_text, const char *hostfile) {
    static char out[1100];
    ds_jobspec spec;
    spec_of(&spec, spec_text);
    ds_hostlist hl;
    ds_err err = {""};
    if (ds_hosts_source_resolve(&spec, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(ds_hostfile_parse(&hl, "hosts", hostfile, &err), 0);
    ds_plan plan;
    assert_int_equal(ds_plan_build(&plan, &hl, &spec, NULL, 29500, &err), 0);
    if (ds_launch_resolve(&spec, &plan, &err) != 0) snprintf(out, sizeof out, "ERR: %s", err.msg);
    else snprintf(out, sizeof out, "%s%s", ds_launch_name(spec.launch_method), plan.nodes[0].local ? " local" : "");
    ds_plan_free(&plan);
    ds_hostlist_free(&hl);
    ds_jobspec_free(&spec);
    return out;
}

static void test_launch_method(void **state) {
    (void)state;
    assert_string_equal(launch(MIN, "n1 slots=1\n"), "ssh");
    assert_string_equal(launch(MIN "[launch]\nmethod = srun\n", "n1 slots=1\n"),
                        "ERR: [launch] method = srun, but this is not inside a Slurm allocation (SLURM_JOB_ID "
                        "is not set): run dslaunch under salloc or in an sbatch script");
    allocation("n[1-2]", "1(x2)");
    assert_string_equal(launch(MIN, "n1 slots=1\n"), "srun"); /* hosts from the allocation */
    assert_string_equal(launch(MIN "[launch]\nmethod = ssh\n", "n1 slots=1\n"), "ssh");
    assert_string_equal(launch(MIN "[resources]\nsource = local\n", "n1 slots=1\n"), "ssh");
    assert_string_equal(launch(MIN "[launch]\nmethod = local\n", "localhost slots=1\n"), "local local");
    assert_string_equal(launch(MIN "[launch]\nmethod = local\n", "n1 slots=1\n"),
                        "ERR: [launch] method = local, but node 0 (n1) is not this machine");
    setenv("SLURMD_NODENAME", "n1", 1); /* this machine is n1 in the allocation */
    assert_string_equal(launch(MIN "[launch]\nmethod = local\n", "n1 slots=1\n"), "local local");
    assert_string_equal(launch(MIN "[launch]\nmethod = local\n[ssh]\nforce = true\n", "n1 slots=1\n"),
                        "ERR: [launch] method = local and [ssh] force = true contradict each other");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_counts, clear_env),
        cmocka_unit_test_setup(test_source_resolution, clear_env),
        cmocka_unit_test_setup(test_cpu_slots_from_tasks, clear_env),
        cmocka_unit_test_setup(test_gpu_slots, clear_env),
        cmocka_unit_test_setup(test_bad_allocations, clear_env),
        cmocka_unit_test_setup(test_store_addr, clear_env),
        cmocka_unit_test_setup(test_launch_method, clear_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
