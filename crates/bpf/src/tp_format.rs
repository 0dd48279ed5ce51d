//! Tracepoint record formats (`/sys/kernel/tracing/events/<cat>/<event>/format`) and the check
//! that the record layouts our BPF programs were compiled with match the running kernel's.
//!
//! Classic tracepoint programs read the raw record at fixed offsets; if a kernel moved a field,
//! they would silently read garbage. Checking each field's offset and size against the format
//! file at load turns that into a one-line refusal naming the field.

use std::path::Path;

/// One field of a record: `field:unsigned long pages;\toffset:16;\tsize:8;\tsigned:0;`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// Field name (the last identifier of the declaration, without array brackets).
    pub name: String,
    /// Byte offset in the record.
    pub offset: usize,
    /// Byte size.
    pub size: usize,
}

/// Parses a format file's `field:` lines; lines that do not parse are skipped.
pub fn parse_format(text: &str) -> Vec<Field> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        let Some(rest) = line.strip_prefix("field:") else {
            continue;
        };
        let mut decl = None;
        let mut offset = None;
        let mut size = None;
        for part in rest.split(';') {
            let part = part.trim();
            if let Some(v) = part.strip_prefix("offset:") {
                offset = v.trim().parse().ok();
            } else if let Some(v) = part.strip_prefix("size:") {
                size = v.trim().parse().ok();
            } else if decl.is_none() && !part.is_empty() && !part.starts_with("signed:") {
                decl = Some(part);
            }
        }
        let (Some(decl), Some(offset), Some(size)) = (decl, offset, size) else {
            continue;
        };
        // `char comm[16]` -> comm; `__data_loc cpumask_t cpumask` -> cpumask.
        let last = decl.split_whitespace().last().unwrap_or("");
        let name = last.split('[').next().unwrap_or("").trim_start_matches('*');
        if name.is_empty() {
            continue;
        }
        out.push(Field {
            name: name.to_string(),
            offset,
            size,
        });
    }
    out
}

/// The fields one program reads from one tracepoint: (format name, our offset, our size).
#[derive(Debug, Clone)]
pub struct Record {
    /// `category/event`.
    pub event: String,
    /// What the program reads.
    pub fields: Vec<(&'static str, usize, usize)>,
}

/// The size of a struct field, for [`Record`] tables built with `offset_of!`.
pub fn size_of_field<T, F>(_: fn(&T) -> &F) -> usize {
    std::mem::size_of::<F>()
}

/// `(format name, offset, size)` of field `$f` of skeleton type `$t`.
macro_rules! field {
    ($t:ty, $f:ident, $name:literal) => {
        (
            $name,
            std::mem::offset_of!($t, $f),
            $crate::tp_format::size_of_field(|x: &$t| &x.$f),
        )
    };
}
pub(crate) use field;

/// Checks every record whose format file exists under `tracefs` (a missing event is reported
/// by the caller's existence check, not here).
pub fn check(tracefs: &Path, records: &[Record]) -> Result<(), String> {
    for r in records {
        let path = tracefs.join("events").join(&r.event).join("format");
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let fields = parse_format(&text);
        let ev = r.event.replacen('/', ":", 1);
        for &(name, offset, size) in &r.fields {
            let Some(f) = fields.iter().find(|f| f.name == name) else {
                return Err(format!(
                    "tracepoint {ev} has no field '{name}' on this kernel (its record layout changed)"
                ));
            };
            if f.offset != offset || f.size != size {
                return Err(format!(
                    "tracepoint {ev}: field '{name}' is at offset {} size {} on this kernel, the tracer reads offset {offset} size {size}",
                    f.offset, f.size
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TLB: &str = "name: tlb_flush\nID: 511\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:int reason;\toffset:8;\tsize:4;\tsigned:1;\n\tfield:unsigned long pages;\toffset:16;\tsize:8;\tsigned:0;\n\nprint fmt: \"pages:%ld reason:%s (%d)\"\n";

    #[test]
    fn parses_fields_arrays_and_data_loc() {
        let f = parse_format(TLB);
        assert_eq!(f.len(), 3);
        assert_eq!(
            f[1],
            Field {
                name: "reason".into(),
                offset: 8,
                size: 4
            }
        );
        let f = parse_format("\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\tfield:__data_loc cpumask_t cpumask;\toffset:8;\tsize:4;\tsigned:0;\n\tfield:struct shrinker * shr;\toffset:8;\tsize:8;\tsigned:0;\n");
        let names: Vec<_> = f.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["prev_comm", "cpumask", "shr"]);
    }

    #[test]
    fn check_names_the_moved_field() {
        let dir = tempfile_dir();
        let ev = dir.join("events/tlb/tlb_flush");
        std::fs::create_dir_all(&ev).unwrap();
        std::fs::write(ev.join("format"), TLB).unwrap();
        let ok = Record {
            event: "tlb/tlb_flush".into(),
            fields: vec![("reason", 8, 4), ("pages", 16, 8)],
        };
        assert_eq!(check(&dir, &[ok]), Ok(()));
        let moved = Record {
            event: "tlb/tlb_flush".into(),
            fields: vec![("reason", 12, 4)],
        };
        let e = check(&dir, &[moved]).unwrap_err();
        assert!(
            e.contains("tlb:tlb_flush: field 'reason' is at offset 8 size 4")
                && e.contains("reads offset 12"),
            "{e}"
        );
        let gone = Record {
            event: "tlb/tlb_flush".into(),
            fields: vec![("cpu", 8, 4)],
        };
        assert!(check(&dir, &[gone]).unwrap_err().contains("no field 'cpu'"));
        let absent = Record {
            event: "tlb/nope".into(),
            fields: vec![("x", 0, 1)],
        };
        assert_eq!(check(&dir, &[absent]), Ok(()));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!(
            "js-format-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    proptest::proptest! {
        #[test]
        fn never_panics_on_garbage(s in ".*") {
            let _ = parse_format(&s);
        }

        #[test]
        fn never_panics_on_field_like_lines(name in "[a-z_ *\\[\\]0-9]{0,20}", o in ".{0,6}", z in ".{0,6}") {
            let _ = parse_format(&format!("field:{name};\toffset:{o};\tsize:{z};\tsigned:0;"));
        }
    }
}
