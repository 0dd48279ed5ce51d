//! Turning the kernel's cumulative per-key counters into counts per interval.
//!
//! Every BPF map value here is a C struct of 64-bit words: counters, plus a few words that are
//! not counters (the command name, a cgroup id, a histogram's maximum and its generation). A
//! [`Layout`] says which words are which; [`Deltas`] remembers the previous value of each key and
//! yields the difference. Working on words keeps this one generic, tested piece instead of a
//! subtraction per field per tracer.

use std::collections::HashMap;
use std::hash::Hash;

/// Which words of a value are not counters and are passed through as they are.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    /// Value size in words.
    pub words: usize,
    /// Indexes of words that are copied, not subtracted.
    pub keep: &'static [usize],
    /// The word holding the read generation at which a per-CPU copy was last named (per-process
    /// values): the kept words are taken from the most recently named copy.
    pub named_gen: Option<usize>,
}

/// Previous values by key.
#[derive(Debug)]
pub struct Deltas<K> {
    layout: Layout,
    prev: HashMap<K, Vec<u64>>,
}

/// Reads a value's bytes as native-endian words (a short value is zero-padded).
pub fn words(bytes: &[u8], n: usize) -> Vec<u64> {
    let mut out = vec![0u64; n];
    for (i, w) in out.iter_mut().enumerate() {
        if let Some(b) = bytes.get(i * 8..i * 8 + 8) {
            *w = u64::from_ne_bytes(b.try_into().unwrap_or([0; 8]));
        }
    }
    out
}

impl<K: Hash + Eq + Clone> Deltas<K> {
    /// Empty, for values of `layout`.
    pub fn new(layout: Layout) -> Self {
        Deltas {
            layout,
            prev: HashMap::new(),
        }
    }

    /// The change of `key` since the last call, or `None` when no counter moved. A counter below
    /// its previous value means the kernel entry was recreated (a reused pid, a map we cleared):
    /// the whole current value is the change.
    pub fn update(&mut self, key: K, cur: Vec<u64>) -> Option<Vec<u64>> {
        let l = self.layout;
        let prev = self.prev.get(&key);
        let reset = prev
            .is_some_and(|p| (0..l.words).any(|i| !l.keep.contains(&i) && cur.get(i) < p.get(i)));
        let mut d = cur.clone();
        let mut moved = false;
        for (i, w) in d.iter_mut().enumerate().take(l.words) {
            if l.keep.contains(&i) {
                continue;
            }
            if let (Some(p), false) = (prev, reset) {
                *w -= p.get(i).copied().unwrap_or(0);
            }
            moved |= *w != 0;
        }
        self.prev.insert(key, cur);
        moved.then_some(d)
    }

    /// The layout of the values.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Forgets `key` (its kernel entry was deleted).
    pub fn forget(&mut self, key: &K) {
        self.prev.remove(key);
    }

    /// Keys remembered.
    pub fn len(&self) -> usize {
        self.prev.len()
    }

    /// Whether no key is remembered.
    pub fn is_empty(&self) -> bool {
        self.prev.is_empty()
    }
}

/// One value of a per-CPU map from its CPUs' copies: counters summed; the words that are not
/// counters taken from the copy that was named (its first word, the start of the command name,
/// is set on the CPU where the entry was created), or else the largest.
pub fn sum_cpus<'a>(per_cpu: impl IntoIterator<Item = &'a [u8]>, layout: Layout) -> Vec<u64> {
    let copies: Vec<Vec<u64>> = per_cpu
        .into_iter()
        .map(|b| words(b, layout.words))
        .collect();
    let named = copies
        .iter()
        .filter(|c| c.first().is_some_and(|&w| w != 0))
        // max_by_key keeps the last of equals; rev() makes the first CPU win a tie.
        .rev()
        .max_by_key(|c| layout.named_gen.map_or(0, |i| c[i]));
    (0..layout.words)
        .map(|i| {
            if !layout.keep.contains(&i) {
                copies.iter().map(|c| c[i]).fold(0u64, u64::wrapping_add)
            } else if let Some(n) = named {
                n[i]
            } else {
                copies.iter().map(|c| c[i]).max().unwrap_or(0)
            }
        })
        .collect()
}

