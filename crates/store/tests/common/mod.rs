//! Helpers shared by the store's integration tests.

/// Bytes zstd cannot compress: distinct seeds give unrelated streams (splitmix64), so zstd
/// finds nothing to share between payloads either.
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    (0..len.div_ceil(8) as u64)
        .flat_map(|i| {
            let mut z = seed
                .wrapping_add(i.wrapping_add(1).wrapping_mul(0x9E3779B97F4A7C15))
                .wrapping_add(seed.rotate_left(29));
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
            (z ^ (z >> 31)).to_le_bytes()
        })
        .take(len)
        .collect()
}
