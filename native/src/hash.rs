//! A hash map of integer keys for the per-record machines (URB ids, device numbers): one
//! multiply per key instead of std's SipHash, no hashing crate. The high half of the product
//! is folded into the low bits, which pick the bucket: URB ids are kernel addresses, whose
//! low bits are zero.
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// The one multiply every integer hash of the core is made of (this map's hasher, and
/// bus/keys.rs's open-addressing table, which takes the high half).
#[inline(always)]
pub(crate) fn mix(v: u64) -> u64 {
    v.wrapping_mul(GOLDEN)
}

#[derive(Default)]
pub(crate) struct IntHasher(u64);

impl Hasher for IntHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 32)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = mix(self.0.rotate_left(8) ^ b as u64);
        }
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.0 = mix(v ^ self.0.rotate_left(5));
    }
    #[inline]
    fn write_i64(&mut self, v: i64) {
        self.write_u64(v as u64)
    }
}

pub(crate) type IntMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;
