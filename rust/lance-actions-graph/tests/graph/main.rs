//! The graph crate's one test binary: real graphs on disk, data checked against models.

mod common;
mod constraints;
mod crash;
mod landing;
mod merges;
mod model;
mod race;
mod schema;
mod truth_table;
