//! Whole-map reads in one system call.
//!
//! Walking a hash map key by key costs two system calls per entry (next key, then lookup), and
//! a busy host has an entry per busy process in several maps every second. The kernel's batch
//! operations (`BPF_MAP_LOOKUP_BATCH`, `BPF_MAP_DELETE_BATCH`, Linux 5.6+) copy every entry of a
//! hash map in one call when the buffers hold `max_entries`, and walk by bucket, so an entry
//! deleted or added meanwhile cannot make the walk start over and return a key twice.
//!
//! Written against `libbpf-sys` rather than libbpf-rs's `lookup_batch`: that one refuses per-CPU
//! maps (the madvise tracer's), copies every entry into two new vectors, and finds the n-th
//! entry of a batch by scanning from the first, which is quadratic in the map's size. Here the
//! buffers are kept from one read to the next and entries are borrowed from them.

use std::os::fd::AsRawFd;

use libbpf_rs::{MapCore, MapFlags};

/// The entries of one map as read: keys and values packed in reused buffers.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    keys: Vec<u8>,
    values: Vec<u8>,
    key_size: usize,
    /// Bytes per entry in `values`: the value size, or for a per-CPU map each CPU's copy
    /// rounded up to 8 bytes, times the possible CPUs (the kernel's layout for both calls).
    stride: usize,
    /// Bytes of one CPU's copy in a per-CPU map's entry (0 for other maps).
    cpu_stride: usize,
    len: usize,
    /// Whether the kernel answered batch calls for this map; `Some(false)` keeps to the
    /// key-by-key walk (kernels before 5.6, map types without batch support).
    batched: Option<bool>,
    /// Whether the last read walked key by key.
    walked: bool,
}

/// Errors the kernel gives for a batch operation it does not have.
fn unsupported(errno: i32) -> bool {
    matches!(errno, libc::EINVAL | libc::ENOTSUP | libc::ENOSYS)
        // ENOTSUPP, the kernel-internal "not supported" some map types return.
        || errno == 524
}

impl Batch {
    /// Reads every entry of `map`, replacing what the last read held. A read that fails
    /// midway keeps what it got: the next interval reads the rest.
    pub(crate) fn read(&mut self, map: &dyn MapCore) -> usize {
        self.key_size = map.key_size() as usize;
        let vsize = map.value_size() as usize;
        if map.map_type().is_percpu() {
            let cpus = libbpf_rs::num_possible_cpus().unwrap_or(1).max(1);
            self.cpu_stride = vsize.div_ceil(8) * 8;
            self.stride = self.cpu_stride * cpus;
        } else {
            self.cpu_stride = 0;
            self.stride = vsize;
        }
        let cap = map.max_entries() as usize;
        self.keys.resize(cap * self.key_size, 0);
        self.values.resize(cap * self.stride, 0);
        self.len = 0;
        self.walked = false;
        if self.batched != Some(false) {
            match self.read_batched(map, cap) {
                Ok(()) => {
                    self.batched = Some(true);
                    return self.len;
                }
                Err(e) if self.batched.is_none() && unsupported(e) => self.batched = Some(false),
                Err(_) => return self.len,
            }
        }
        self.read_walked(map, cap);
        self.len
    }

    fn read_batched(&mut self, map: &dyn MapCore, cap: usize) -> Result<(), i32> {
        let fd = map.as_fd().as_raw_fd();
        let opts = libbpf_sys::bpf_map_batch_opts {
            sz: std::mem::size_of::<libbpf_sys::bpf_map_batch_opts>() as _,
            elem_flags: 0,
            flags: 0,
        };
        // The batch token: a bucket index for hash maps, a key for arrays.
        let token_size = self.key_size.max(8);
        let mut token_in = vec![0u8; token_size];
        let mut token_out = vec![0u8; token_size];
        let mut first = true;
        loop {
            let room = cap - self.len;
            if room == 0 {
                return Ok(());
            }
            let mut count = room as u32;
            // SAFETY: the key and value buffers have room for `count` entries past `len` at
            // the sizes the kernel uses for this map (key size; value stride); the tokens are
            // at least the key size and 4 bytes; the kernel writes at most `count` entries.
            let r = unsafe {
                libbpf_sys::bpf_map_lookup_batch(
                    fd,
                    if first {
                        std::ptr::null_mut()
                    } else {
                        token_in.as_mut_ptr().cast()
                    },
                    token_out.as_mut_ptr().cast(),
                    self.keys[self.len * self.key_size..].as_mut_ptr().cast(),
                    self.values[self.len * self.stride..].as_mut_ptr().cast(),
                    &mut count,
                    &opts,
                )
            };
            let errno = if r < 0 { -r } else { 0 };
            if errno == libc::EINTR || errno == libc::EAGAIN {
                continue;
            }
            if errno != 0 && errno != libc::ENOENT {
                return Err(errno);
            }
            self.len += (count as usize).min(room);
            // ENOENT: the walk reached the end (count says what this call copied).
            if errno == libc::ENOENT || count == 0 {
                return Ok(());
            }
            first = false;
            std::mem::swap(&mut token_in, &mut token_out);
        }
    }

