//! The socket families the recorder may open, narrowed to what its configuration needs.
//!
//! The systemd unit allows the families any configuration could need (`AF_UNIX AF_NETLINK
//! AF_INET AF_INET6`): it cannot read the configuration file. The recorder can, so once the
//! file is read it installs a seccomp filter of its own that refuses every other family with
//! `EAFNOSUPPORT`, as systemd's `RestrictAddressFamilies=` does. A recorder that exports
//! nothing therefore opens no IP socket, whatever the unit allows, and one that exports to
//! remote write or ClickHouse opens exactly the IP families it needs. The filter holds for
//! every thread (TSYNC) and for good: a filter cannot be removed.

use anyhow::{Context, Result};
use seccompiler::{
    SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
};

/// The families the recorder opens whatever its configuration: AF_UNIX (the service
/// manager's notification socket, the name service's) and AF_NETLINK (as the unit allowed).
const ALWAYS: &[i32] = &[libc::AF_UNIX, libc::AF_NETLINK];
/// What an exporter adds: TCP over IPv4 and IPv6 (and the resolver's UDP).
const IP: &[i32] = &[libc::AF_INET, libc::AF_INET6];

/// The families a recorder needs; `exports`: it sends to remote write or ClickHouse.
pub fn families(exports: bool) -> Vec<i32> {
    let mut f = ALWAYS.to_vec();
    if exports {
        f.extend_from_slice(IP);
    }
    f
}

/// A family's name, for the log.
pub fn name(family: i32) -> &'static str {
    match family {
        libc::AF_UNIX => "AF_UNIX",
        libc::AF_NETLINK => "AF_NETLINK",
        libc::AF_INET => "AF_INET",
        libc::AF_INET6 => "AF_INET6",
        _ => "?",
    }
}

/// Refuses `socket()` and `socketpair()` of any family outside `allowed` in every thread of
/// this process from now on.
pub fn restrict_families(allowed: &[i32]) -> Result<()> {
    install(&compile(allowed)?)
}

fn install(prog: &seccompiler::BpfProgram) -> Result<()> {
    seccompiler::apply_filter_all_threads(prog).context("seccomp: cannot install the socket filter")
}

/// The filter refusing the families outside `allowed`.
fn compile(allowed: &[i32]) -> Result<seccompiler::BpfProgram> {
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|e| anyhow::anyhow!("seccomp: {e:?}"))?;
    // A call matches (and is refused) when its family is none of the allowed ones: one rule
    // whose conditions all hold.
    let not_allowed = || -> Result<Vec<SeccompRule>> {
        let conds = allowed
            .iter()
            .map(|&f| SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, f as u64))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(vec![SeccompRule::new(conds)?])
    };
    let rules = [
        (libc::SYS_socket, not_allowed()?),
        (libc::SYS_socketpair, not_allowed()?),
    ]
    .into_iter()
    .collect();
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EAFNOSUPPORT as u32),
        arch,
    )
    .context("seccomp: cannot build the socket filter")?;
    filter
        .try_into()
        .context("seccomp: cannot compile the socket filter")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exporters_add_ip_families() {
        assert_eq!(families(false), [libc::AF_UNIX, libc::AF_NETLINK]);
        assert_eq!(
            families(true),
            [
                libc::AF_UNIX,
                libc::AF_NETLINK,
                libc::AF_INET,
                libc::AF_INET6
            ]
        );
    }

    /// In a child process, so the filter (which cannot be lifted) leaves the test runner alone;
    /// compiled before the fork, so the child of a multi-threaded runner does not allocate.
    #[test]
    fn a_family_outside_the_set_is_refused() {
        let prog = compile(&families(false)).unwrap();
        // SAFETY: fork in a test; the child only makes system calls and exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = (|| {
                if install(&prog).is_err() {
                    return 10;
                }
                // SAFETY: plain socket calls; the descriptors are closed.
                unsafe {
                    let u = libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM, 0);
                    if u < 0 {
                        return 11;
                    }
                    libc::close(u);
                    let i = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
                    if i >= 0 {
                        return 12;
                    }
                    if *libc::__errno_location() != libc::EAFNOSUPPORT {
                        return 13;
                    }
                }
                0
            })();
            // SAFETY: leaves the forked child without running the parent's destructors.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status), "child status {status}");
        assert_eq!(
            libc::WEXITSTATUS(status),
            0,
            "10: no filter, 11: AF_UNIX refused, 12: AF_INET allowed, 13: another errno"
        );
    }
}
