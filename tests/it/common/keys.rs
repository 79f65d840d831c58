//! API keys made with the real `memmachine keys` command.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::child::Run;

pub fn keys_command(data_dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memmachine"))
        .arg("keys")
        .args(args)
        .args(super::store_args(data_dir))
        .run()
}

/// `memmachine keys create ...`: the token it prints.
pub fn create_key(data_dir: &Path, args: &[&str]) -> String {
    let mut all = vec!["create"];
    all.extend_from_slice(args);
    let out = keys_command(data_dir, &all);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}
