// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* Dirty-page write throttling per process: the sleeps balance_dirty_pages() makes a writer take
 * when its writeback domain (the host, or its memory cgroup on cgroup v2) holds more dirty pages
 * than the disk drains. writeback:balance_dirty_pages fires once per throttling decision, in the
 * writer's own context, just before the sleep, with the sleep's length in ms (`pause`; 0 or less
 * when the writer was let through). Nothing fires while writers stay under the limits. */
#include "jitterscope.h"

struct js_dirty_proc {
	struct js_proc_head head; /* cgroup: the memory cgroup, the writeback domain on v2 */
	u64 pauses;
	struct js_hist hist; /* each sleep's length */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024); /* writers throttled at once are few */
	__type(key, u32);
	__type(value, struct js_dirty_proc);
} dirty_procs SEC(".maps");

u64 dropped = 0;
static const struct js_dirty_proc zero_proc;

/* The record up to the fields read (include/trace/events/writeback.h; the same offsets since
 * 4.x, checked at load against the format file). */
struct bdp_args {
	struct trace_entry ent;
	char bdi[32];
	unsigned long limit;
	unsigned long setpoint;
	unsigned long dirty;
	unsigned long wb_setpoint;
	unsigned long wb_dirty;
	unsigned long dirty_ratelimit;
	unsigned long task_ratelimit;
	unsigned int dirtied;
	unsigned int dirtied_pause;
	unsigned long paused;
	long pause;
};

SEC("tracepoint/writeback/balance_dirty_pages")
int balance_dirty_pages(struct bdp_args *ctx)
{
	long ms = ctx->pause;
	if (ms <= 0)
		return 0; /* let through without a sleep */
	struct js_dirty_proc *p = js_proc_entry(&dirty_procs, &zero_proc, memory_cgrp_id, &dropped);
	if (!p)
		return 0;
	__sync_fetch_and_add(&p->pauses, 1);
	js_hist_add(&p->hist, (u64)ms * 1000000);
	return 0;
}
