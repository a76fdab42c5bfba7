//! Host buffers that interpreted kernels read and write.

use crate::host::{slice_from_bytes, slice_to_bytes, HostElem};
use crate::types::Elem;
use std::fmt;

/// A buffer allocated in a [`Memory`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufferId(pub u32);

impl fmt::Display for BufferId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// One buffer: `len` elements of `elem`, stored little-endian exactly as on the GPU.
#[derive(Clone, Debug)]
pub(crate) struct Buffer {
    pub(crate) elem: Elem,
    pub(crate) len: usize,
    pub(crate) bytes: Vec<u8>,
}

/// The interpreter's global memory: a set of typed host buffers.
///
/// Host-side accessors panic on misuse (unknown buffer, wrong element type, wrong length): those
/// are bugs of the calling test, not of the kernel. Kernel accesses never panic; they are
/// checked by [`crate::interp::run`] and reported as [`crate::interp::InterpError`]s.
#[derive(Clone, Debug, Default)]
pub struct Memory {
    pub(crate) bufs: Vec<Buffer>,
    /// The graph conditions kernels set ([`crate::ir::Op::SetCondition`]), in order.
    pub(crate) conditions: Vec<(i64, bool)>,
}

impl Memory {
    /// An empty memory.
    pub fn new() -> Memory {
        Memory::default()
    }

    /// Every graph condition a kernel set, `(handle, value)` in the order they were set (on a
    /// GPU, the value a conditional node reads is the last one set before it).
    pub fn graph_conditions(&self) -> &[(i64, bool)] {
        &self.conditions
    }

    /// Allocates a buffer holding a copy of `data`.
    pub fn alloc<T: HostElem>(&mut self, data: &[T]) -> BufferId {
        self.push(Buffer {
            elem: T::ELEM,
            len: data.len(),
            bytes: slice_to_bytes(data),
        })
    }

    /// Allocates `len` zeroed elements of `T`.
    pub fn alloc_zeroed<T: HostElem>(&mut self, len: usize) -> BufferId {
        self.alloc_elem(T::ELEM, len)
    }

    /// Allocates `len` zeroed elements of `elem`.
    pub fn alloc_elem(&mut self, elem: Elem, len: usize) -> BufferId {
        self.push(Buffer {
            elem,
            len,
            bytes: vec![0; len * elem.bytes()],
        })
    }

    /// Allocates a buffer of `elem` from its little-endian bytes (the length must be a multiple
    /// of the element size).
    pub fn alloc_bytes(&mut self, elem: Elem, bytes: Vec<u8>) -> BufferId {
        assert!(
            bytes.len().is_multiple_of(elem.bytes()),
            "{} bytes is not a whole number of {elem}",
            bytes.len()
        );
        self.push(Buffer {
            elem,
            len: bytes.len() / elem.bytes(),
            bytes,
        })
    }

    fn push(&mut self, b: Buffer) -> BufferId {
        self.bufs.push(b);
        BufferId((self.bufs.len() - 1) as u32)
    }

    fn buf(&self, id: BufferId) -> &Buffer {
        self.bufs
            .get(id.0 as usize)
            .unwrap_or_else(|| panic!("unknown buffer {id}"))
    }

    /// The contents of a buffer of `T` (panics if the buffer holds another element type).
    pub fn read<T: HostElem>(&self, id: BufferId) -> Vec<T> {
        let b = self.buf(id);
        assert_eq!(b.elem, T::ELEM, "buffer {id} holds {}, read as {}", b.elem, T::ELEM);
        slice_from_bytes(&b.bytes)
    }

    /// Overwrites a whole buffer of `T` (panics on another element type or length).
    pub fn write<T: HostElem>(&mut self, id: BufferId, data: &[T]) {
        let b = self
            .bufs
            .get_mut(id.0 as usize)
            .unwrap_or_else(|| panic!("unknown buffer {id}"));
        assert_eq!(b.elem, T::ELEM, "buffer {id} holds {}, written as {}", b.elem, T::ELEM);
        assert_eq!(
            b.len,
            data.len(),
            "buffer {id} has {} elements, written with {}",
            b.len,
            data.len()
        );
        b.bytes = slice_to_bytes(data);
    }

    /// Number of elements of a buffer.
    pub fn len(&self, id: BufferId) -> usize {
        self.buf(id).len
    }

    /// Element type of a buffer.
    pub fn elem(&self, id: BufferId) -> Elem {
        self.buf(id).elem
    }

    /// The raw little-endian bytes of a buffer.
    pub fn bytes(&self, id: BufferId) -> &[u8] {
        &self.buf(id).bytes
    }

    /// Number of buffers allocated.
    pub fn num_buffers(&self) -> usize {
        self.bufs.len()
    }

    /// True if `id` names a buffer of this memory.
    pub fn contains(&self, id: BufferId) -> bool {
        (id.0 as usize) < self.bufs.len()
    }
}
