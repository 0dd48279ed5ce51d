//! Compiles each `src/bpf/<tracer>.bpf.c` with clang and generates its libbpf-rs skeleton.

use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

const TRACERS: &[&str] = &[
    "reclaim", "shrinker", "tlb", "madvise", "runqlat", "lookups",
];

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
    println!("cargo:rerun-if-changed=src/bpf/jitterscope.h");
    for t in TRACERS {
        let src = format!("src/bpf/{t}.bpf.c");
        println!("cargo:rerun-if-changed={src}");
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
