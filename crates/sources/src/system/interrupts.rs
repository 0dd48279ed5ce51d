//! /proc/interrupts: every interrupt source with its count per CPU, including the IPIs that
//! matter for jitter (TLB shootdowns, function-call interrupts, rescheduling).

use serde::{Deserialize, Serialize};

use crate::fileio::{fields, lines, lossy, parse_u64, ParseError};

/// One line: `TLB:   6733   6979   TLB shootdowns`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Irq {
    /// The name before the colon: an IRQ number (`24`) or a mnemonic (`NMI`, `LOC`, `TLB`).
    pub name: String,
    /// Counts per CPU, aligned with [`Interrupts::cpus`]; empty for lines that the kernel
    /// prints with a single system-wide count (`ERR`, `MIS`).
    pub per_cpu: Vec<u64>,
    /// The sum over CPUs (or the single count of `ERR`/`MIS`).
    pub total: u64,
    /// What follows the counts: controller, trigger and device for numbered IRQs, a text for
    /// the named ones (`TLB shootdowns`). Empty when absent.
    pub description: String,
}

/// The parsed file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Interrupts {
    /// The CPU ids of the columns, from the header. Only online CPUs have a column, so ids can
    /// skip (`[0, 2, 3]` with CPU 1 offline).
    pub cpus: Vec<u32>,
    /// Every line, in file order.
    pub irqs: Vec<Irq>,
}

impl Interrupts {
    /// The line named `name` (`"TLB"`, `"24"`).
    pub fn get(&self, name: &str) -> Option<&Irq> {
        self.irqs.iter().find(|i| i.name == name)
    }

    /// `(cpu id, count)` of a line; `None` when absent or only a total is reported.
    pub fn per_cpu(&self, name: &str) -> Option<Vec<(u32, u64)>> {
        let irq = self.get(name)?;
        if irq.per_cpu.is_empty() {
            return None;
        }
        Some(
            self.cpus
                .iter()
                .copied()
                .zip(irq.per_cpu.iter().copied())
                .collect(),
        )
    }

    /// x86 `TLB` line: TLB shootdown IPIs received per CPU. Other architectures have no such
    /// IPI (arm64 broadcasts TLB invalidations in hardware), so this is `None` there.
    pub fn tlb_shootdowns(&self) -> Option<&Irq> {
        self.get("TLB")
    }

    /// Function-call IPIs (`smp_call_function`): `CAL` on x86, the `IPIn` line described as
    /// "Function call interrupts" on arm/arm64.
    pub fn function_calls(&self) -> Option<&Irq> {
        self.get("CAL").or_else(|| {
            self.irqs
                .iter()
                .find(|i| i.description == "Function call interrupts")
        })
    }

    /// TLB shootdowns per CPU as `(cpu id, count)`.
    pub fn tlb_per_cpu(&self) -> Option<Vec<(u32, u64)>> {
        self.per_cpu(&self.tlb_shootdowns()?.name)
    }

    /// Function-call IPIs per CPU as `(cpu id, count)`.
    pub fn function_calls_per_cpu(&self) -> Option<Vec<(u32, u64)>> {
        self.per_cpu(&self.function_calls()?.name)
    }
}

/// Parses /proc/interrupts.
pub fn parse_interrupts(buf: &[u8]) -> Result<Interrupts, ParseError> {
    let mut ls = lines(buf);
    let (hn, header) = ls
        .next()
        .ok_or_else(|| ParseError::new(0, "empty interrupts file"))?;
    let cpus = super::parse_cpu_header(header, hn)?;
    let mut irqs = Vec::with_capacity(64);
    for (n, l) in ls {
        let (name, rest) =
            super::split_colon(l).ok_or_else(|| ParseError::new(n, "expected `NAME:`"))?;
        if name.is_empty() {
            return Err(ParseError::new(n, "empty interrupt name"));
        }
        let mut per_cpu = Vec::with_capacity(cpus.len());
        let mut rest = rest;
        // The counts are the first columns; the description can itself contain numbers
        // (`GICv3  27 Level  arch_timer`), so no more than one count per CPU is taken.
        while per_cpu.len() < cpus.len() {
            let t = trim_start(rest);
            let end = t
                .iter()
                .position(|c| c.is_ascii_whitespace())
                .unwrap_or(t.len());
            let tok = &t[..end];
            if tok.is_empty() || !tok.iter().all(u8::is_ascii_digit) {
                break;
            }
            per_cpu.push(parse_u64(tok, n, "count")?);
            rest = &t[end..];
        }
        let total = match per_cpu.len() {
            0 => return Err(ParseError::new(n, "interrupt line without counts")),
            k if k == cpus.len() => per_cpu.iter().fold(0u64, |a, &b| a.wrapping_add(b)),
            1 => per_cpu.pop().unwrap_or_default(),
            _ => {
                return Err(ParseError::new(
                    n,
                    format!("{} counts for {} CPUs", per_cpu.len(), cpus.len()),
                ))
            }
        };
        irqs.push(Irq {
            name: lossy(name),
            per_cpu,
            total,
            description: squeeze_spaces(rest),
        });
    }
    Ok(Interrupts { cpus, irqs })
}