/// The command name stored in two words, as text.
pub fn comm(w: &[u64]) -> String {
    let mut b = Vec::with_capacity(16);
    for x in w.iter().take(2) {
        b.extend_from_slice(&x.to_ne_bytes());
    }
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// Whether a process with id `pid` exists (signal 0 probes without sending anything). Pid 0,
/// the idle task that BPF sees on every CPU, always does.
pub fn pid_alive(pid: u32) -> bool {
    if pid == 0 {
        return true;
    }
    if pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: kill with signal 0 performs only the existence and permission check.
    let r = unsafe { libc::kill(pid as i32, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Layout = Layout {
        words: 4,
        keep: &[0],
        named_gen: None,
    };

    #[test]
    fn first_sight_is_the_whole_value_then_differences() {
        let mut d = Deltas::new(L);
        assert_eq!(d.update(1u32, vec![7, 5, 0, 1]), Some(vec![7, 5, 0, 1]));
        assert_eq!(d.update(1, vec![7, 5, 0, 1]), None, "nothing moved");
        assert_eq!(d.update(1, vec![9, 8, 2, 1]), Some(vec![9, 3, 2, 0]));
    }

    #[test]
    fn a_counter_going_back_is_a_new_entry() {
        let mut d = Deltas::new(L);
        d.update(1u32, vec![0, 100, 100, 100]);
        assert_eq!(
            d.update(1, vec![0, 3, 200, 100]),
            Some(vec![0, 3, 200, 100])
        );
    }

    #[test]
    fn forget_restarts_a_key() {
        let mut d = Deltas::new(L);
        d.update(1u32, vec![0, 5, 0, 0]);
        d.forget(&1);
        assert_eq!(d.len(), 0);
        assert_eq!(d.update(1, vec![0, 5, 0, 0]), Some(vec![0, 5, 0, 0]));
    }

    #[test]
    fn per_cpu_copies_sum_their_counters_and_keep_the_named_identity() {
        let copy = |w: [u64; 4]| w.iter().flat_map(|x| x.to_ne_bytes()).collect::<Vec<u8>>();
        let l = Layout {
            words: 4,
            keep: &[0, 1],
            named_gen: None,
        };
        let cpus = [
            copy([0, 0, 5, 1]),
            copy([0x6176_616a, 9, 7, 2]),
            copy([0, 0, 1, 0]),
        ];
        assert_eq!(
            sum_cpus(cpus.iter().map(Vec::as_slice), l),
            vec![0x6176_616a, 9, 13, 3]
        );
        assert_eq!(sum_cpus([], l), vec![0, 0, 0, 0]);
    }

    #[test]
    fn per_cpu_identity_comes_from_the_most_recently_named_copy() {
        // comm word, cgroup, named generation, counter: CPU 1 saw the process before its exec
        // (gen 4), CPU 2 after it (gen 7); the name and cgroup must be the newer ones.
        let copy = |w: [u64; 4]| w.iter().flat_map(|x| x.to_ne_bytes()).collect::<Vec<u8>>();
        let l = Layout {
            words: 4,
            keep: &[0, 1, 2],
            named_gen: Some(2),
        };
        let cpus = [
            copy([0, 0, 0, 1]),
            copy([0x6873_6162, 10, 4, 2]),
            copy([0x6576_6976, 20, 7, 3]),
        ];
        assert_eq!(
            sum_cpus(cpus.iter().map(Vec::as_slice), l),
            vec![0x6576_6976, 20, 7, 6]
        );
        // Equal generations: the first named CPU's copy, as before.
        let tie = [copy([0x61, 1, 7, 1]), copy([0x62, 2, 7, 1])];
        assert_eq!(sum_cpus(tie.iter().map(Vec::as_slice), l)[0], 0x61);
    }

    #[test]
    fn words_and_comm() {
        let mut b = b"stress-ng\0\0\0\0\0\0\0".to_vec();
        b.extend_from_slice(&42u64.to_ne_bytes());
        let w = words(&b, 4);
        assert_eq!(comm(&w), "stress-ng");
        assert_eq!(w[2], 42);
        assert_eq!(w[3], 0, "short input is zero-padded");
        assert_eq!(comm(&words(b"0123456789abcdef", 2)), "0123456789abcdef");
    }

    #[test]
    fn liveness_of_self_and_of_nothing() {
        assert!(pid_alive(std::process::id()));
        assert!(pid_alive(0), "the idle task");
        assert!(!pid_alive(u32::MAX));
    }

    proptest::proptest! {
        #[test]
        fn deltas_never_panic(vals in proptest::collection::vec(proptest::collection::vec(proptest::num::u64::ANY, 0..6), 0..20)) {
            let mut d = Deltas::new(L);
            for v in vals {
                let _ = d.update(0u8, v);
            }
        }
    }
}
