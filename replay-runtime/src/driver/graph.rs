//! CUDA graphs: a sequence of launches captured once from a stream and replayed with one
//! driver call (what a decode step with many small kernels wants), with conditional nodes
//! whose bodies run only when a kernel earlier in the graph says so
//! ([`Stream::capture_if`]; kernels set the condition with `set_graph_condition`).

use super::stream::Stream;
use crate::error::{Result, RuntimeError};
use cudarc::driver::{sys, CudaGraph};

/// A condition of the graph a stream is capturing: what a kernel's `set_graph_condition` sets
/// (pass [`GraphCondition::handle`] as its `i64` argument) and [`Stream::capture_if`] nodes
/// read. At the start of every replay it holds the default it was made with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphCondition {
    handle: u64,
    capture: u64,
}

impl GraphCondition {
    /// The handle, as a kernel's `i64` argument.
    pub fn handle(&self) -> i64 {
        self.handle as i64
    }

    /// The id of the capture that made it (see [`Stream::capture_id`]).
    pub fn capture(&self) -> u64 {
        self.capture
    }
}

/// What `cuStreamGetCaptureInfo` says about a capturing stream.
struct CaptureInfo {
    id: u64,
    graph: sys::CUgraph,
    deps: Vec<sys::CUgraphNode>,
    edges: Option<Vec<sys::CUgraphEdgeData>>,
}

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

impl Stream {
    fn capture_info(&self) -> Result<Option<CaptureInfo>> {
        let Some(s) = self.cu_stream() else {
            return Ok(None);
        };
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        let mut id = 0u64;
        let mut graph: sys::CUgraph = std::ptr::null_mut();
        let mut deps: *const sys::CUgraphNode = std::ptr::null();
        let mut edges: *const sys::CUgraphEdgeData = std::ptr::null();
        let mut n = 0usize;
        // SAFETY: every out-pointer points to a local of the type the call writes.
        unsafe {
            sys::cuStreamGetCaptureInfo_v3(
                s.cu_stream(),
                &mut status,
                &mut id,
                &mut graph,
                &mut deps,
                &mut edges,
                &mut n,
            )
            .result()
        }
        .map_err(|e| RuntimeError::driver("cuStreamGetCaptureInfo", e))?;
        if status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE {
            return Ok(None);
        }
        // The driver returned `n` dependencies (and `n` edges, or none), valid until the next
        // call on the stream: they are copied out at once.
        fn copy<T: Copy>(p: *const T, n: usize) -> Vec<T> {
            if n == 0 || p.is_null() {
                return vec![];
            }
            // SAFETY: see above.
            unsafe { std::slice::from_raw_parts(p, n) }.to_vec()
        }
        Ok(Some(CaptureInfo {
            id,
            graph,
            deps: copy(deps, n),
            edges: (!edges.is_null()).then(|| copy(edges, n)),
        }))
    }

    fn capturing(&self, what: &'static str) -> Result<CaptureInfo> {
        self.capture_info()?.ok_or_else(|| RuntimeError::Unsupported {
            backend: self.device().backend().name(),
            what: format!("{what} outside a CUDA graph capture"),
        })
    }

    /// The id of the graph capture this stream records into, or `None` when it is not
    /// capturing (always `None` on the CPU backends). Streams joined into one capture (by
    /// waiting on an event recorded in it) share its id.
    pub fn capture_id(&self) -> Result<Option<u64>> {
        Ok(self.capture_info()?.map(|c| c.id))
    }

