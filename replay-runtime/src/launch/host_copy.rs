//! Launch arguments for the CPU engines (interpreter, emulator): buffers copied into the
//! engine's memory (and written back by the engine after the run), scalars passed through.

use super::args::ArgValue;
use crate::driver::buffer::RawBuffer;
use crate::driver::stream::Stream;
use crate::error::Result;

/// A launch's arguments in a CPU engine's terms, with the buffers they were copied from.
pub struct HostArgs<'a, Id, P> {
    /// Each buffer once, with the engine's id of its copy (a buffer passed twice aliases one
    /// copy, as on a GPU).
    pub buffers: Vec<(&'a RawBuffer, Id)>,
    /// The arguments in order.
    pub params: Vec<P>,
}

/// Copies `args`' buffers into the engine (`alloc` takes a buffer and its bytes, read after the
/// work already queued on `stream`) and maps every argument with `param` (a buffer as
/// `Ok(id)`, a scalar as `Err(value)`).
pub fn copy_in<'a, Id: Copy, P>(
    stream: &Stream,
    args: &[ArgValue<'a>],
    mut alloc: impl FnMut(&RawBuffer, Vec<u8>) -> Id,
    param: impl Fn(std::result::Result<Id, &ArgValue<'a>>) -> P,
) -> Result<HostArgs<'a, Id, P>> {
    let mut buffers: Vec<(&'a RawBuffer, Id)> = Vec::new();
    let mut params = Vec::with_capacity(args.len());
    for a in args {
        params.push(match *a {
            ArgValue::Buffer(b) => {
                let id = match buffers.iter().find(|(r, _)| std::ptr::eq(*r, b)) {
                    Some((_, id)) => *id,
                    None => {
                        let id = alloc(b, b.read_bytes(stream)?);
                        buffers.push((b, id));
                        id
                    }
                };
                param(Ok(id))
            }
            _ => param(Err(a)),
        });
    }
    Ok(HostArgs { buffers, params })
}
