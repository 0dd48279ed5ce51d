//! Copies the browser libraries of the web UI (installed by npm into `web/node_modules` from
//! `web/package-lock.json`; `scripts/setup.sh` runs `npm ci`) into OUT_DIR, where
//! `src/assets.rs` embeds them: `serve` needs no files at run time.

use std::path::PathBuf;

const FILES: &[(&str, &str)] = &[
    ("uplot/dist/uPlot.iife.min.js", "uPlot.iife.min.js"),
    ("uplot/dist/uPlot.min.css", "uPlot.min.css"),
    (
        "d3-flame-graph/dist/d3-flamegraph.min.js",
        "d3-flamegraph.min.js",
    ),
    ("d3-flame-graph/dist/d3-flamegraph.css", "d3-flamegraph.css"),
    (
        "d3-selection/dist/d3-selection.min.js",
        "d3-selection.min.js",
    ),
];

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("../../web");
    let modules = root.join("node_modules");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    println!(
        "cargo:rerun-if-changed={}",
        root.join("package-lock.json").display()
    );
    for (src, dst) in FILES {
        let from = modules.join(src);
        println!("cargo:rerun-if-changed={}", from.display());
        if let Err(e) = std::fs::copy(&from, out.join(dst)) {
            panic!(
                "{}: {e}. The web UI's libraries come from npm: run `bash scripts/setup.sh` \
                 (or `npm ci --prefix web`) first",
                from.display()
            );
        }
    }
}
