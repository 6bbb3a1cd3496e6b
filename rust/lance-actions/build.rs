//! Compiles the action wire format (`protos/actions.proto`) with prost.

fn main() -> std::io::Result<()> {
    let proto_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../protos");
    let proto = proto_dir.join("actions.proto");
    println!("cargo:rerun-if-changed={}", proto.display());
    prost_build::Config::new().compile_protos(&[proto], &[proto_dir])
}
