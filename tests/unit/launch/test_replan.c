/* Replanning after nodes are excluded: a spare takes an excluded node's place (its node
 * rank and ranks), a spare too small is passed over, an excluded spare is never used;
 * with no spare the node is dropped only when min_nodes allows, and the ranks are
 * numbered again. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "hostfile.h"
#include "replan.h"

static void plan_with_master(ds_plan *p, const char *hostfile, const char *master) {
    ds_hostlist hl;
    ds_err err = {{0}};
    assert_int_equal(ds_hostfile_parse(&hl, "hosts", hostfile, &err), 0);
    ds_jobspec spec;
    ds_jobspec_init(&spec);
    spec.device = DS_DEVICE_CPU;
    assert_int_equal(ds_plan_build(p, &hl, &spec, master, 29500, &err), 0);
    ds_jobspec_free(&spec);
    ds_hostlist_free(&hl);
}

static void plan_of(ds_plan *p, const char *hostfile) { plan_with_master(p, hostfile, "10.0.0.1"); }

static void spare_takes_the_place(void **state) {
    (void)state;
    ds_plan cur, next;
    plan_of(&cur, "a slots=2\nb slots=2\nc slots=2\ns1 slots=1 spare\ns2 slots=4 spare\n");
    char *excluded[] = {"b"};
    char what[256] = "";
    ds_err err = {{0}};
    assert_int_equal(ds_replan(&next, &cur, excluded, 1, 0, what, sizeof what, &err), 0);
    assert_int_equal(next.nnodes, 3);
    assert_int_equal(next.world_size, 6);
    assert_string_equal(next.nodes[1].host, "s2"); /* s1 has too few slots */
    assert_int_equal(next.nodes[1].nslots, 2);
    assert_int_equal(next.ranks[2].node_rank, 1);
    assert_string_equal(next.master_addr, "10.0.0.1");
    assert_int_equal(next.spares.nhosts, 1);
    assert_string_equal(next.spares.hosts[0].name, "s1");
    assert_non_null(strstr(what, "node b replaced by spare s2"));
    ds_plan_free(&next);
    ds_plan_free(&cur);
}

static void shrink_only_when_allowed(void **state) {
    (void)state;
    ds_plan cur, next;
    plan_of(&cur, "a slots=2\nb slots=2\nc slots=2\ns1 slots=2 spare\n");
    char *excluded[] = {"a", "s1"}; /* the only spare is excluded too */
    char what[256] = "";
    ds_err err = {{0}};
    assert_int_equal(ds_replan(&next, &cur, excluded, 2, 0, what, sizeof what, &err), -1);
    assert_non_null(strstr(err.msg, "min_nodes is not set"));
    assert_int_equal(ds_replan(&next, &cur, excluded, 2, 3, what, sizeof what, &err), -1);
    assert_non_null(strstr(err.msg, "below [restart] min_nodes = 3"));
    what[0] = 0;
    assert_int_equal(ds_replan(&next, &cur, excluded, 2, 2, what, sizeof what, &err), 0);
    assert_int_equal(next.nnodes, 2);
    assert_int_equal(next.world_size, 4);
    assert_string_equal(next.nodes[0].host, "b");
    assert_int_equal(next.nodes[0].node_rank, 0);
    assert_int_equal(next.ranks[3].node_rank, 1);
    assert_int_equal(next.spares.nhosts, 0);
    assert_non_null(strstr(what, "node a dropped (no spare left)"));
    ds_plan_free(&next);
    ds_plan_free(&cur);
}

/* A MASTER_ADDR that was node 0's moves with node 0 (a program's rendezvous runs there);
 * nodes come back under their hostfile names (an ssh config alias is resolved again by
 * the caller). */
static void master_and_aliases(void **state) {
    (void)state;
    ds_plan cur, next;
    plan_with_master(&cur, "a slots=1\nb slots=1\ns slots=1 spare\n", NULL);
    assert_string_equal(cur.master_addr, "a");
    cur.nodes[1].alias = cur.nodes[1].host; /* as ds_plan_apply_ssh_config leaves it */
    cur.nodes[1].host = strdup("10.9.9.9");
    char *excluded[] = {"a"};
    char what[256] = "";
    ds_err err = {{0}};
    assert_int_equal(ds_replan(&next, &cur, excluded, 1, 0, what, sizeof what, &err), 0);
    assert_string_equal(next.nodes[0].host, "s");
    assert_string_equal(next.master_addr, "s");
    assert_string_equal(next.nodes[1].host, "b");
    ds_plan_free(&next);
    ds_plan_free(&cur);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(spare_takes_the_place),
        cmocka_unit_test(shrink_only_when_allowed),
        cmocka_unit_test(master_and_aliases),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
