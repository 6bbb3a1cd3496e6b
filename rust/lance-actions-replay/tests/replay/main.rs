//! Branch replay on real Lance datasets. One test binary; modules inside.

mod edges;
mod keys;
mod kinds;
mod migrated;
mod names;
mod operations;
mod primitive;
mod property;
mod support;
