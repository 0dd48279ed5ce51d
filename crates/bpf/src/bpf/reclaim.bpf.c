// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* Direct reclaim stalls (global and memcg) per process and per memory cgroup, and kswapd
 * wake-ups: who was made to reclaim, how long it stalled, how much it got back (case 1). */
#include "jitterscope.h"

enum { KIND_DIRECT, KIND_MEMCG, KIND_N };

struct js_reclaim_stat {
	struct js_proc_head head; /* comm empty for a cgroup entry */
	u64 stalls[KIND_N];
	u64 reclaimed_pages;
	struct js_hist hist; /* all stalls, both kinds */
};

struct js_reclaim_start {
	u64 ts;
	u32 kind;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, u32);
	__type(value, struct js_reclaim_stat);
} reclaim_procs SEC(".maps");

/* Keyed by the low 32 bits of the memory cgroup's kernfs id (ids fit in 32 bits in practice;
 * the full id is in the value). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 2048);
	__type(key, u32);
	__type(value, struct js_reclaim_stat);
} reclaim_cgroups SEC(".maps");

/* Stalls in progress, by thread. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, u32);
	__type(value, struct js_reclaim_start);
} reclaim_start SEC(".maps");

/* Host totals: [0] wakeup_kswapd requests, [1] kswapd wake-ups. */
u64 kswapd[2] = {};
u64 dropped = 0;
static const struct js_reclaim_stat zero_stat;

static __always_inline int on_begin(u32 kind)
{
	u32 tid = (u32)bpf_get_current_pid_tgid();
	struct js_reclaim_start s = { .ts = bpf_ktime_get_ns(), .kind = kind };
	if (bpf_map_update_elem(&reclaim_start, &tid, &s, BPF_ANY))
		__sync_fetch_and_add(&dropped, 1);
	return 0;
}

static __always_inline void account(struct js_reclaim_stat *st, u32 kind, u64 ns, u64 pages)
{
	__sync_fetch_and_add(&st->stalls[kind & 1], 1);
	__sync_fetch_and_add(&st->reclaimed_pages, pages);
	js_hist_add(&st->hist, ns);
}

static __always_inline int on_end(u64 pages)
{
	u64 id = bpf_get_current_pid_tgid();
	u32 tid = (u32)id;
	struct js_reclaim_start *s = bpf_map_lookup_elem(&reclaim_start, &tid);
	if (!s)
		return 0; /* began before the tracer attached */
	u64 ns = bpf_ktime_get_ns() - s->ts;
	u32 kind = s->kind;
	bpf_map_delete_elem(&reclaim_start, &tid);

	struct js_reclaim_stat *p = js_proc_entry(&reclaim_procs, &zero_stat, memory_cgrp_id, &dropped);
	if (p)
		account(p, kind, ns, pages);
	u64 cg = js_current_cgroup(memory_cgrp_id);
	u32 ckey = (u32)cg;
	bool fresh = false;
	struct js_reclaim_stat *c = js_lookup_or_init(&reclaim_cgroups, &ckey, &zero_stat, &fresh);
	if (c) {
		if (fresh && ckey != JS_OTHER)
			c->head.cgroup = cg;
		account(c, kind, ns, pages);
	} else {
		__sync_fetch_and_add(&dropped, 1);
	}
	return 0;
}

SEC("tracepoint/vmscan/mm_vmscan_direct_reclaim_begin")
int direct_begin(void *ctx)
{
	return on_begin(KIND_DIRECT);
}

SEC("tracepoint/vmscan/mm_vmscan_memcg_reclaim_begin")
int memcg_begin(void *ctx)
{
	return on_begin(KIND_MEMCG);
}

struct reclaim_end_args {
	struct trace_entry ent;
	unsigned long nr_reclaimed;
};

SEC("tracepoint/vmscan/mm_vmscan_direct_reclaim_end")
int direct_end(struct reclaim_end_args *ctx)
{
	return on_end(ctx->nr_reclaimed);
}

SEC("tracepoint/vmscan/mm_vmscan_memcg_reclaim_end")
int memcg_end(struct reclaim_end_args *ctx)
{
	return on_end(ctx->nr_reclaimed);
}

SEC("tracepoint/vmscan/mm_vmscan_wakeup_kswapd")
int wakeup_kswapd(void *ctx)
{
	__sync_fetch_and_add(&kswapd[0], 1);
	return 0;
}

SEC("tracepoint/vmscan/mm_vmscan_kswapd_wake")
int kswapd_wake(void *ctx)
{
	__sync_fetch_and_add(&kswapd[1], 1);
	return 0;
}
