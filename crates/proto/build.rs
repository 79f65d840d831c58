//! Compiles the protos under the repository's `proto/` with the vendored `protoc`, so a
//! fresh machine needs no system package, and writes the descriptor set served by
//! reflection.
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    let well_known = protoc_bin_vendored::include_path()?;
    // SAFETY: build scripts are single-threaded; tonic-prost-build reads PROTOC from the env.
    unsafe { std::env::set_var("PROTOC", protoc) };

    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let protos = [
        "../../proto/memmachine/v2/common.proto",
        "../../proto/memmachine/v2/project_service.proto",
        "../../proto/memmachine/v2/memory_service.proto",
        "../../proto/memmachine/v2/semantic_service.proto",
        "../../proto/memmachine/v2/lifecycle_service.proto",
        "../../proto/memmachine/v2/change_service.proto",
        "../../proto/memmachine/v1/types.proto",
        "../../proto/memmachine/v1/memory_service.proto",
        "../../proto/memmachine/v1/session_service.proto",
        "../../proto/memmachine/v1/group_service.proto",
    ];
    // Written aside and renamed into place: a new file, never a write into one that a
    // copied (hard-linked) target directory shares with another checkout.
    let descriptor = out_dir.join("memmachine_descriptor.bin");
    let written = out_dir.join("memmachine_descriptor.bin.new");
    let _ = std::fs::remove_file(&written);
    tonic_prost_build::configure()
        .file_descriptor_set_path(&written)
        .compile_protos(
            &protos.map(PathBuf::from),
            &[PathBuf::from("../../proto"), well_known],
        )?;
    std::fs::rename(&written, &descriptor)?;

    // tonic-prost-build does not emit these itself.
    println!("cargo:rerun-if-changed=../../proto");
    for proto in protos {
        println!("cargo:rerun-if-changed={proto}");
    }
    Ok(())
}
