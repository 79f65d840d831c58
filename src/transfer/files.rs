//! `memmachine export` and `memmachine import` on files: the store opened at a location,
//! the whole file written or read, progress on standard error.

use std::io::Write;
use std::path::{Path, PathBuf};

use memmachine_domain::transfer::{Counts, ExportOptions, ImportOptions, export, import};

use crate::store::{Store, StoreLocation};
use memmachine_core::error::{Error, Result};

async fn closing<T>(store: std::sync::Arc<dyn Store>, result: Result<T>) -> Result<T> {
    let closed = store.close().await;
    let value = result?;
    closed?;
    Ok(value)
}

fn io_error(what: &str, path: &Path, err: std::io::Error) -> Error {
    Error::Unavailable(format!("{what} {}: {err}", path.display()))
}

/// `memmachine export`: the store at `location` to `output` (`-`: standard output;
/// a file is written whole or not at all), with progress on standard error.
pub async fn export_to(
    location: &StoreLocation,
    options: &ExportOptions,
    output: &str,
) -> Result<Counts> {
    let store = crate::store::open(location, false).await?;
    let mut progress = |counts: &Counts| eprintln!("exported {counts}");
    let result = if output == "-" {
        let mut out = std::io::BufWriter::new(std::io::stdout());
        export(store.as_ref(), options, &mut out, &mut progress).await
    } else {
        let path = PathBuf::from(output);
        let partial = PathBuf::from(format!("{output}.partial"));
        let written = async {
            let file = std::fs::File::create(&partial)
                .map_err(|err| io_error("cannot create", &partial, err))?;
            let mut out = std::io::BufWriter::new(file);
            let counts = export(store.as_ref(), options, &mut out, &mut progress).await?;
            out.into_inner()
                .map_err(|err| io_error("cannot write", &partial, err.into_error()))?
                .sync_all()
                .map_err(|err| io_error("cannot write", &partial, err))?;
            std::fs::rename(&partial, &path)
                .map_err(|err| io_error("cannot rename to", &path, err))?;
            Ok(counts)
        }
        .await;
        if written.is_err() {
            let _ = std::fs::remove_file(&partial);
        }
        written
    };
    closing(store, result).await
}

/// A copy of standard input in a file of its own (import reads its input twice),
/// removed when dropped.
struct Spooled(PathBuf);

impl Spooled {
    fn stdin() -> Result<Spooled> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let path = std::env::temp_dir().join(format!(
            "memmachine-import-{}-{nanos}.jsonl",
            std::process::id()
        ));
        let spooled = Spooled(path);
        let mut file = std::fs::File::create(&spooled.0)
            .map_err(|err| io_error("cannot create", &spooled.0, err))?;
        std::io::copy(&mut std::io::stdin().lock(), &mut file)
            .and_then(|_| file.flush())
            .map_err(|err| io_error("cannot copy standard input to", &spooled.0, err))?;
        Ok(spooled)
    }
}

impl Drop for Spooled {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `memmachine import`: `input` (`-`: standard input) into the store at `location`
/// (created when there is none), with progress on standard error.
pub async fn import_from(
    location: &StoreLocation,
    input: &str,
    options: &ImportOptions,
) -> Result<Counts> {
    let spooled = if input == "-" {
        Some(Spooled::stdin()?)
    } else {
        None
    };
    let path = spooled
        .as_ref()
        .map_or_else(|| PathBuf::from(input), |s| s.0.clone());
    if !path.is_file() {
        return Err(Error::NotFound(format!("no file {}", path.display())));
    }
    let store = crate::store::open(location, true).await?;
    let mut progress = |counts: &Counts| eprintln!("imported {counts}");
    let result = import(store.as_ref(), &path, options, &mut progress).await;
    closing(store, result).await
}
