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
        let id = self.capture_id();
        let recorded = record(self).and_then(|()| self.close_open_conditions());
        // A capture that failed may leave conditions no node reads: they die with it.
        if let Ok(Some(id)) = id {
            self.device().open_conditions().retain(|c| c.capture != id);
        }
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
        // The driver returned `n` dependencies, valid until the next call on the stream: they
        // are copied out at once. (The edges' data is not kept: the nodes added here take
        // default edges.)
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
    /// replay, for one [`Stream::capture_if`] of the same capture (one that no node reads gets a
    /// node with an empty body when the capture ends: the driver does not instantiate a graph
    /// with an unread condition).
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
        let condition = GraphCondition { handle, capture: c.id };
        self.device().open_conditions().push(condition);
        Ok(condition)
    }

    /// Records, in this capturing stream, a conditional node that runs `body` (recorded on
    /// `body_stream`, a stream of the same device not capturing anything) in a replay only if
    /// `condition` is true when the stream's work reaches it: the value the last kernel before
    /// it set, or its default. A condition serves one node.
    pub fn capture_if(
        &self,
        condition: GraphCondition,
        body_stream: &Stream,
        body: impl FnOnce(&Stream) -> Result<()>,
    ) -> Result<()> {
        let body_graph = self.add_if_node(condition)?;
        let body_cu = body_stream.cu_stream().expect("a CUDA stream").cu_stream();
        // The body: recorded by capturing `body_stream` into the node's body graph. Relaxed: the
        // thread's capture in progress already holds the thread-local restrictions, which a
        // second capture on the thread cannot take again.
        // SAFETY: `body_graph` is the node's (empty) body graph.
        unsafe {
            sys::cuStreamBeginCaptureToGraph(
                body_cu,
                body_graph,
                std::ptr::null(),
                std::ptr::null(),
                0,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
            )
            .result()
        }
        .map_err(|e| RuntimeError::driver("cuStreamBeginCaptureToGraph", e))?;
        let recorded = body(body_stream);
        let mut out: sys::CUgraph = std::ptr::null_mut();
        // SAFETY: ends the capture begun above (whatever `body` did), into `body_graph`.
        let ended = unsafe { sys::cuStreamEndCapture(body_cu, &mut out).result() };
        recorded?;
        ended.map_err(|e| RuntimeError::driver("cuStreamEndCapture", e))
    }

    /// Adds an IF node on `condition` after the stream's current work, makes the stream's
    /// later work wait for it, and returns its (empty) body graph.
    fn add_if_node(&self, condition: GraphCondition) -> Result<sys::CUgraph> {
        let c = self.capturing("a conditional node")?;
        {
            let mut open = self.device().open_conditions();
            match open.iter().position(|o| *o == condition) {
                Some(i) if c.id == condition.capture => open.swap_remove(i),
                _ => {
                    return Err(RuntimeError::Size(format!(
                        "graph condition {:#x} of capture {} in capture {}: a condition serves one \
                         conditional node, of the capture that made it",
                        condition.handle, condition.capture, c.id
                    )))
                }
            };
        }
        let ctx = self.device().cuda_ctx().expect("a capturing stream is a CUDA stream");
        // SAFETY: a zeroed parameter block is valid for every node type; the fields of the
        // conditional node are set below.
        let mut params: sys::CUgraphNodeParams = unsafe { std::mem::zeroed() };
        params.type_ = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_CONDITIONAL;
        params.__bindgen_anon_1.conditional = sys::CUDA_CONDITIONAL_NODE_PARAMS {
            handle: condition.handle,
            type_: sys::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_IF,
            size: 1,
            phGraph_out: std::ptr::null_mut(),
            ctx: ctx.cu_ctx(),
        };
        let mut node: sys::CUgraphNode = std::ptr::null_mut();
        let deps = if c.deps.is_empty() {
            std::ptr::null()
        } else {
            c.deps.as_ptr()
        };
        // SAFETY: the node goes into the capturing graph after the stream's current
        // dependencies; the call points `phGraph_out` to the node's array of body graphs.
        unsafe {
            sys::cuGraphAddNode_v2(&mut node, c.graph, deps, std::ptr::null(), c.deps.len(), &mut params).result()
        }
        .map_err(|e| RuntimeError::driver("cuGraphAddNode", e))?;
        // SAFETY: reads back the pointer field the call set (a conditional node's parameters).
        let bodies = unsafe { params.__bindgen_anon_1.conditional.phGraph_out };
        if bodies.is_null() {
            return Err(RuntimeError::Driver {
                call: "cuGraphAddNode",
                message: "the conditional node came without a body graph".into(),
            });
        }
        // The stream's work after this waits for the node.
        // SAFETY: `node` is a node of the stream's capture graph.
        unsafe {
            sys::cuStreamUpdateCaptureDependencies_v2(
                self.cu_stream().expect("a CUDA stream").cu_stream(),
                &mut node,
                std::ptr::null(),
                1,
                sys::CUstreamUpdateCaptureDependencies_flags::CU_STREAM_SET_CAPTURE_DEPENDENCIES as u32,
            )
            .result()
        }
        .map_err(|e| RuntimeError::driver("cuStreamUpdateCaptureDependencies", e))?;
        // SAFETY: an IF node of size 1 has one body graph, owned by the node.
        Ok(unsafe { *bodies })
    }

    /// Gives every condition of this stream's capture that no node reads yet a node with an
    /// empty body (a graph with a condition no node reads does not instantiate): conditions
    /// that the capture's last kernels set for work that never came.
    fn close_open_conditions(&self) -> Result<()> {
        let Some(id) = self.capture_id()? else {
            return Ok(());
        };
        let open: Vec<GraphCondition> = self
            .device()
            .open_conditions()
            .iter()
            .filter(|c| c.capture == id)
            .copied()
            .collect();
        for c in open {
            let body = self.add_if_node(c)?;
            let mut empty: sys::CUgraphNode = std::ptr::null_mut();
            // SAFETY: `body` is the new node's body graph.
            unsafe { sys::cuGraphAddEmptyNode(&mut empty, body, std::ptr::null(), 0).result() }
                .map_err(|e| RuntimeError::driver("cuGraphAddEmptyNode", e))?;
        }
        Ok(())
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
