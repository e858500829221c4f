//! The committed protobuf and gRPC code (`src/proto/generated/`) is what the
//! generators make from `proto/` now: each file is generated again into a
//! temporary directory and compared byte for byte. With
//! `SR_REGENERATE_PROTO=1` the test writes the files instead (after a change
//! to a `.proto` or to a generator's version).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{fs, path::Path};

use prost::Message;

const API: &str = "proto/sandbox_readiness/v1/readiness.proto";
const CRI: &str = "proto/runtime/v1/api.proto";

/// Generates every committed file into `out`, under its committed name.
fn generate(out: &Path) {
    // The API alone (with its imports) feeds server reflection, so grpcurl
    // sees our service and not the CRI subset we only call.
    let api = protox::compile([API], ["proto"]).unwrap();
    let api_bytes = api.encode_to_vec();
    fs::write(out.join("readiness_descriptor.bin"), &api_bytes).unwrap();

    tonic_prost_build::configure()
        .compile_well_known_types(true)
        .extern_path(".google.protobuf", "::pbjson_types")
        .out_dir(out)
        .compile_fds(api)
        .unwrap();

    // The CRI subset: the agent is only ever a CRI client. The server stubs
    // go to a file of their own that only the tests include (a fake runtime
    // in tests/cri_live.rs), so they never reach the node binary.
    let cri = protox::compile([CRI], ["proto"]).unwrap();
    tonic_prost_build::configure()
        .build_server(false)
        .out_dir(out)
        .compile_fds(cri.clone())
        .unwrap();
    let server = out.join("cri-server");
    fs::create_dir_all(&server).unwrap();
    tonic_prost_build::configure()
        .build_client(false)
        .out_dir(&server)
        .compile_fds(cri)
        .unwrap();
    fs::rename(
        server.join("runtime.v1.rs"),
        out.join("runtime.v1.server.rs"),
    )
    .unwrap();
    fs::remove_dir(&server).unwrap();

    pbjson_build::Builder::new()
        .register_descriptors(&api_bytes)
        .unwrap()
        // Print false/0/empty fields too: a report that says
        // "initialUserNamespace": false is clearer than one that omits it.
        .emit_fields()
        .out_dir(out)
        .build(&[".sandbox_readiness"])
        .unwrap();
}

#[test]
fn committed_code_is_what_the_generators_make() {
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/proto/generated");
    let fresh = tempfile::tempdir().unwrap();
    generate(fresh.path());

    let mut names: Vec<_> = fs::read_dir(fresh.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    let mut on_disk: Vec<_> = fs::read_dir(&committed)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    on_disk.sort();

    if std::env::var_os("SR_REGENERATE_PROTO").is_some() {
        for name in &on_disk {
            fs::remove_file(committed.join(name)).unwrap();
        }
        for name in &names {
            fs::copy(fresh.path().join(name), committed.join(name)).unwrap();
        }
        return;
    }
    assert_eq!(
        names, on_disk,
        "src/proto/generated/ holds other files than the generators make; \
         run SR_REGENERATE_PROTO=1 cargo test --test generated_proto"
    );
    let stale: Vec<_> = names
        .iter()
        .filter(|n| fs::read(fresh.path().join(n)).unwrap() != fs::read(committed.join(n)).unwrap())
        .collect();
    assert!(
        stale.is_empty(),
        "src/proto/generated/{stale:?} differ from what proto/ generates now; \
         run SR_REGENERATE_PROTO=1 cargo test --test generated_proto"
    );
}
