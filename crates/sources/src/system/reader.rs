//! [`SystemReader`]: reads the system-wide files under a [`Root`] with one reused buffer.

use crate::fileio::{HeldFiles, ReadError, Root};

use super::buddyinfo::{parse_buddyinfo, BuddyInfo};
use super::dentry::{parse_dentry_state, DentryState, NR_NEGATIVE_SINCE};
use super::diskstats::{parse_diskstats, DiskStats};
use super::interrupts::{parse_interrupts, Interrupts};
use super::kernel::{parse_osrelease, KernelVersion};
use super::loadavg::{parse_loadavg, LoadAvg};
use super::meminfo::{parse_meminfo, MemInfo};
use super::netdev::{parse_net_dev, NetDevs};
use super::pressure::{parse_pressure, Pressure};
use super::slabinfo::{parse_slabinfo, SlabInfo};
use super::softirqs::{parse_softirqs, Softirqs};
use super::stat::{parse_stat, Stat};
use super::vmstat::{parse_vmstat, VmStat};
use super::zoneinfo::{parse_zoneinfo, ZoneInfo};

/// A resource with a /proc/pressure file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PressureResource {
    /// `/proc/pressure/cpu`.
    Cpu,
    /// `/proc/pressure/memory`.
    Memory,
    /// `/proc/pressure/io`.
    Io,
    /// `/proc/pressure/irq` (6.1+, with CONFIG_IRQ_TIME_ACCOUNTING).
    Irq,
}

impl PressureResource {
    /// All four, in a stable order.
    pub const ALL: [PressureResource; 4] = [
        PressureResource::Cpu,
        PressureResource::Memory,
        PressureResource::Io,
        PressureResource::Irq,
    ];

    /// The file name under /proc/pressure.
    pub fn name(self) -> &'static str {
        match self {
            PressureResource::Cpu => "cpu",
            PressureResource::Memory => "memory",
            PressureResource::Io => "io",
            PressureResource::Irq => "irq",
        }
    }
}

/// Reads system-wide /proc files. Each method reads one file into the reused buffer and parses
/// it; errors carry the path. Absent files (no /proc/pressure without PSI, no irq pressure
/// before 6.1) satisfy [`ReadError::is_missing`]; callers wrap calls in
/// [`crate::fileio::optional`]. /proc/slabinfo fails with [`ReadError::is_permission`] unless
/// running as root, which callers should report once, not every interval.
#[derive(Debug, Default)]
pub struct SystemReader {
    root: Root,
    buf: Vec<u8>,
    held: HeldFiles,
    kernel: Option<Option<KernelVersion>>,
}

impl SystemReader {
    /// A reader of the files under `root`.
    pub fn new(root: Root) -> Self {
        SystemReader {
            root,
            buf: Vec::with_capacity(64 * 1024),
            held: HeldFiles::default(),
            kernel: None,
        }
    }

    /// The root it reads under.
    pub fn root(&self) -> &Root {
        &self.root
    }

    fn read<T>(
        &mut self,
        abs: &str,
        parse: impl FnOnce(&[u8]) -> Result<T, crate::ParseError>,
    ) -> Result<T, ReadError> {
        self.held
            .read_parse(&self.root.path(abs), &mut self.buf, parse)
    }

    /// The kernel version from /proc/sys/kernel/osrelease, read once and cached (it cannot
    /// change while the host runs).
    pub fn kernel_version(&mut self) -> Result<KernelVersion, ReadError> {
        if let Some(Some(v)) = self.kernel {
            return Ok(v);
        }
        let v = self.read("/proc/sys/kernel/osrelease", parse_osrelease)?;
        self.kernel = Some(Some(v));
        Ok(v)
    }

    /// /proc/stat.
    pub fn stat(&mut self) -> Result<Stat, ReadError> {
        self.read("/proc/stat", parse_stat)
    }

    /// /proc/loadavg.
    pub fn loadavg(&mut self) -> Result<LoadAvg, ReadError> {
        self.read("/proc/loadavg", parse_loadavg)
    }

    /// /proc/vmstat.
    pub fn vmstat(&mut self) -> Result<VmStat, ReadError> {
        self.read("/proc/vmstat", parse_vmstat)
    }

    /// /proc/meminfo.
    pub fn meminfo(&mut self) -> Result<MemInfo, ReadError> {
        self.read("/proc/meminfo", parse_meminfo)
    }

    /// /proc/zoneinfo.
    pub fn zoneinfo(&mut self) -> Result<ZoneInfo, ReadError> {
        self.read("/proc/zoneinfo", parse_zoneinfo)
    }

    /// /proc/buddyinfo.
    pub fn buddyinfo(&mut self) -> Result<BuddyInfo, ReadError> {
        self.read("/proc/buddyinfo", parse_buddyinfo)
    }

    /// /proc/slabinfo (root only).
    pub fn slabinfo(&mut self) -> Result<SlabInfo, ReadError> {
        self.read("/proc/slabinfo", parse_slabinfo)
    }

