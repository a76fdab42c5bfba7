//! Streams (ordered queues of work) and events (points in a stream, for timing and
//! synchronisation).

use super::device::{Device, DeviceKind};
use crate::error::{Result, RuntimeError};
use cudarc::driver::{sys, CudaEvent, CudaStream};
use std::sync::{Arc, Mutex};
use std::time::Instant;

pub(crate) enum StreamKind {
    Cuda(Arc<CudaStream>),
    /// The CPU backends run work synchronously; their stream is only an ordering token.
    Host,
}

/// An ordered queue of work on one device.
pub struct Stream {
    pub(crate) device: Device,
    pub(crate) kind: StreamKind,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("device", &self.device.info().name)
            .finish()
    }
}

impl Device {
    /// A new stream (non-blocking with respect to the legacy default stream). Streams that
    /// are captured into graphs must be made this way.
    pub fn new_stream(&self) -> Result<Stream> {
        let kind = match &self.inner.kind {
            DeviceKind::Cuda(ctx, _) => StreamKind::Cuda(
                ctx.new_stream()
                    .map_err(|e| RuntimeError::driver("cuStreamCreate", e))?,
            ),
            DeviceKind::Interpreter | DeviceKind::Emulator => StreamKind::Host,
        };
        Ok(Stream {
            device: self.clone(),
            kind,
        })
    }

    /// The device's default (legacy null) stream.
    pub fn default_stream(&self) -> Stream {
        let kind = match &self.inner.kind {
            DeviceKind::Cuda(ctx, _) => StreamKind::Cuda(ctx.default_stream()),
            DeviceKind::Interpreter | DeviceKind::Emulator => StreamKind::Host,
        };
        Stream {
            device: self.clone(),
            kind,
        }
    }

    /// A new event with timing enabled.
    pub fn new_event(&self) -> Result<Event> {
        let kind = match &self.inner.kind {
            DeviceKind::Cuda(ctx, _) => EventKind::Cuda(
                ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
                    .map_err(|e| RuntimeError::driver("cuEventCreate", e))?,
            ),
            DeviceKind::Interpreter | DeviceKind::Emulator => EventKind::Host(Mutex::new(None)),
        };
        Ok(Event {
            device: self.clone(),
            kind,
        })
    }
}

impl Stream {
    /// The stream's device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Blocks until all work queued on the stream has finished.
    pub fn synchronize(&self) -> Result<()> {
        match &self.kind {
            StreamKind::Cuda(s) => s
                .synchronize()
                .map_err(|e| RuntimeError::driver("cuStreamSynchronize", e)),
            StreamKind::Host => Ok(()),
        }
    }

    /// Makes later work on this stream wait for `event`.
    pub fn wait(&self, event: &Event) -> Result<()> {
        self.same_device(&event.device, "event")?;
        match (&self.kind, &event.kind) {
            (StreamKind::Cuda(s), EventKind::Cuda(e)) => {
                s.wait(e).map_err(|e| RuntimeError::driver("cuStreamWaitEvent", e))
            }
            _ => Ok(()),
        }
    }

    pub(crate) fn cu_stream(&self) -> Option<&Arc<CudaStream>> {
        match &self.kind {
            StreamKind::Cuda(s) => Some(s),
            StreamKind::Host => None,
        }
    }

    pub(crate) fn same_device(&self, other: &Device, what: &str) -> Result<()> {
        if &self.device == other {
            Ok(())
        } else {
            Err(RuntimeError::DeviceMismatch(format!(
                "{what} belongs to `{}`, the stream to `{}`",
                other.info().name,
                self.device.info().name
            )))
        }
    }
}

enum EventKind {
    Cuda(CudaEvent),
    Host(Mutex<Option<Instant>>),
}

/// A marker recorded in a stream; two of them measure the time between.
pub struct Event {
    device: Device,
    kind: EventKind,
}

impl Event {
    /// Records the event at the current end of `stream`.
    pub fn record(&self, stream: &Stream) -> Result<()> {
        stream.same_device(&self.device, "event")?;
        match (&self.kind, &stream.kind) {
            (EventKind::Cuda(e), StreamKind::Cuda(s)) => {
                e.record(s).map_err(|e| RuntimeError::driver("cuEventRecord", e))
            }
            (EventKind::Host(t), _) => {
                *t.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
                Ok(())
            }
            (EventKind::Cuda(_), StreamKind::Host) => Err(RuntimeError::DeviceMismatch(
                "a CUDA event recorded on a host stream".into(),
            )),
        }
    }

    /// Blocks until the work before the event has finished.
    pub fn synchronize(&self) -> Result<()> {
        match &self.kind {
            EventKind::Cuda(e) => e
                .synchronize()
                .map_err(|e| RuntimeError::driver("cuEventSynchronize", e)),
            EventKind::Host(_) => Ok(()),
        }
    }

    /// Milliseconds from `self` to `end` (waits for both).
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32> {
        match (&self.kind, &end.kind) {
            (EventKind::Cuda(a), EventKind::Cuda(b)) => a
                .elapsed_ms(b)
                .map_err(|e| RuntimeError::driver("cuEventElapsedTime", e)),
            (EventKind::Host(a), EventKind::Host(b)) => {
                let a = *a.lock().unwrap_or_else(|p| p.into_inner());
                let b = *b.lock().unwrap_or_else(|p| p.into_inner());
                match (a, b) {
                    (Some(a), Some(b)) => Ok(b.saturating_duration_since(a).as_secs_f32() * 1e3),
                    _ => Err(RuntimeError::Size(
                        "elapsed_ms on an event that was never recorded".into(),
                    )),
                }
            }
            _ => Err(RuntimeError::DeviceMismatch("events of different backends".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_events_measure_wall_clock() {
        let d = Device::interpreter();
        let s = d.new_stream().unwrap();
        let (a, b) = (d.new_event().unwrap(), d.new_event().unwrap());
        assert!(a.elapsed_ms(&b).is_err());
        a.record(&s).unwrap();
        b.record(&s).unwrap();
        assert!(a.elapsed_ms(&b).unwrap() >= 0.0);
        s.synchronize().unwrap();
        s.wait(&b).unwrap();
        let other = Device::interpreter().new_event().unwrap();
        assert!(matches!(other.record(&s), Err(RuntimeError::DeviceMismatch(_))));
    }
}
