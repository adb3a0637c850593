/* ZeRO's collective bookkeeping on one small stage (Linear 5 -> 3: a 32-element flat
 * buffer, weight 15 + 1 alignment, bias 3 + 13) over 1, 2 and 3 real processes (Gloo on
 * loopback), each ZeRO stage: shards cut through the weight, 3 ranks pad the buffer to
 * 33. Every rank writes its own gradients; after the hooks, the reduction, clipping and
 * two AdamW steps the parameters must equal one rank's plain AdamW on the averaged
 * gradients (starting from rank 0's parameters, which ZeRO broadcasts), and each rank
 * must hold only the state its stage keeps. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "../comm/comm_test_util.h"

int zero_rank_main(const ds_context *ctx, int zero);

static int zero_rank(rank_env *env) { return zero_rank_main(&env->ctx, *(int *)env->arg); }

static void run_world(int world) {
    for (int zero = 0; zero <= 3; zero++) {
        int failed = run_ranks(world, world, 30000, 60, zero_rank, &zero);
        if (failed) fail_msg("world %d, zero %d: %d ranks failed", world, zero, failed);
    }
}

static void test_world1(void **state) { (void)state; run_world(1); }
static void test_world2(void **state) { (void)state; run_world(2); }
static void test_world3(void **state) { (void)state; run_world(3); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_world1),
        cmocka_unit_test(test_world2),
        cmocka_unit_test(test_world3),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
