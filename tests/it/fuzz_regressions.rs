//! The fuzz targets' inputs as ordinary tests: every seed of `fuzz/seeds/<target>/` and
//! every input a target once crashed on (`tests/fixtures/fuzz/<target>/`), through the
//! targets' own logic (`fuzz/harness.rs`). `cargo fuzz` runs the targets themselves
//! (see `fuzz/README.md`).

#[path = "../../fuzz/harness.rs"]
mod harness;

use std::path::Path;

/// Runs `check` on every file of the target's seed and regression directories.
fn run(target: &str, check: fn(&[u8])) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut count = 0;
    for dir in [
        root.join("fuzz/seeds").join(target),
        root.join("tests/fixtures/fuzz").join(target),
    ] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut paths: Vec<_> = entries.map(|e| e.unwrap().path()).collect();
        paths.sort();
        for path in paths {
            let input = std::fs::read(&path).unwrap();
            eprintln!("{target}: {}", path.display());
            check(&input);
            count += 1;
        }
    }
    assert!(count > 0, "no inputs for {target}");
}

#[test]
fn filter_inputs() {
    run("filter", harness::filter);
}

#[test]
fn request_inputs() {
    run("requests", harness::requests);
}

#[test]
fn rest_json_inputs() {
    run("rest_json", harness::rest_json);
}

/// Every request kind and route at least once, with an empty and a garbage body.
#[test]
fn every_request_kind_and_route() {
    for kind in 0..harness::REQUEST_KINDS {
        harness::requests(&[kind]);
        harness::requests(&[kind, 0x0a, 0x03, b'a', b' ', b'b']);
    }
    for route in 0..harness::REST_ROUTES.len() as u8 {
        harness::rest_json(&[route]);
        harness::rest_json(&[route, b'{', b'"', b'x']);
        harness::rest_json(&[route, b'[', b'1', b']']);
    }
}
