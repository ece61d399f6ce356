//! CuTe-style layout algebra (work in progress).
