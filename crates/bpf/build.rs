//! Compiles each `src/bpf/<tracer>.bpf.c` with clang and generates its libbpf-rs skeleton
//! (`<tracer>.skel.rs` in OUT_DIR, which the tracer's module includes).

use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    let arch = match env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("x86_64") => "x86",
        Ok("aarch64") => "arm64",
        Ok("riscv64") => "riscv",
        Ok("powerpc64") => "powerpc",
        Ok("s390x") => "s390",
        Ok(other) => panic!("jitterscope-bpf: no BPF target arch for {other}"),
        Err(e) => panic!("jitterscope-bpf: CARGO_CFG_TARGET_ARCH: {e}"),
    };
    // The directory, not only its files: a new program must rerun this script.
    println!("cargo:rerun-if-changed=src/bpf");
    // Every program found, so that adding a tracer needs no list here.
    let mut tracers: Vec<String> = std::fs::read_dir("src/bpf")
        .unwrap_or_else(|e| panic!("jitterscope-bpf: reading src/bpf: {e}"))
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            Some(name.strip_suffix(".bpf.c")?.to_string())
        })
        .collect();
    tracers.sort_unstable();
    assert!(!tracers.is_empty(), "jitterscope-bpf: no src/bpf/*.bpf.c");
    for t in &tracers {
        let src = format!("src/bpf/{t}.bpf.c");
        SkeletonBuilder::new()
            .source(&src)
            .clang_args([
                format!("-D__TARGET_ARCH_{arch}"),
                "-Wall".into(),
                "-Werror".into(),
            ])
            .build_and_generate(out.join(format!("{t}.skel.rs")))
            .unwrap_or_else(|e| panic!("jitterscope-bpf: building {src}: {e:#}"));
    }
}
