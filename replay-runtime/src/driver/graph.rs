//! CUDA graphs: a sequence of launches captured once from a stream and replayed with one
//! driver call (what a decode step with many small kernels wants).

use super::stream::Stream;
use crate::error::{Result, RuntimeError};
use cudarc::driver::{sys, CudaGraph};

/// An instantiated graph, replayed on the stream it was captured from.
pub struct Graph {
    graph: CudaGraph,
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Graph")
    }
}

impl Stream {
    /// Captures the work `record` enqueues on this stream into a graph (nothing runs during
    /// capture). Kernels must have been loaded before (e.g. by one ordinary launch): loading a
    /// module or copying host data is not allowed while capturing. The stream must come from
    /// [`crate::Device::new_stream`]. On the CPU backends this is
    /// [`RuntimeError::Unsupported`].
    pub fn capture(&self, record: impl FnOnce(&Stream) -> Result<()>) -> Result<Graph> {
        let Some(s) = self.cu_stream() else {
            return Err(RuntimeError::Unsupported {
                backend: self.device().backend().name(),
                what: "CUDA graph capture".into(),
            });
        };
        s.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(|e| RuntimeError::driver("cuStreamBeginCapture", e))?;
        let recorded = record(self);
        // End the capture whatever happened, so that the stream is usable again.
        let ended = s.end_capture(sys::CUgraphInstantiate_flags(0));
        recorded?;
        match ended.map_err(|e| RuntimeError::driver("cuStreamEndCapture", e))? {
            Some(graph) => Ok(Graph { graph }),
            None => Err(RuntimeError::Driver {
                call: "cuStreamEndCapture",
                message: "no graph was captured".into(),
            }),
        }
    }
}

impl Graph {
    /// Enqueues one replay of the whole graph on the stream it was captured from.
    pub fn launch(&self) -> Result<()> {
        self.graph
            .launch()
            .map_err(|e| RuntimeError::driver("cuGraphLaunch", e))
    }

    /// Uploads the graph's resources now so that the first replay is not slower.
    pub fn upload(&self) -> Result<()> {
        self.graph
            .upload()
            .map_err(|e| RuntimeError::driver("cuGraphUpload", e))
    }
}

#[cfg(test)]
mod tests {
    use crate::{Device, RuntimeError};

    #[test]
    fn capture_is_unsupported_on_the_interpreter() {
        let s = Device::interpreter().new_stream().unwrap();
        let err = s.capture(|_| Ok(())).unwrap_err();
        assert!(matches!(err, RuntimeError::Unsupported { .. }));
    }
}
