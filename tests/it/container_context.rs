//! The Dockerfile's build stage gets everything the build reads, checked without building
//! an image: a directory holding exactly what its COPY lines copy (minus `.dockerignore`)
//! must resolve as a workspace (`cargo metadata --locked --offline`), and every file the
//! compiled sources include (`include_str!`/`include_bytes!`) or a build script names must
//! be in it. The image once failed at `cargo metadata` because `crates/` and `ui/` were not
//! copied (issue 43); `scripts/container.sh build` builds the real image, outside the suite.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::child::Run;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_build_stage_copies_what_the_build_reads() {
    let root = repo_root();
    let dockerfile = std::fs::read_to_string(root.join("Dockerfile")).unwrap();
    let ignore =
        Ignore::parse(&std::fs::read_to_string(root.join(".dockerignore")).unwrap_or_default());
    let context = tempfile::tempdir().unwrap();
    let copies = build_stage_copies(&dockerfile);
    assert!(
        !copies.is_empty(),
        "the Dockerfile's first stage copies nothing"
    );
    for copy in &copies {
        assemble(&root, context.path(), copy, &ignore);
    }

    let mut problems = Vec::new();
    let metadata = cargo_metadata(context.path());
    if !metadata.status.success() {
        problems.push(format!(
            "`cargo metadata --locked --offline` fails on what the Dockerfile copies:\n{}",
            String::from_utf8_lossy(&metadata.stderr).trim()
        ));
    }
    // The members as the repository declares them: the context may lack some.
    for file in compiled_sources(&root) {
        for wanted in files_named_by(&root, &file) {
            if !context.path().join(&wanted).exists() {
                problems.push(format!(
                    "{} reads {}, which the Dockerfile does not copy",
                    file.display(),
                    wanted.display()
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "the Dockerfile's build stage (COPY {}) misses what the build needs:\n- {}",
        copies
            .iter()
            .map(|c| c.sources.join(" "))
            .collect::<Vec<_>>()
            .join(", "),
        problems.join("\n- ")
    );
}

/// Docker's own parser, in the part this Dockerfile uses, checked on a made-up file.
#[test]
fn copies_are_read_from_the_first_stage_only() {
    let dockerfile = "ARG BASE=x\nFROM ${BASE} AS build\nWORKDIR /src\n\
        COPY a.toml \\\n  b.lock ./\n# COPY nothing ./\nCOPY --chown=1:1 [\"dir\", \"./dir\"]\n\
        COPY --from=other /x /y\nRUN true\nFROM runtime\nCOPY late /late\n";
    let copies = build_stage_copies(dockerfile);
    let seen: Vec<(Vec<String>, String)> =
        copies.into_iter().map(|c| (c.sources, c.dest)).collect();
    assert_eq!(
        seen,
        vec![
            (vec!["a.toml".into(), "b.lock".into()], "./".into()),
            (vec!["dir".into()], "./dir".into()),
        ]
    );
    let ignore = Ignore::parse("target/\n# comment\n*.log\n!keep.log\n/docs/**/*.md\n");
    assert!(ignore.excludes(Path::new("target/release/x")));
    assert!(ignore.excludes(Path::new("a.log")));
    assert!(!ignore.excludes(Path::new("keep.log")));
    assert!(ignore.excludes(Path::new("docs/a/b/c.md")));
    assert!(!ignore.excludes(Path::new("src/target.rs")));
}

/// `COPY src... dest` of the build stage (without `--from`), relative to its WORKDIR.
struct Copy {
    sources: Vec<String>,
    dest: String,
}

/// The COPY instructions of the first stage: continuation lines joined, comments skipped.
fn build_stage_copies(dockerfile: &str) -> Vec<Copy> {
    let mut instructions = Vec::new();
    let mut current = String::new();
    for line in dockerfile.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(head) => {
                current.push_str(head);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                instructions.push(std::mem::take(&mut current));
            }
        }
    }
    let mut stages = 0;
    let mut copies = Vec::new();
    for instruction in instructions {
        let mut words = instruction.split_whitespace();
        let keyword = words.next().unwrap_or("").to_ascii_uppercase();
        if keyword == "FROM" {
            stages += 1;
            continue;
        }
        if keyword != "COPY" && keyword != "ADD" || stages != 1 {
            continue;
        }
        let rest: Vec<&str> = words.collect();
        let flags: Vec<&&str> = rest.iter().take_while(|w| w.starts_with("--")).collect();
        if flags.iter().any(|f| f.starts_with("--from")) {
            continue;
        }
        let args = rest[flags.len()..].join(" ");
        let mut paths: Vec<String> = if args.starts_with('[') {
            serde_json::from_str(&args)
                .unwrap_or_else(|err| panic!("the Dockerfile's `{instruction}`: {err}"))
        } else {
            args.split_whitespace().map(String::from).collect()
        };
        let dest = paths.pop().expect("COPY names a destination");
        copies.push(Copy {
            sources: paths,
            dest,
        });
    }
    copies
}

/// Copies one COPY's sources from the repository into `context` at its destination,
/// as Docker does: a directory's contents into the destination directory.
fn assemble(root: &Path, context: &Path, copy: &Copy, ignore: &Ignore) {
    assert!(
        !copy.dest.starts_with('/'),
        "COPY to an absolute path ({}): this test maps destinations under WORKDIR",
        copy.dest
    );
    let dest = context.join(&copy.dest);
    let into_dir = copy.dest.ends_with('/') || copy.sources.len() > 1;
    for source in &copy.sources {
        assert!(
            !source.contains(['*', '?', '[']),
            "COPY with a wildcard ({source}): teach this test to expand it"
        );
        let from = root.join(source);
        assert!(
            from.exists(),
            "the Dockerfile copies {source}, which is not in the repository"
        );
        if from.is_dir() {
            copy_tree(root, &from, &dest, ignore);
        } else if !ignore.excludes(Path::new(source)) {
            let to = if into_dir {
                dest.join(from.file_name().unwrap())
            } else {
                dest.clone()
            };
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(&from, &to).unwrap();
        }
    }
}

fn copy_tree(root: &Path, from: &Path, to: &Path, ignore: &Ignore) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        if ignore.excludes(path.strip_prefix(root).unwrap()) {
            continue;
        }
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_tree(root, &path, &target, ignore);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

/// `cargo metadata` for the platform this runs on (all platforms would need crates that
/// were never downloaded here, as `--offline` forbids fetching them).
fn cargo_metadata(dir: &Path) -> std::process::Output {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let rustc = Command::new(std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into()))
        .arg("-vV")
        .run();
    let host = String::from_utf8_lossy(&rustc.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        .expect("rustc -vV names the host");
    Command::new(cargo)
        .args(["metadata", "--locked", "--offline", "--format-version", "1"])
        .args(["--filter-platform", &host])
        .arg("--manifest-path")
        .arg(dir.join("Cargo.toml"))
        .current_dir(dir)
        .run()
}

/// The sources the image's build compiles: every workspace member's `src/` and build
/// script, as the repository declares them (relative to the repository).
fn compiled_sources(root: &Path) -> Vec<PathBuf> {
    let manifest: toml::Table =
        toml::from_str(&std::fs::read_to_string(root.join("Cargo.toml")).unwrap()).unwrap();
    let members = manifest["workspace"]["members"]
        .as_array()
        .expect("the workspace lists its members");
    let mut files = Vec::new();
    for member in members {
        let dir = normalize(Path::new(member.as_str().unwrap()));
        if root.join(&dir).join("build.rs").exists() {
            files.push(dir.join("build.rs"));
        }
        rust_files(root, &dir.join("src"), &mut files);
    }
    files
}

fn rust_files(root: &Path, dir: &Path, into: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
        return;
    };
    for entry in entries {
        let name = entry.unwrap().file_name();
        let path = dir.join(&name);
        if root.join(&path).is_dir() {
            rust_files(root, &path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

/// The repository files `file` reads at build time: the paths of its
/// `include_str!`/`include_bytes!` (relative to the file), and, in a build script, every
/// string literal that names a file or directory of its package (protos, their root).
fn files_named_by(root: &Path, file: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string(root.join(file)).unwrap();
    let dir = file.parent().unwrap();
    let mut named = Vec::new();
    for macro_name in ["include_str!(", "include_bytes!("] {
        for (at, _) in text.match_indices(macro_name) {
            let arg = text[at + macro_name.len()..].trim_start();
            let literal = arg
                .strip_prefix('"')
                .and_then(|a| a.split_once('"'))
                .map(|(path, _)| path)
                .unwrap_or_else(|| {
                    panic!(
                        "{}: a {macro_name}..) of a computed path: teach this test to read it",
                        file.display()
                    )
                });
            named.push(normalize(&dir.join(literal)));
        }
    }
    if file.file_name().is_some_and(|n| n == "build.rs") {
        for literal in text.split('"').skip(1).step_by(2) {
            let path = dir.join(literal);
            if !literal.is_empty()
                && !literal.contains(['{', '}', '='])
                && root.join(&path).exists()
            {
                named.push(normalize(&path));
            }
        }
    }
    named
}

/// `src/rest/../../ui/x` → `ui/x`.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// `.dockerignore`: patterns matched against paths relative to the context (a pattern
/// that matches a directory excludes what is under it), `!` re-includes, the last match wins.
struct Ignore {
    rules: Vec<(bool, Vec<String>)>,
}

impl Ignore {
    fn parse(text: &str) -> Ignore {
        let rules = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|line| {
                let (keep, pattern) = match line.strip_prefix('!') {
                    Some(p) => (true, p),
                    None => (false, line),
                };
                let parts = pattern
                    .trim_matches('/')
                    .split('/')
                    .filter(|p| !p.is_empty() && *p != ".")
                    .map(String::from)
                    .collect();
                (!keep, parts)
            })
            .collect();
        Ignore { rules }
    }

    fn excludes(&self, path: &Path) -> bool {
        let parts: Vec<String> = path
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let mut excluded = false;
        for (exclude, pattern) in &self.rules {
            // The path or one of its ancestors matches.
            if (1..=parts.len()).any(|n| glob_parts(pattern, &parts[..n])) {
                excluded = *exclude;
            }
        }
        excluded
    }
}

/// Path segments against pattern segments: `**` any number of segments, `*`/`?` within one.
fn glob_parts(pattern: &[String], parts: &[String]) -> bool {
    match pattern.split_first() {
        None => parts.is_empty(),
        Some((first, rest)) if first == "**" => {
            (0..=parts.len()).any(|skip| glob_parts(rest, &parts[skip..]))
        }
        Some((first, rest)) => match parts.split_first() {
            Some((part, others)) => {
                glob(first.as_bytes(), part.as_bytes()) && glob_parts(rest, others)
            }
            None => false,
        },
    }
}

fn glob(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((b'*', rest)) => (0..=text.len()).any(|skip| glob(rest, &text[skip..])),
        Some((b'?', rest)) => !text.is_empty() && glob(rest, &text[1..]),
        Some((c, rest)) => text.first() == Some(c) && glob(rest, &text[1..]),
    }
}
