//! The gallery: small kernels that show the language is general, each with a float64 CPU
//! reference.

pub mod atomics;
pub mod matmul;
pub mod rmsnorm;
pub mod scan;
pub mod softmax;
pub mod vector_add;