    /// The key-by-key walk, for kernels without batch operations. Keys are deduplicated: a
    /// next-key walk starts over from the first key when the one it was given is gone.
    fn read_walked(&mut self, map: &dyn MapCore, cap: usize) {
        self.walked = true;
        let mut seen = std::collections::HashSet::new();
        for k in map.keys() {
            if self.len == cap {
                break;
            }
            if k.len() != self.key_size || !seen.insert(k.clone()) {
                continue;
            }
            let at = self.len * self.stride;
            let ok = if self.cpu_stride > 0 {
                match map.lookup_percpu(&k, MapFlags::ANY) {
                    Ok(Some(per_cpu)) => {
                        for (i, c) in per_cpu.iter().enumerate() {
                            let o = at + i * self.cpu_stride;
                            let n = c.len().min(self.cpu_stride);
                            if o + n <= at + self.stride {
                                self.values[o..o + n].copy_from_slice(&c[..n]);
                            }
                        }
                        true
                    }
                    _ => false,
                }
            } else {
                match map.lookup(&k, MapFlags::ANY) {
                    Ok(Some(v)) => {
                        let n = v.len().min(self.stride);
                        self.values[at..at + n].copy_from_slice(&v[..n]);
                        true
                    }
                    _ => false,
                }
            };
            if ok {
                let ka = self.len * self.key_size;
                self.keys[ka..ka + self.key_size].copy_from_slice(&k);
                self.len += 1;
            }
        }
    }

    /// Whether the last read walked key by key.
    #[cfg(test)]
    pub(crate) fn walked(&self) -> bool {
        self.walked
    }

    /// Reads by the key-by-key walk from now on, as on a kernel without batch calls.
    #[cfg(test)]
    pub(crate) fn force_walk(&mut self) {
        self.batched = Some(false);
    }

    /// The `i`-th entry's key.
    pub(crate) fn key(&self, i: usize) -> &[u8] {
        &self.keys[i * self.key_size..(i + 1) * self.key_size]
    }

    /// The `i`-th entry's value (for a per-CPU map, every CPU's copy: see [`Batch::cpu_copies`]).
    pub(crate) fn value(&self, i: usize) -> &[u8] {
        &self.values[i * self.stride..(i + 1) * self.stride]
    }

    /// The `i`-th entry's per-CPU copies (one, the value, for other maps).
    pub(crate) fn cpu_copies(&self, i: usize) -> impl Iterator<Item = &[u8]> {
        let v = self.value(i);
        let step = if self.cpu_stride > 0 {
            self.cpu_stride
        } else {
            v.len().max(1)
        };
        v.chunks(step)
    }
}

/// Deletes `keys` (packed, `key_size` bytes each) from `map` in one call where the kernel has
/// batch deletion, else one by one. Keys already gone are not an error.
pub(crate) fn delete(map: &dyn MapCore, keys: &[u8]) {
    let ks = map.key_size() as usize;
    if keys.is_empty() || ks == 0 {
        return;
    }
    let n = keys.len() / ks;
    let opts = libbpf_sys::bpf_map_batch_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_map_batch_opts>() as _,
        elem_flags: 0,
        flags: 0,
    };
    let mut count = n as u32;
    // SAFETY: `keys` holds `n` keys of the map's key size; the kernel reads at most `count`.
    let r = unsafe {
        libbpf_sys::bpf_map_delete_batch(
            map.as_fd().as_raw_fd(),
            keys.as_ptr().cast(),
            &mut count,
            &opts,
        )
    };
    if r == 0 {
        return;
    }
    // The batch stops at the first key it cannot delete (gone: ENOENT) or is unsupported;
    // the rest go one by one.
    let done = if r == -libc::ENOENT {
        count as usize
    } else {
        0
    };
    for k in keys.chunks_exact(ks).skip(done) {
        let _ = map.delete(k);
    }
}
