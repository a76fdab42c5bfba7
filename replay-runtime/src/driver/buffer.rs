//! Device memory: [`DeviceBuffer<T>`] knows its element type and length; [`RawBuffer`] is the
//! same memory with the type erased (the tuner generates inputs for any kernel with it).

use super::device::{Device, DeviceKind};
use super::stream::Stream;
use crate::elem::{self, HostElem};
use crate::error::{Result, RuntimeError};
use cudarc::driver::{result, sys};
use replay_dsl::Elem;
use std::marker::PhantomData;
use std::sync::Mutex;

pub(crate) enum Storage {
    /// `cuMemAlloc`ed memory (`ptr == 0` for an empty buffer).
    Cuda { ptr: sys::CUdeviceptr },
    /// Host memory standing in for device memory (interpreter).
    Host(Mutex<Vec<u8>>),
}

/// Device memory holding `len` elements of type `elem`, type-erased.
pub struct RawBuffer {
    pub(crate) device: Device,
    pub(crate) storage: Storage,
    len: usize,
    elem: Elem,
}

impl std::fmt::Debug for RawBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RawBuffer({} x {}, {})",
            self.len,
            self.elem,
            self.device.backend().name()
        )
    }
}

impl Drop for RawBuffer {
    fn drop(&mut self) {
        if let (Storage::Cuda { ptr }, Some(ctx)) = (&self.storage, self.device.cuda_ctx()) {
            if *ptr != 0 && ctx.bind_to_thread().is_ok() {
                // SAFETY: allocated by cuMemAlloc in `alloc` and freed only here. An error
                // (e.g. a context already in an error state) leaks the block rather than panic.
                let _ = unsafe { result::free_sync(*ptr) };
            }
        }
    }
}

fn stream_handle(stream: &Stream) -> Result<sys::CUstream> {
    stream
        .cu_stream()
        .map(|s| s.cu_stream())
        .ok_or_else(|| RuntimeError::DeviceMismatch("a CUDA buffer used with a host stream".into()))
}

