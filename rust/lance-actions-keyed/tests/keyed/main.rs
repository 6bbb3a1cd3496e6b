//! Keyed tables on real Lance datasets. One test binary; modules inside.

mod concurrency;
mod fencing;
mod guards;
mod migration;
mod replace;
mod routing;
mod soundness;
mod staged;
mod support;