/// The description with column padding collapsed to single spaces, so it compares as text.
fn squeeze_spaces(s: &[u8]) -> String {
    let mut out = String::with_capacity(s.len());
    for f in fields(s) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&String::from_utf8_lossy(f));
    }
    out
}

fn trim_start(s: &[u8]) -> &[u8] {
    let i = s
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(s.len());
    &s[i..]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::fixtures;

    #[test]
    fn parses_captured_interrupts() {
        let i = parse_interrupts(&fixtures::read("host/proc/interrupts")).unwrap();
        assert_eq!(i.cpus, [0, 1]);
        let tlb = i.tlb_shootdowns().unwrap();
        assert_eq!(tlb.per_cpu, [6733, 6979]);
        assert_eq!(tlb.total, 6733 + 6979);
        assert_eq!(tlb.description, "TLB shootdowns");
        assert_eq!(i.tlb_per_cpu().unwrap(), [(0, 6733), (1, 6979)]);
        assert_eq!(i.function_calls().unwrap().total, 33029 + 26054);
        assert_eq!(
            i.function_calls_per_cpu().unwrap(),
            [(0, 33029), (1, 26054)]
        );
        let err = i.get("ERR").unwrap();
        assert!(err.per_cpu.is_empty());
        assert_eq!(err.total, 0);
        assert_eq!(i.per_cpu("ERR"), None);
        let d = i.get("36").unwrap();
        assert_eq!(d.per_cpu, [0, 31314]);
        assert_eq!(d.description, "PCI-MSIX-0000:00:02.0 1-edge virtio1-req.0");
        assert_eq!(i.irqs.len(), 35);
    }

    #[test]
    fn offline_cpu_has_no_column() {
        let i = parse_interrupts(&fixtures::read("edge/interrupts-offline-cpu")).unwrap();
        assert_eq!(i.cpus, [0, 2, 3]);
        assert_eq!(i.tlb_per_cpu().unwrap(), [(0, 10), (2, 30), (3, 40)]);
        assert_eq!(i.get("MIS").unwrap().total, 3);
    }

    #[test]
    fn arm64_function_call_ipi_and_numeric_description() {
        let i = parse_interrupts(&fixtures::read("edge/interrupts-arm64")).unwrap();
        assert_eq!(i.cpus, [0, 1]);
        let t = i.get("11").unwrap();
        assert_eq!(t.per_cpu, [2166, 1822]);
        assert_eq!(t.description, "GICv3 27 Level arch_timer");
        assert_eq!(i.function_calls().unwrap().name, "IPI1");
        assert_eq!(i.function_calls_per_cpu().unwrap(), [(0, 2450), (1, 1926)]);
        assert!(i.tlb_shootdowns().is_none());
        assert_eq!(i.get("Err").unwrap().total, 0);
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_interrupts(b"").is_err());
        assert!(parse_interrupts(b"   CPU0 CPU1\nTLB: x y\n").is_err());
        assert!(parse_interrupts(b"   CPU0 CPU1 CPU2\nTLB: 1 2 TLB\n").is_err());
        assert!(parse_interrupts(b"   CPUx\n").is_err());
        assert!(parse_interrupts(b"   CPU0\nno colon 1\n").is_err());
    }
}