impl RawBuffer {
    /// Allocates `len` elements of `elem`, zero-filled.
    pub fn zeros(stream: &Stream, elem: Elem, len: usize) -> Result<RawBuffer> {
        let device = stream.device().clone();
        let bytes = len * elem.bytes();
        let storage = match &device.inner.kind {
            DeviceKind::Interpreter | DeviceKind::Emulator => Storage::Host(Mutex::new(vec![0u8; bytes])),
            DeviceKind::Cuda(..) => {
                device.bind()?;
                let ptr = if bytes == 0 {
                    0
                } else {
                    // SAFETY: a plain allocation; freed in Drop.
                    unsafe { result::malloc_sync(bytes) }.map_err(|e| RuntimeError::driver("cuMemAlloc", e))?
                };
                Storage::Cuda { ptr }
            }
        };
        let buf = RawBuffer {
            device,
            storage,
            len,
            elem,
        };
        buf.fill_byte(stream, 0)?;
        Ok(buf)
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the buffer holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Element type.
    pub fn elem(&self) -> Elem {
        self.elem
    }

    /// Size in bytes.
    pub fn num_bytes(&self) -> usize {
        self.len * self.elem.bytes()
    }

    /// The device the memory lives on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The device address (`0` for host memory and empty buffers), as passed to kernels.
    pub fn device_ptr(&self) -> u64 {
        match &self.storage {
            Storage::Cuda { ptr } => *ptr,
            Storage::Host(_) => 0,
        }
    }

    /// Sets every byte to `byte` (e.g. `0xFF` poisons floats with NaN), ordered on `stream`.
    pub fn fill_byte(&self, stream: &Stream, byte: u8) -> Result<()> {
        stream.same_device(&self.device, "buffer")?;
        match &self.storage {
            Storage::Host(v) => {
                v.lock().unwrap_or_else(|p| p.into_inner()).fill(byte);
                Ok(())
            }
            Storage::Cuda { ptr } => {
                if self.num_bytes() == 0 {
                    return Ok(());
                }
                let s = stream_handle(stream)?;
                self.device.bind()?;
                // SAFETY: `ptr` holds `num_bytes` bytes.
                unsafe { result::memset_d8_async(*ptr, byte, self.num_bytes(), s) }
                    .map_err(|e| RuntimeError::driver("cuMemsetD8Async", e))
            }
        }
    }

    /// Overwrites the whole buffer with `bytes` (exactly [`Self::num_bytes`] long); returns
    /// when the copy is done.
    pub fn write_bytes(&self, stream: &Stream, bytes: &[u8]) -> Result<()> {
        stream.same_device(&self.device, "buffer")?;
        if bytes.len() != self.num_bytes() {
            return Err(RuntimeError::Size(format!(
                "{} bytes written to a buffer of {} bytes",
                bytes.len(),
                self.num_bytes()
            )));
        }
        match &self.storage {
            Storage::Host(v) => {
                v.lock().unwrap_or_else(|p| p.into_inner()).copy_from_slice(bytes);
                Ok(())
            }
            Storage::Cuda { ptr } => {
                if bytes.is_empty() {
                    return Ok(());
                }
                let s = stream_handle(stream)?;
                self.device.bind()?;
                // SAFETY: sizes match; the stream is synchronised before `bytes` can go away.
                unsafe { result::memcpy_htod_async(*ptr, bytes, s) }
                    .map_err(|e| RuntimeError::driver("cuMemcpyHtoDAsync", e))?;
                stream.synchronize()
            }
        }
    }

    /// The buffer's bytes, after all work queued on `stream` before it.
    pub fn read_bytes(&self, stream: &Stream) -> Result<Vec<u8>> {
        stream.same_device(&self.device, "buffer")?;
        match &self.storage {
            Storage::Host(v) => Ok(v.lock().unwrap_or_else(|p| p.into_inner()).clone()),
            Storage::Cuda { ptr } => {
                let mut out = vec![0u8; self.num_bytes()];
                if out.is_empty() {
                    return Ok(out);
                }
                let s = stream_handle(stream)?;
                self.device.bind()?;
                // SAFETY: sizes match; synchronised before `out` is read.
                unsafe { result::memcpy_dtoh_async(&mut out, *ptr, s) }
                    .map_err(|e| RuntimeError::driver("cuMemcpyDtoHAsync", e))?;
                stream.synchronize()?;
                Ok(out)
            }
        }
    }

    /// At most about `max` of the buffer's values as `f64`: all of them when the buffer holds
    /// no more than `max`, else 64 evenly spaced runs of `max / 64` consecutive elements (the
    /// tuner's correctness check of gigabyte-sized buffers reads only these).
    pub fn read_f64_sample(&self, stream: &Stream, max: usize) -> Result<Vec<f64>> {
        const RUNS: usize = 64;
        let run = max / RUNS;
        let ptr = match &self.storage {
            Storage::Cuda { ptr } if self.len > max && run > 0 => *ptr,
            _ => return self.read_f64(stream),
        };
        stream.same_device(&self.device, "buffer")?;
        let size = self.elem.bytes();
        let mut bytes = vec![0u8; RUNS * run * size];
        let s = stream_handle(stream)?;
        self.device.bind()?;
        for (k, chunk) in bytes.chunks_mut(run * size).enumerate() {
            let first = k * (self.len - run) / (RUNS - 1);
            // SAFETY: `first + run ≤ len`, so the range lies inside the allocation; the
            // stream is synchronised before `bytes` is read.
            unsafe { result::memcpy_dtoh_async(chunk, ptr + (first * size) as u64, s) }
                .map_err(|e| RuntimeError::driver("cuMemcpyDtoHAsync", e))?;
        }
        stream.synchronize()?;
        Ok(decode_f64(self.elem, &bytes))
    }

    /// Copies all of `src` (same element type and length) into `self`, ordered on `stream`.
    pub fn copy_from(&self, stream: &Stream, src: &RawBuffer) -> Result<()> {
        stream.same_device(&self.device, "buffer")?;
        stream.same_device(&src.device, "buffer")?;
        if src.elem != self.elem || src.len != self.len {
            return Err(RuntimeError::Size(format!("copy from {src:?} into {self:?}")));
        }
        match (&self.storage, &src.storage) {
            (Storage::Host(d), Storage::Host(s)) => {
                if !std::ptr::eq(d, s) {
                    let s = s.lock().unwrap_or_else(|p| p.into_inner()).clone();
                    d.lock().unwrap_or_else(|p| p.into_inner()).copy_from_slice(&s);
                }
                Ok(())
            }
            (Storage::Cuda { ptr: d }, Storage::Cuda { ptr: s }) => {
                if self.num_bytes() == 0 {
                    return Ok(());
                }
                let st = stream_handle(stream)?;
                self.device.bind()?;
                // SAFETY: both hold `num_bytes` bytes.
                unsafe { result::memcpy_dtod_async(*d, *s, self.num_bytes(), st) }
                    .map_err(|e| RuntimeError::driver("cuMemcpyDtoDAsync", e))
            }
            _ => Err(RuntimeError::DeviceMismatch("copy between backends".into())),
        }
    }

    /// Fills the buffer from `f64` values (converted to the element type).
    pub fn write_f64(&self, stream: &Stream, values: &[f64]) -> Result<()> {
        self.write_bytes(stream, &encode_f64(self.elem, values))
    }

    /// The buffer's values as `f64`.
    pub fn read_f64(&self, stream: &Stream) -> Result<Vec<f64>> {
        Ok(decode_f64(self.elem, &self.read_bytes(stream)?))
    }
}

/// Encodes `f64` values as elements of type `e`.
pub fn encode_f64(e: Elem, values: &[f64]) -> Vec<u8> {
    fn conv<T: HostElem>(values: &[f64]) -> Vec<u8> {
        elem::encode(&values.iter().map(|&v| T::from_f64(v)).collect::<Vec<T>>())
    }
    match e {
        Elem::Bool => conv::<bool>(values),
        Elem::I32 => conv::<i32>(values),
        Elem::I64 => conv::<i64>(values),
        Elem::U32 => conv::<u32>(values),
        Elem::F16 => conv::<half::f16>(values),
        Elem::BF16 => conv::<half::bf16>(values),
        Elem::F32 => conv::<f32>(values),
        Elem::F8E4M3 => conv::<float8::F8E4M3>(values),
    }
}

/// Decodes elements of type `e` to `f64`.
pub fn decode_f64(e: Elem, bytes: &[u8]) -> Vec<f64> {
    fn conv<T: HostElem>(bytes: &[u8]) -> Vec<f64> {
        elem::decode::<T>(bytes).into_iter().map(T::to_f64).collect()
    }
    match e {
        Elem::Bool => conv::<bool>(bytes),
        Elem::I32 => conv::<i32>(bytes),
        Elem::I64 => conv::<i64>(bytes),
        Elem::U32 => conv::<u32>(bytes),
        Elem::F16 => conv::<half::f16>(bytes),
        Elem::BF16 => conv::<half::bf16>(bytes),
        Elem::F32 => conv::<f32>(bytes),
        Elem::F8E4M3 => conv::<float8::F8E4M3>(bytes),
    }
}

/// Device memory holding `len()` values of `T`.
pub struct DeviceBuffer<T: HostElem> {
    raw: RawBuffer,
    _t: PhantomData<T>,
}

impl<T: HostElem> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.raw.fmt(f)
    }
}

