//! API keys made with the real `memmachine keys` command.

use std::path::Path;
use std::process::{Command, Output};

use crate::child::Run;
use crate::server::{server_bin, store_args};

pub fn keys_command(data_dir: &Path, args: &[&str]) -> Output {
    Command::new(server_bin())
        .arg("keys")
        .args(args)
        .args(store_args(data_dir))
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
