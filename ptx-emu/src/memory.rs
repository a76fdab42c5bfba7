//! Global and shared memory with bounds and alignment checks (a CPU memcheck).
//!
//! Global buffer `i` lives at the fake device address `(i + 1) << 40`; an address belongs to
//! the buffer its top bits name, and an access must lie inside that buffer's bytes. Shared
//! addresses are offsets into the block's declared shared memory.

/// Bits of a global address that are the offset inside its buffer.
const OFFSET_BITS: u32 = 40;

/// A buffer of [`Global`] memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BufferId(pub usize);

impl BufferId {
    /// The device address of the buffer's first byte.
    pub fn address(self) -> u64 {
        (self.0 as u64 + 1) << OFFSET_BITS
    }
}

/// Global memory: host byte buffers the kernels address through fake device pointers.
#[derive(Clone, Debug, Default)]
pub struct Global {
    buffers: Vec<Vec<u8>>,
}

impl Global {
    /// No buffers.
    pub fn new() -> Global {
        Global::default()
    }

    /// Adds a buffer holding `bytes`.
    pub fn alloc(&mut self, bytes: Vec<u8>) -> BufferId {
        self.buffers.push(bytes);
        BufferId(self.buffers.len() - 1)
    }

    /// A buffer's bytes.
    pub fn bytes(&self, id: BufferId) -> &[u8] {
        &self.buffers[id.0]
    }

    /// A buffer's bytes, writable.
    pub fn bytes_mut(&mut self, id: BufferId) -> &mut [u8] {
        &mut self.buffers[id.0]
    }

    /// Takes a buffer's bytes out, leaving it empty.
    pub fn take(&mut self, id: BufferId) -> Vec<u8> {
        std::mem::take(&mut self.buffers[id.0])
    }

    /// The `len` bytes at `addr`, or why they are not addressable.
    pub(crate) fn slice(&mut self, addr: u64, len: u32) -> Result<&mut [u8], String> {
        check_align(addr, len)?;
        let idx = (addr >> OFFSET_BITS) as usize;
        let off = addr & ((1u64 << OFFSET_BITS) - 1);
        let n = self.buffers.len();
        let buf = idx
            .checked_sub(1)
            .and_then(|i| self.buffers.get_mut(i))
            .ok_or_else(|| format!("not inside any buffer ({n} buffers, at (i+1)<<{OFFSET_BITS})"))?;
        let size = buf.len();
        let end = off + len as u64;
        if end > size as u64 {
            return Err(format!(
                "out of bounds of buffer {} ({size} bytes): offset {off}",
                idx - 1
            ));
        }
        Ok(&mut buf[off as usize..end as usize])
    }
}

/// A block's shared memory.
pub(crate) struct Shared {
    bytes: Vec<u8>,
}

impl Shared {
    /// `size` bytes, all `0xFF` (so that reads of unwritten shared memory show as NaN).
    pub(crate) fn new(size: u32) -> Shared {
        Shared {
            bytes: vec![0xFF; size as usize],
        }
    }

    /// Back to all `0xFF` for the next block.
    pub(crate) fn reset(&mut self) {
        self.bytes.fill(0xFF);
    }

    /// The `len` bytes at `addr`, or why they are not addressable.
    pub(crate) fn slice(&mut self, addr: u64, len: u32) -> Result<&mut [u8], String> {
        check_align(addr, len)?;
        let size = self.bytes.len() as u64;
        match addr.checked_add(len as u64) {
            Some(end) if end <= size => Ok(&mut self.bytes[addr as usize..end as usize]),
            _ => Err(format!("outside the block's {size} bytes of shared memory")),
        }
    }
}

fn check_align(addr: u64, len: u32) -> Result<(), String> {
    if !addr.is_multiple_of(len as u64) {
        return Err(format!("misaligned (a {len}-byte access needs {len}-byte alignment)"));
    }
    Ok(())
}

/// Little-endian bytes to an integer.
#[inline(always)]
pub(crate) fn read_le(b: &[u8]) -> u64 {
    let mut v = [0u8; 8];
    v[..b.len()].copy_from_slice(b);
    u64::from_le_bytes(v)
}

/// The low `b.len()` bytes of `v`, little-endian, into `b`.
#[inline(always)]
pub(crate) fn write_le(b: &mut [u8], v: u64) {
    let n = b.len();
    b.copy_from_slice(&v.to_le_bytes()[..n]);
}