    /// A new condition of the graph this stream is capturing, `default` at the start of every
    /// replay. Use it in a [`Stream::capture_if`] of the same capture (a condition no node
    /// reads makes the graph fail to instantiate).
    pub fn new_graph_condition(&self, default: bool) -> Result<GraphCondition> {
        let c = self.capturing("a graph condition")?;
        let ctx = self.device().cuda_ctx().expect("a capturing stream is a CUDA stream");
        let mut handle = 0;
        // SAFETY: `c.graph` is the capturing graph, `ctx` the stream's context.
        unsafe {
            sys::cuGraphConditionalHandleCreate(
                &mut handle,
                c.graph,
                ctx.cu_ctx(),
                default as u32,
                sys::CU_GRAPH_COND_ASSIGN_DEFAULT,
            )
            .result()
        }
        .map_err(|e| RuntimeError::driver("cuGraphConditionalHandleCreate", e))?;
        Ok(GraphCondition { handle, capture: c.id })
    }

    /// Records, in this capturing stream, a conditional node that runs `body` (recorded on
    /// `body_stream`, a stream of the same device not capturing anything) in a replay only if
    /// `condition` is true when the stream's work reaches it: the value the last kernel before
    /// it set, or its default.
    pub fn capture_if(
        &self,
        condition: GraphCondition,
        body_stream: &Stream,
        body: impl FnOnce(&Stream) -> Result<()>,
    ) -> Result<()> {
        let c = self.capturing("a conditional node")?;
        if c.id != condition.capture {
            return Err(RuntimeError::Size(format!(
                "graph condition of capture {} used in capture {}",
                condition.capture, c.id
            )));
        }
        let ctx = self.device().cuda_ctx().expect("a capturing stream is a CUDA stream");
        let body_cu = body_stream.cu_stream().expect("a CUDA stream").cu_stream();
        let mut body_graph: sys::CUgraph = std::ptr::null_mut();
        // SAFETY: a zeroed parameter block is valid for every node type; the fields of the
        // conditional node are set below.
        let mut params: sys::CUgraphNodeParams = unsafe { std::mem::zeroed() };
        params.type_ = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_CONDITIONAL;
        params.__bindgen_anon_1.conditional = sys::CUDA_CONDITIONAL_NODE_PARAMS {
            handle: condition.handle,
            type_: sys::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_IF,
            size: 1,
            phGraph_out: &mut body_graph,
            ctx: ctx.cu_ctx(),
        };
        let mut node: sys::CUgraphNode = std::ptr::null_mut();
        let edges = c.edges.as_ref().map_or(std::ptr::null(), |e| e.as_ptr());
        // SAFETY: the node goes into the capturing graph after the stream's current
        // dependencies; `phGraph_out` points to `body_graph`, which the call sets.
        unsafe {
            sys::cuGraphAddNode_v2(&mut node, c.graph, c.deps.as_ptr(), edges, c.deps.len(), &mut params).result()
        }
        .map_err(|e| RuntimeError::driver("cuGraphAddNode", e))?;
        // The body: recorded by capturing `body_stream` into the node's body graph.
        // SAFETY: `body_graph` is the node's (empty) body graph.
        unsafe {
            sys::cuStreamBeginCaptureToGraph(
                body_cu,
                body_graph,
                std::ptr::null(),
                std::ptr::null(),
                0,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            )
            .result()
        }
        .map_err(|e| RuntimeError::driver("cuStreamBeginCaptureToGraph", e))?;
        let recorded = body(body_stream);
        let mut out: sys::CUgraph = std::ptr::null_mut();
        // SAFETY: ends the capture begun above (whatever `body` did), into `body_graph`.
        let ended = unsafe { sys::cuStreamEndCapture(body_cu, &mut out).result() };
        recorded?;
        ended.map_err(|e| RuntimeError::driver("cuStreamEndCapture", e))?;
        // The stream's work after this waits for the node.
        // SAFETY: `node` is a node of the stream's capture graph.
        unsafe {
            sys::cuStreamUpdateCaptureDependencies(
                self.cu_stream().expect("a CUDA stream").cu_stream(),
                &mut node,
                1,
                sys::CUstreamUpdateCaptureDependencies_flags::CU_STREAM_SET_CAPTURE_DEPENDENCIES as u32,
            )
            .result()
        }
        .map_err(|e| RuntimeError::driver("cuStreamUpdateCaptureDependencies", e))
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
