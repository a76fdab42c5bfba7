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
    /// The graph conditions kernels set (`cudaGraphSetConditional`), in order.
    conditions: Vec<(u64, bool)>,
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

    /// Every graph condition a kernel set (`cudaGraphSetConditional`), `(handle, value)` in
    /// the order they were set.
    pub fn graph_conditions(&self) -> &[(u64, bool)] {
        &self.conditions
    }

    /// Records a graph condition set by a kernel.
    pub(crate) fn set_condition(&mut self, handle: u64, value: bool) {
        self.conditions.push((handle, value));
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
        self.slice_aligned(addr, len, len)
    }

    /// The `len` bytes at `addr`, which must be a multiple of `align`, or why they are not
    /// addressable.
    pub(crate) fn slice_aligned(&mut self, addr: u64, len: u32, align: u32) -> Result<&mut [u8], String> {
        check_align(addr, align)?;
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

/// A block's shared memory, and which of its bytes a `cp.async` still in flight will write.
pub(crate) struct Shared {
    bytes: Vec<u8>,
    /// Per byte: how many pending `cp.async` copies write it, and the PTX line of the latest
    /// issued (empty until the block's first `cp.async`).
    inflight: Vec<(u32, u32)>,
}

impl Shared {
    /// `size` bytes, all `0xFF` (so that reads of unwritten shared memory show as NaN).
    pub(crate) fn new(size: u32) -> Shared {
        Shared {
            bytes: vec![0xFF; size as usize],
            inflight: vec![],
        }
    }

    /// Back to all `0xFF`, nothing in flight, for the next block.
    pub(crate) fn reset(&mut self) {
        self.bytes.fill(0xFF);
        self.inflight.fill((0, 0));
    }

    /// The byte range of `len` bytes at `addr`, or why they are not addressable.
    fn range(&self, addr: u64, len: u32) -> Result<std::ops::Range<usize>, String> {
        check_align(addr, len)?;
        let size = self.bytes.len() as u64;
        match addr.checked_add(len as u64) {
            Some(end) if end <= size => Ok(addr as usize..end as usize),
            _ => Err(format!("outside the block's {size} bytes of shared memory")),
        }
    }

    /// The `len` bytes at `addr` to write, or why they are not addressable.
    pub(crate) fn slice(&mut self, addr: u64, len: u32) -> Result<&mut [u8], String> {
        let r = self.range(addr, len)?;
        Ok(&mut self.bytes[r])
    }

    /// The `len` bytes at `addr` to read, or why they are not addressable or not readable yet
    /// (a pending `cp.async` writes one of them).
    pub(crate) fn read(&self, addr: u64, len: u32) -> Result<&[u8], String> {
        let r = self.range(addr, len)?;
        let pending = self.inflight.get(r.clone()).unwrap_or(&[]);
        if let Some(k) = pending.iter().position(|&(n, _)| n > 0) {
            return Err(format!(
                "shared memory read of bytes with a cp.async still in flight: byte {:#x} is written by the \
                 cp.async of PTX line {}, which no cp.async.wait_group/wait_all of its thread has completed",
                r.start + k,
                pending[k].1
            ));
        }
        Ok(&self.bytes[r])
    }

    /// Marks the `len` bytes at `addr` as the destination of a pending `cp.async` of PTX
    /// `line`, or says why they are not addressable.
    pub(crate) fn issue(&mut self, addr: u64, len: u32, line: usize) -> Result<(), String> {
        let r = self.range(addr, len)?;
        if self.inflight.is_empty() {
            self.inflight = vec![(0, 0); self.bytes.len()];
        }
        for f in &mut self.inflight[r] {
            *f = (f.0 + 1, line as u32);
        }
        Ok(())
    }

    /// Completes a pending copy issued to `addr`: writes `data` there and unmarks it.
    pub(crate) fn land(&mut self, addr: u64, data: &[u8]) {
        let r = addr as usize..addr as usize + data.len();
        self.bytes[r.clone()].copy_from_slice(data);
        for f in &mut self.inflight[r] {
            f.0 -= 1;
        }
    }
}

fn check_align(addr: u64, align: u32) -> Result<(), String> {
    if !addr.is_multiple_of(align as u64) {
        return Err(format!(
            "misaligned (a {align}-byte access needs {align}-byte alignment)"
        ));
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
