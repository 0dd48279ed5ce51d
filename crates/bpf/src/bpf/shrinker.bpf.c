// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* Slab shrinker calls keyed by the shrinker's scan function (this kernel names no shrinkers;
 * user space resolves the address through kallsyms): calls, objects scanned and freed, latency,
 * and the calls that freed nothing — the wasted work that scaled with memcgs x superblocks in
 * case 3. */
#include "jitterscope.h"

struct js_shrink_stat {
	u64 calls;
	u64 zero_freed; /* calls that freed nothing */
	u64 to_scan;    /* objects the kernel asked it to scan (total_scan at start) */
	u64 scanned;    /* to_scan minus what was left unscanned at the end */
	u64 freed;
	u64 cache_items; /* sum of the freeable objects it reported at each call */
	struct js_hist hist;
};

struct js_shrink_start {
	u64 ts;
	u64 fn;
	u64 total_scan;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, u64);
	__type(value, struct js_shrink_stat);
} shrinkers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, u32);
	__type(value, struct js_shrink_start);
} shrink_start SEC(".maps");

u64 dropped = 0;
static const struct js_shrink_stat zero_stat;

struct shrink_slab_start_args {
	struct trace_entry ent;
	void *shr;
	void *shrink;
	int nid;
	long nr_objects_to_shrink;
	unsigned long gfp_flags;
	unsigned long cache_items;
	unsigned long long delta;
	unsigned long total_scan;
	int priority;
};

struct shrink_slab_end_args {
	struct trace_entry ent;
	void *shr;
	int nid;
	void *shrink;
	long unused_scan;
	long new_scan;
	int retval;
	long total_scan;
};

/* The entry of scan function `fn`, created when new; the overflow entry when the map is full. */
static __always_inline struct js_shrink_stat *stat_of(u64 fn)
{
	struct js_shrink_stat *st = bpf_map_lookup_elem(&shrinkers, &fn);
	if (st)
		return st;
	bpf_map_update_elem(&shrinkers, &fn, &zero_stat, BPF_NOEXIST);
	st = bpf_map_lookup_elem(&shrinkers, &fn);
	if (st)
		return st;
	fn = ~0ULL;
	return bpf_map_lookup_elem(&shrinkers, &fn);
}

SEC("tracepoint/vmscan/mm_shrink_slab_start")
int shrink_slab_start(struct shrink_slab_start_args *ctx)
{
	u32 tid = (u32)bpf_get_current_pid_tgid();
	struct js_shrink_start s = {
		.ts = bpf_ktime_get_ns(),
		.fn = (u64)ctx->shrink,
		.total_scan = ctx->total_scan,
	};
	if (bpf_map_update_elem(&shrink_start, &tid, &s, BPF_ANY))
		__sync_fetch_and_add(&dropped, 1);
	/* cache_items is only known here; count it against the function right away. */
	struct js_shrink_stat *st = stat_of(s.fn);
	if (st)
		__sync_fetch_and_add(&st->cache_items, ctx->cache_items);
	return 0;
}

SEC("tracepoint/vmscan/mm_shrink_slab_end")
int shrink_slab_end(struct shrink_slab_end_args *ctx)
{
	u32 tid = (u32)bpf_get_current_pid_tgid();
	struct js_shrink_start *s = bpf_map_lookup_elem(&shrink_start, &tid);
	if (!s)
		return 0;
	u64 ns = bpf_ktime_get_ns() - s->ts;
	u64 fn = s->fn;
	u64 to_scan = s->total_scan;
	bpf_map_delete_elem(&shrink_start, &tid);

	struct js_shrink_stat *st = stat_of(fn);
	if (!st) {
		__sync_fetch_and_add(&dropped, 1);
		return 0;
	}
	long left = ctx->total_scan;
	u64 scanned = left > 0 && (u64)left < to_scan ? to_scan - (u64)left : (left > 0 ? 0 : to_scan);
	int freed = ctx->retval;
	__sync_fetch_and_add(&st->calls, 1);
	__sync_fetch_and_add(&st->to_scan, to_scan);
	__sync_fetch_and_add(&st->scanned, scanned);
	if (freed > 0)
		__sync_fetch_and_add(&st->freed, (u64)freed);
	else
		__sync_fetch_and_add(&st->zero_freed, 1);
	js_hist_add(&st->hist, ns);
	return 0;
}
