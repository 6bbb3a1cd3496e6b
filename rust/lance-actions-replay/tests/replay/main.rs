//! Branch replay on real Lance datasets. One test binary; modules inside.

mod kinds;
mod migrated;
mod names;
mod operations;
mod primitive;
mod property;
mod support;
