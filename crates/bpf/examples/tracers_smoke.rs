//! Loads every tracer, waits, and prints one interval as JSON-ish debug output.
fn main() {
    let (mut c, started) = jitterscope_bpf::TracerCollector::start(
        &jitterscope_sources::Root::new("/"),
        &jitterscope_bpf::Name::all().collect::<Vec<_>>(),
    );
    for s in &started {
        println!("{:?} {:?} {}", s.name, s.outcome, s.map_bytes);
    }
    let t0 = std::time::Instant::now();
    c.read(t0.elapsed().as_nanos() as u64);
    std::thread::sleep(std::time::Duration::from_secs(2));
    let t = c.read(t0.elapsed().as_nanos() as u64);
    println!("{t:#?}");
}
