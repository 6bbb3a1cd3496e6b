//! Compiles the action wire format (`protos/actions.proto`) with prost.

fn main() -> std::io::Result<()> {
    // Read at run time: a build script binary compiled in one checkout may be re-run from another.
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").map_err(std::io::Error::other)?;
    let proto_dir = std::path::Path::new(&manifest_dir).join("../../protos");
    let proto = proto_dir.join("actions.proto");
    println!("cargo:rerun-if-changed={}", proto.display());
    prost_build::Config::new().compile_protos(&[proto], &[proto_dir])
}