    /// /proc/sys/fs/dentry-state. `nr_negative` is `None` on kernels before 5.0, and also
    /// when osrelease is unreadable, since an always-0 dummy must not pass for a count.
    pub fn dentry_state(&mut self) -> Result<DentryState, ReadError> {
        if self.kernel.is_none() {
            match self.kernel_version() {
                Ok(_) => {}
                Err(e) if e.is_missing() => self.kernel = Some(None),
                Err(e) => return Err(e),
            }
        }
        let has_nr_negative = matches!(self.kernel, Some(Some(k)) if k >= NR_NEGATIVE_SINCE);
        self.read("/proc/sys/fs/dentry-state", |b| {
            parse_dentry_state(b, has_nr_negative)
        })
    }

    /// /proc/interrupts.
    pub fn interrupts(&mut self) -> Result<Interrupts, ReadError> {
        self.read("/proc/interrupts", parse_interrupts)
    }

    /// /proc/softirqs.
    pub fn softirqs(&mut self) -> Result<Softirqs, ReadError> {
        self.read("/proc/softirqs", parse_softirqs)
    }

    /// /proc/diskstats.
    pub fn diskstats(&mut self) -> Result<DiskStats, ReadError> {
        self.read("/proc/diskstats", parse_diskstats)
    }

    /// /proc/net/dev (of the reader's network namespace).
    pub fn net_dev(&mut self) -> Result<NetDevs, ReadError> {
        self.read("/proc/net/dev", parse_net_dev)
    }

    /// /proc/pressure/`resource`.
    pub fn pressure(&mut self, resource: PressureResource) -> Result<Pressure, ReadError> {
        let path = self.root.path("/proc/pressure").join(resource.name());
        self.held.read_parse(&path, &mut self.buf, parse_pressure)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture_root(rel: &str) -> Root {
        Root::new(
            std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures"))
                .join(rel),
        )
    }

    #[test]
    fn reads_everything_from_the_captured_host() {
        let mut r = SystemReader::new(fixture_root("host"));
        assert_eq!(r.kernel_version().unwrap(), KernelVersion::new(6, 18, 44));
        assert_eq!(r.stat().unwrap().cpus.len(), 2);
        assert_eq!(r.loadavg().unwrap().threads, 79);
        assert!(r.vmstat().unwrap().get("pgmajfault").is_some());
        assert!(r.meminfo().unwrap().bytes("MemTotal").is_some());
        assert!(r.zoneinfo().unwrap().get(0, "Normal").is_some());
        assert_eq!(r.buddyinfo().unwrap().zones.len(), 3);
        assert!(r.slabinfo().unwrap().get("dentry").is_some());
        assert_eq!(r.dentry_state().unwrap().nr_negative, Some(8890));
        assert!(r.interrupts().unwrap().tlb_shootdowns().is_some());
        assert_eq!(r.softirqs().unwrap().types.len(), 10);
        assert!(r.diskstats().unwrap().get("vda").is_some());
        assert!(r.net_dev().unwrap().get("eth0").is_some());
        for res in [
            PressureResource::Cpu,
            PressureResource::Memory,
            PressureResource::Io,
        ] {
            let p = r.pressure(res).unwrap();
            assert!(p.some.is_some(), "{}", res.name());
        }
        // This kernel has PSI but no IRQ time accounting, hence no irq file.
        assert!(r.pressure(PressureResource::Irq).unwrap_err().is_missing());
    }

    #[test]
    fn missing_pressure_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("proc")).unwrap();
        let mut r = SystemReader::new(Root::new(dir.path()));
        let e = r.pressure(PressureResource::Cpu).unwrap_err();
        assert!(e.is_missing(), "{e}");
        assert!(e.path().ends_with("proc/pressure/cpu"));
        assert!(crate::fileio::optional(r.pressure(PressureResource::Io))
            .unwrap()
            .is_none());
    }

    #[test]
    fn dentry_state_before_5_0_has_no_negative_count() {
        let mut r = SystemReader::new(fixture_root("edge/dentry-4.19"));
        assert_eq!(r.kernel_version().unwrap(), KernelVersion::new(4, 19, 0));
        let d = r.dentry_state().unwrap();
        assert_eq!(d.nr_dentry, 193741);
        assert_eq!(d.nr_negative, None);
    }

    #[test]
    fn dentry_state_without_osrelease_does_not_trust_the_fifth_field() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("proc/sys/fs")).unwrap();
        std::fs::write(
            dir.path().join("proc/sys/fs/dentry-state"),
            "5 4 45 0 3 0\n",
        )
        .unwrap();
        let mut r = SystemReader::new(Root::new(dir.path()));
        let d = r.dentry_state().unwrap();
        assert_eq!((d.nr_dentry, d.nr_negative), (5, None));
    }

    #[test]
    fn parse_errors_carry_the_path() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("proc")).unwrap();
        std::fs::write(
            dir.path().join("proc/slabinfo"),
            "slabinfo - version: 3.0\n",
        )
        .unwrap();
        let mut r = SystemReader::new(Root::new(dir.path()));
        let e = r.slabinfo().unwrap_err();
        assert!(!e.is_missing());
        assert!(e.to_string().contains("proc/slabinfo"), "{e}");
        assert!(
            e.to_string().contains("unsupported slabinfo version"),
            "{e}"
        );
    }
}
