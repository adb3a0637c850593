#include "partition.h"

int ds_partition_make(int64_t numel, int world, ds_partition *p, ds_err *err) {
    if (numel < 0) return ds_err_set(err, "partition: negative element count %lld", (long long)numel);
    if (world < 1) return ds_err_set(err, "partition: world size %d, expected >= 1", world);
    p->numel = numel;
    p->world = world;
    p->shard = (numel + world - 1) / world;
    p->padded = p->shard * world;
    return 0;
}

int64_t ds_partition_begin(const ds_partition *p, int rank) { return (int64_t)rank * p->shard; }

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

int64_t ds_partition_real(const ds_partition *p, int rank) {
    int64_t begin = ds_partition_begin(p, rank);
    return max64(0, min64(begin + p->shard, p->numel) - begin);
}

int ds_partition_owner(const ds_partition *p, int64_t i) {
    return p->shard > 0 ? (int)(i / p->shard) : 0;
}

ds_shard_slice ds_partition_intersect(const ds_partition *p, int rank, int64_t off,
                                      int64_t len) {
    ds_shard_slice s = {0, 0, 0, 0};
    int64_t begin = ds_partition_begin(p, rank);
    int64_t lo = max64(off, begin);
    int64_t hi = min64(min64(off + len, begin + ds_partition_real(p, rank)), p->numel);
    if (hi <= lo) return s;
    s.flat_off = lo;
    s.shard_off = lo - begin;
    s.range_off = lo - off;
    s.len = hi - lo;
    return s;
}
