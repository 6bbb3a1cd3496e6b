//! The authoritative commit loop on real datasets. One test binary; modules inside.

mod at_write;
mod basics;
mod concurrency;
mod faults;
mod presence;
mod soundness;
mod support;
