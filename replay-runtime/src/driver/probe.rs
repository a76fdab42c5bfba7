//! Finds the CUDA driver library before cudarc is touched: cudarc's loader panics when the
//! library is absent, so every driver path goes through [`ensure_driver`] first.

use crate::error::RuntimeError;
use std::sync::OnceLock;

/// The names tried, in order.
#[cfg(not(windows))]
pub const DRIVER_LIBRARY_NAMES: &[&str] = &["libcuda.so.1", "libcuda.so"];
/// The names tried, in order.
#[cfg(windows)]
pub const DRIVER_LIBRARY_NAMES: &[&str] = &["nvcuda.dll"];

/// Tries to load the driver library under each of `names`; the first that loads wins.
/// On failure returns the loader's message for the last name.
pub fn probe(names: &[&str]) -> Result<String, String> {
    let mut last = String::from("no library names to try");
    for name in names {
        // SAFETY: loading libcuda runs its initialisers, which are sound to run; the
        // handle is dropped at once (cudarc keeps its own).
        match unsafe { libloading::Library::new(*name) } {
            Ok(_) => return Ok((*name).to_string()),
            Err(e) => last = e.to_string(),
        }
    }
    Err(last)
}

/// `Ok` when the CUDA driver library can be loaded (probed once per process), else
/// [`RuntimeError::NoDriver`].
pub fn ensure_driver() -> Result<(), RuntimeError> {
    static PROBE: OnceLock<Result<String, String>> = OnceLock::new();
    match PROBE.get_or_init(|| probe(DRIVER_LIBRARY_NAMES)) {
        Ok(_) => Ok(()),
        Err(reason) => Err(RuntimeError::NoDriver {
            tried: DRIVER_LIBRARY_NAMES.iter().map(|s| s.to_string()).collect(),
            reason: reason.clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_library_is_an_error_not_a_panic() {
        let err = probe(&["libreplay-does-not-exist.so.7"]).unwrap_err();
        assert!(!err.is_empty());
        assert!(probe(&[]).is_err());
    }
}