impl<T: HostElem> DeviceBuffer<T> {
    /// `len` zeros.
    pub fn zeros(stream: &Stream, len: usize) -> Result<Self> {
        Ok(DeviceBuffer {
            raw: RawBuffer::zeros(stream, T::ELEM, len)?,
            _t: PhantomData,
        })
    }

    /// A copy of `data`.
    pub fn from_host(stream: &Stream, data: &[T]) -> Result<Self> {
        let b = Self::zeros(stream, data.len())?;
        b.raw.write_bytes(stream, &elem::encode(data))?;
        Ok(b)
    }

    /// The contents, after all work queued on `stream` before this call.
    pub fn to_host(&self, stream: &Stream) -> Result<Vec<T>> {
        Ok(elem::decode(&self.raw.read_bytes(stream)?))
    }

    /// Overwrites the contents with `data` (same length).
    pub fn copy_from_host(&mut self, stream: &Stream, data: &[T]) -> Result<()> {
        self.raw.write_bytes(stream, &elem::encode(data))
    }

    /// Sets every byte to `byte`.
    pub fn memset(&mut self, stream: &Stream, byte: u8) -> Result<()> {
        self.raw.fill_byte(stream, byte)
    }

    /// Fills with `0xFF` bytes (NaN for floats, −1 for signed integers), so that elements a
    /// kernel fails to write stand out.
    pub fn poison(&mut self, stream: &Stream) -> Result<()> {
        self.raw.fill_byte(stream, 0xFF)
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.raw.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// The device address (`0` on the interpreter).
    pub fn device_ptr(&self) -> u64 {
        self.raw.device_ptr()
    }

    /// The device the memory lives on.
    pub fn device(&self) -> &Device {
        self.raw.device()
    }

    /// The type-erased buffer.
    pub fn raw(&self) -> &RawBuffer {
        &self.raw
    }

    /// Wraps a raw buffer of element type `T`; `None` for another element type.
    pub fn from_raw(raw: RawBuffer) -> Option<Self> {
        (raw.elem == T::ELEM).then_some(DeviceBuffer { raw, _t: PhantomData })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_buffers() {
        let d = Device::interpreter();
        let s = d.new_stream().unwrap();
        let mut b = DeviceBuffer::from_host(&s, &[1.0f32, 2.0, 3.0]).unwrap();
        assert_eq!(b.len(), 3);
        assert_eq!(b.to_host(&s).unwrap(), vec![1.0, 2.0, 3.0]);
        b.poison(&s).unwrap();
        assert!(b.to_host(&s).unwrap().iter().all(|x| x.is_nan()));
        b.copy_from_host(&s, &[4.0, 5.0, 6.0]).unwrap();
        assert!(b.copy_from_host(&s, &[1.0]).is_err());
        let c = DeviceBuffer::<f32>::zeros(&s, 3).unwrap();
        c.raw().copy_from(&s, b.raw()).unwrap();
        assert_eq!(c.raw().read_f64(&s).unwrap(), vec![4.0, 5.0, 6.0]);
        assert!(DeviceBuffer::<i32>::from_raw(RawBuffer::zeros(&s, Elem::F32, 1).unwrap()).is_none());
        let other = Device::interpreter().new_stream().unwrap();
        assert!(matches!(b.to_host(&other), Err(RuntimeError::DeviceMismatch(_))));
    }

    #[test]
    fn f64_codecs() {
        for e in [
            Elem::Bool,
            Elem::I32,
            Elem::I64,
            Elem::U32,
            Elem::F16,
            Elem::BF16,
            Elem::F32,
            Elem::F8E4M3,
        ] {
            let bytes = encode_f64(e, &[0.0, 1.0, 2.0]);
            assert_eq!(bytes.len(), 3 * e.bytes());
            let back = decode_f64(e, &bytes);
            assert_eq!(back[0], 0.0);
            assert_eq!(back[1], 1.0);
        }
    }
}
