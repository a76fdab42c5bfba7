//! Host element types that buffers hold — [`HostElem`] from `replay_dsl::host`, shared with
//! the interpreter — and their slice encodings.

pub use replay_dsl::host::HostElem;

/// The little-endian bytes of `values`, as device memory holds them.
pub fn encode<T: HostElem>(values: &[T]) -> Vec<u8> {
    replay_dsl::host::slice_to_bytes(values)
}

/// The values encoded in `bytes` (whose length must be a multiple of the element size).
pub fn decode<T: HostElem>(bytes: &[u8]) -> Vec<T> {
    replay_dsl::host::slice_from_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        assert_eq!(decode::<f32>(&encode(&[1.5f32, -2.0])), vec![1.5, -2.0]);
        assert_eq!(decode::<i64>(&encode(&[i64::MIN, 7])), vec![i64::MIN, 7]);
        assert_eq!(decode::<bool>(&encode(&[true, false])), vec![true, false]);
        assert_eq!(encode(&[1u32]).len(), 4);
    }
}
